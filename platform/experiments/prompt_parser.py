"""The child process that parses an uploaded prompt file, with its memory and CPU bounded by
construction (issue 32): a 757-byte Parquet file once cost the web worker 1.4 GB and 30 s before
it was refused, and four of them at once 3.5 GB.

    python -m experiments.prompt_parser FILE FILENAME SET_ID --limits JSON

Before it opens the file the process caps its own address space (``RLIMIT_AS``) and CPU time
(``RLIMIT_CPU``), so whatever a file decompresses to, the process fails, not the machine; and it
is a process of its own, so the web worker that started it never holds what it decoded. It
imports neither Django nor the platform's settings and gets no secret in its environment: the
parent passes the limits. It parses with ``trainer.data.iter_prompts`` (the CLI's rules, with the
upload's ``Limits``) and writes, on stdout, frames of one kind byte and a 4-byte big-endian
length:

- ``D``: prompts as PostgreSQL ``COPY`` text rows (prompt_set_id, index, text, answer, metadata),
  which the parent streams into the database unread;
- ``P``: progress, JSON ``{"rows": n, "fraction": f}`` (f: how far through the file, or null);
- ``R``: the result, last: JSON ``{"rows": n, "digest": hex}``, or ``{"error": reason}`` naming
  the line or row and the limit; with the process's peak resident size (``peak_rss_mib``).

The parent (``experiments.services.prompt_import``) reports a child that dies without a result
(a signal: the kernel's CPU limit) with the limits it ran under.
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import struct
import sys
from pathlib import Path
from typing import IO, Any

FRAME_HEADER = struct.Struct(">cI")
# Rows are written in frames of about this many bytes.
FRAME_BYTES = 256 * 2**10


class CpuLimitReached(Exception):
    pass


def row_problem(text: str, answer: str, metadata_json: str) -> str | None:
    """Why PostgreSQL could not store this prompt (its text and jsonb hold no NUL), or None."""
    if "\x00" in text or "\x00" in answer or "\\u0000" in metadata_json:
        return "contains a NUL character"
    return None


def copy_row(set_id: int, index: int, text: str, answer: str, metadata_json: str) -> str:
    """One row of ``COPY ... FROM STDIN`` in PostgreSQL's text format."""
    return "\t".join((str(set_id), str(index), _escape(text), _escape(answer),
                      _escape(metadata_json))) + "\n"


def _escape(value: str) -> str:
    return (value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            .replace("\r", "\\r"))


def limit_self(memory_bytes: int, cpu_seconds: int) -> None:
    """Cap this process's address space and CPU time. Past the soft CPU limit the kernel sends
    SIGXCPU (raised here as ``CpuLimitReached``), past the hard one, a second later, SIGKILL."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))

    def on_xcpu(signum: int, frame: Any) -> None:
        raise CpuLimitReached()

    signal.signal(signal.SIGXCPU, on_xcpu)


def write_frame(out: IO[bytes], kind: bytes, payload: bytes) -> None:
    out.write(FRAME_HEADER.pack(kind, len(payload)))
    out.write(payload)
    out.flush()


def parse(path: Path, filename: str, set_id: int, limits: Any, out: IO[bytes]) -> dict[str, Any]:
    """Parse the file into frames on ``out``; the result's dict (rows and digest)."""
    from trainer.data import SUFFIXES, iter_prompts
    from trainer.digest import PromptDigest

    digest = PromptDigest()
    size = path.stat().st_size
    chunks: list[str] = []
    pending = 0
    rows = 0
    with open(path, "rb") as stream:
        total = _parquet_rows(stream) if SUFFIXES.get(path.suffix.lower()) == "parquet" else None

        def flush() -> None:
            nonlocal pending
            write_frame(out, b"D", "".join(chunks).encode())
            chunks.clear()
            pending = 0
            fraction = rows / total if total else (stream.tell() / size if size else None)
            write_frame(out, b"P", json.dumps({"rows": rows, "fraction": fraction}).encode())

        for prompt in iter_prompts(stream, filename, limits=limits):
            metadata = json.dumps(dict(prompt.metadata or {}))
            problem = row_problem(prompt.text, prompt.answer, metadata)
            if problem:
                from trainer.data import DataError

                raise DataError(filename, f"prompt {rows + 1}", problem)
            line = copy_row(set_id, rows, prompt.text, prompt.answer, metadata)
            chunks.append(line)
            pending += len(line)
            digest.add(prompt.text, prompt.answer)
            rows += 1
            if pending >= FRAME_BYTES:
                flush()
        if chunks:
            flush()
    return {"rows": rows, "digest": digest.hexdigest()}


def _parquet_rows(stream: IO[bytes]) -> int | None:
    """The row count the file's footer declares (for progress only; iter_prompts checks it)."""
    try:
        import pyarrow.parquet as pq

        rows = int(pq.ParquetFile(stream).metadata.num_rows)
    except Exception:  # noqa: BLE001 - iter_prompts reports an unreadable file
        rows = None
    stream.seek(0)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Parse a prompt file in bounded memory.")
    parser.add_argument("path", type=Path)
    parser.add_argument("filename")
    parser.add_argument("set_id", type=int)
    parser.add_argument("--limits", required=True, help="JSON: trainer.data.Limits' fields, "
                        "memory_bytes and cpu_seconds")
    args = parser.parse_args(argv)
    given = json.loads(args.limits)
    memory, cpu = int(given.pop("memory_bytes")), int(given.pop("cpu_seconds"))
    limit_self(memory, cpu)
    out = sys.stdout.buffer
    from trainer.data import DataError, Limits

    try:
        result = parse(args.path, args.filename, args.set_id, Limits(**given), out)
    except DataError as exc:
        result = {"error": str(exc)}
    except MemoryError:
        result = {"error": f"{args.filename}: parsing it needed more than {memory / 2**20:,.0f} "
                           "MiB of memory, the limit (PROMPT_IMPORT_MAX_MEMORY_BYTES)"}
    except CpuLimitReached:
        result = {"error": f"{args.filename}: parsing it took more than {cpu:,} s of CPU time, "
                           "the limit (PROMPT_IMPORT_MAX_CPU_SECONDS)"}
    result["peak_rss_mib"] = peak_rss_mib()
    write_frame(out, b"R", json.dumps(result).encode())
    return 0


def peak_rss_mib() -> float | None:
    """This process's peak resident size since it started its program (VmHWM; getrusage's
    ru_maxrss also counts the parent's memory at the fork)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


if __name__ == "__main__":
    sys.exit(main())
