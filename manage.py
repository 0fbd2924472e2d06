#!/usr/bin/env python
"""Django's command-line utility. platform/ goes on sys.path (it is no package: the name would
shadow the standard `platform` module)."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "platform"))
sys.path.insert(0, str(ROOT))

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
