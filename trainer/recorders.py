"""Recorders that a training run emits its events to (the platform's worker has its own, writing
to PostgreSQL): ``JsonlRecorder`` for the CLI, ``ListRecorder`` and ``NullRecorder`` for tests."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from trainer.types import CheckpointRecord, EvalRecord, RoundStat, StepRecord


def event(kind: str, payload: Any, **extra: Any) -> dict[str, Any]:
    """One event as a plain dict with a ``type`` key (the JSONL line format)."""
    return {"type": kind, **extra, **dataclasses.asdict(payload)}


class NullRecorder:
    def on_round(self, step: int, stat: RoundStat) -> None:
        pass

    def on_step(self, record: StepRecord) -> None:
        pass

    def on_checkpoint(self, record: CheckpointRecord) -> None:
        pass

    def on_eval(self, record: EvalRecord) -> None:
        pass


class ListRecorder:
    """Keeps every call's record, in order, as (type, step, record) tuples."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, Any]] = []

    def on_round(self, step: int, stat: RoundStat) -> None:
        self.events.append(("round", step, stat))

    def on_step(self, record: StepRecord) -> None:
        self.events.append(("step", record.step, record))

    def on_checkpoint(self, record: CheckpointRecord) -> None:
        self.events.append(("checkpoint", record.step, record))

    def on_eval(self, record: EvalRecord) -> None:
        self.events.append(("eval", record.step, record))

    def of_type(self, kind: str) -> list[Any]:
        return [rec for t, _, rec in self.events if t == kind]

    @property
    def steps(self) -> list[StepRecord]:
        return self.of_type("step")


class JsonlRecorder:
    """Appends one JSON object per event to ``path`` (``events.jsonl``), flushed per event so a
    crash loses at most the event being written. Appending lets a resumed run continue the file."""

    def __init__(self, path: str | Path, *, resume_step: int | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            self._truncate_after(resume_step)
        self._fh = open(self.path, "a", encoding="utf-8")  # closed in close()

    def _truncate_after(self, step: int) -> None:
        """Drop events of steps after ``step``: a run resumed from that step's checkpoint redoes
        them, and each step must appear once. A torn last line (crash mid-write) goes too."""
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if int(obj.get("step", 0)) <= step:
                kept.append(line + "\n")
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        tmp.replace(self.path)

    def _write(self, obj: dict[str, Any]) -> None:
        self._fh.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._fh.flush()

    def on_round(self, step: int, stat: RoundStat) -> None:
        self._write(event("round", stat, step=step))

    def on_step(self, record: StepRecord) -> None:
        self._write(event("step", record))

    def on_checkpoint(self, record: CheckpointRecord) -> None:
        self._write(event("checkpoint", record))

    def on_eval(self, record: EvalRecord) -> None:
        self._write(event("eval", record))

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> JsonlRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_events(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
