"""The web process imports trainer.config, and validates uploads with trainer.data: neither path
may pull in the deep-learning stack (or Django/Celery, which trainer never imports)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "transformers", "django", "celery")


def assert_light(statements: str) -> None:
    """Run ``statements`` in a fresh interpreter and fail if any HEAVY module got imported."""
    code = (f"import sys\n{statements}\n"
            f"heavy = [m for m in {HEAVY!r} if m in sys.modules]; assert not heavy, heavy")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_light_imports_do_not_load_torch() -> None:
    assert_light("import trainer, trainer.config, trainer.types, trainer.sampler, "
                 "trainer.advantages, trainer.recorders, trainer.loop, trainer.cli\n"
                 "assert callable(trainer.train)")


def test_upload_validation_path_stays_light() -> None:
    assert_light("import trainer.data, trainer.tasks, trainer.verifiers, trainer.warmstart, "
                 "trainer.evaluate, trainer.backends\n"
                 "trainer.data.load_prompts_from_bytes(b'{\"prompt\": \"1+1=\", "
                 "\"answer\": \"2\"}', 'x.jsonl')")
