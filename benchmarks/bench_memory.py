"""Peak resident memory (RSS) of a 20-step built-in CPU run through the CLI.

    python benchmarks/bench_memory.py [--steps 20] [--algorithm ada-balance]

Runs ``python -m trainer run`` as a child process with the built-in defaults (tiny model,
arithmetic task, B=32, n=4, M=8, N=4) and reports the child's peak RSS from ``getrusage``.
Target: under 2 GB. Run ``python -m trainer warmstart`` first if the built-in model is missing.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--algorithm", default="ada-balance")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "run.toml"
        cfg.write_text(f'algorithm = "{args.algorithm}"\ntotal_steps = {args.steps}\n'
                       'lr = 2e-4\neval_every = 0\ndevice = "cpu"\n')
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "trainer", "run", "--config", str(cfg), "--out",
                        str(Path(tmp) / "out"), "--no-progress"], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    print("| run | steps | wall s | peak RSS MiB |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| built-in {args.algorithm}, CPU | {args.steps} | {wall:.1f} | {peak_kib / 1024:.0f} |")


if __name__ == "__main__":
    main()
