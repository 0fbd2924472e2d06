import sys

from rada.cli import main

sys.exit(main())
