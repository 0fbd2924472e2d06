"""The web process imports trainer.config (and may import trainer): neither pulls in torch."""

from __future__ import annotations

import subprocess
import sys


def test_light_imports_do_not_load_torch() -> None:
    code = ("import sys, trainer, trainer.config, trainer.types, trainer.sampler, "
            "trainer.advantages, trainer.recorders, trainer.loop, trainer.cli; "
            "assert callable(trainer.train); "
            "heavy = [m for m in ('torch', 'transformers', 'django', 'celery') "
            "if m in sys.modules]; print(heavy); assert not heavy, heavy")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
