"""Tracker mirroring: a run's config, step metrics and evaluations copied to MLflow, Weights &
Biases or TensorBoard as they are recorded, through each tracker's own client library.

The ``mirror`` config field names the targets, comma-separated, each ``kind`` or ``kind:where``:

- ``mlflow:FOLDER`` (MLflow's file store in FOLDER; default ``var/mlruns``) or
  ``mlflow:http://host:5000`` (a tracking server);
- ``wandb:FOLDER`` (offline: W&B's run files in FOLDER/wandb/, uploaded later with
  ``wandb sync``; default ``var/wandb``) or ``wandb:online`` (the logged-in W&B server);
- ``tensorboard:FOLDER`` (event files in FOLDER/<run name>/; default ``var/tensorboard``).

A tracker never fails or slows the run: ``MirrorRecorder`` wraps the run's recorder, hands each
event to one background thread per target through a bounded queue (``put_nowait``: a full queue
drops the event and counts it lost), and the thread retries a failed delivery with back-off. What
could not be delivered is counted (``lost``) and shown with the target's state (the CLI prints
it, the run page shows it). Each target's cursor (its tracker run id, the last step and
evaluation delivered) is saved in the run's output folder (``mirror.json``) after every delivery,
so a resumed run reopens the same tracker run and skips what the tracker already has: no
duplicates, and the steps after the cursor are the ones the resumed run records again.

Only the standard library is imported here (the web process validates ``mirror`` with
``parse_mirror``); each client library is imported by its target, in its thread.
"""

from __future__ import annotations

import json
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

KINDS = ("mlflow", "wandb", "tensorboard")
DEFAULT_WHERE = {"mlflow": "var/mlruns", "wandb": "var/wandb", "tensorboard": "var/tensorboard"}
# The MLflow experiment and W&B project a run goes to (overridden by MLflow's and W&B's own
# environment variables, MLFLOW_EXPERIMENT_NAME and WANDB_PROJECT).
PROJECT = "reinforce-ada"
# Events waiting for one target at most: past it an event is dropped and counted lost rather
# than held (a tracker down for a long run would otherwise grow the worker's memory).
QUEUE_LIMIT = 10_000
# Tries of one delivery while the tracker is healthy, with these waits between them (seconds).
# After a delivery failed every try the tracker counts as down: each later event gets one try
# until one succeeds, so an outage loses events at the rate they come instead of piling retries.
RETRY_WAITS = (0.5, 2.0, 8.0)
# At the end of the run, wait for a target to deliver what it still holds for as long as it
# makes progress, but no more than STALL_SECONDS without one delivery (a hanging server) and
# CLOSE_SECONDS in all; what is left is counted lost.
STALL_SECONDS = 10.0
CLOSE_SECONDS = 60.0
CURSOR_FILE = "mirror.json"


# --- the targets' spelling ------------------------------------------------------------------------

@dataclass(frozen=True)
class TargetSpec:
    kind: str
    where: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.where}"

    @property
    def is_url(self) -> bool:
        return self.where.startswith(("http://", "https://"))

    @property
    def is_folder(self) -> bool:
        """Whether ``where`` is a folder on this machine (not a server)."""
        return not self.is_url and not (self.kind == "wandb" and self.where == "online")


def parse_mirror(value: str) -> list[TargetSpec]:
    """The targets ``value`` names, in order; ValueError with the reason for a bad one."""
    specs: list[TargetSpec] = []
    for entry in (e.strip() for e in value.split(",")) if value.strip() else ():
        kind, _, where = entry.partition(":")
        kind, where = kind.strip(), where.strip()
        if kind not in KINDS:
            raise ValueError(f"unknown tracker {kind!r} in {entry!r}; choose one of "
                             f"{', '.join(KINDS)}, as kind or kind:where")
        spec = TargetSpec(kind, where or DEFAULT_WHERE[kind])
        if spec.is_url and kind != "mlflow":
            raise ValueError(f"{entry!r}: only mlflow takes a server URL (wandb:online uses "
                             "the logged-in W&B server)")
        if "\x00" in spec.where:
            raise ValueError("a path cannot contain a NUL character")
        if spec in specs:
            raise ValueError(f"{spec} is named twice")
        specs.append(spec)
    return specs


def mirror_problem(value: str) -> str | None:
    """Why ``value`` is not a valid ``mirror`` field, or None."""
    try:
        parse_mirror(value)
    except ValueError as exc:
        return str(exc)
    return None


# --- the targets ---------------------------------------------------------------------------------

class Target(Protocol):
    """One tracker behind one interface; every call comes from the target's own thread."""

    def prepare(self) -> None:
        """Import the client library (seconds, on a loaded machine tens of them): local work
        only, which the end of the run waits for as it does not for a tracker's answer."""
        ...

    def open(self, run_id: str | None, name: str, params: Mapping[str, Any],
             tags: Mapping[str, str]) -> str:
        """Start the tracker run (or reopen ``run_id``, a resumed run's), log ``params`` and
        ``tags`` when new; return the tracker's run id."""
        ...

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def finish(self) -> None: ...

    def link(self) -> str:
        """Where to look at the tracker run (a folder or a URL)."""
        ...


class MlflowTarget:
    """MLflow through ``MlflowClient`` (no fluent API: its active run is global, and the worker
    may mirror from several threads). A folder is MLflow's file store: mlflow-skinny has no
    SQL store (no SQLAlchemy), and a folder needs no server, which the issue asks for by
    default; MLflow 3 keeps the file store in maintenance mode and opens it only with
    MLFLOW_ALLOW_FILE_STORE=true, which this target sets for its own use."""

    def __init__(self, spec: TargetSpec) -> None:
        self.spec = spec
        self.uri = spec.where if spec.is_url else str(Path(spec.where).resolve())
        self.run_id = ""
        self.experiment_id = ""

    def prepare(self) -> None:
        import mlflow.entities  # noqa: F401
        from mlflow import MlflowClient  # noqa: F401

    def open(self, run_id: str | None, name: str, params: Mapping[str, Any],
             tags: Mapping[str, str]) -> str:
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        # This mirror retries itself (RETRY_WAITS); MLflow's own default is 7 retries with
        # exponential back-off per request, minutes of a hanging thread per event.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        from mlflow import MlflowClient
        from mlflow.entities import Param, RunStatus

        if not self.spec.is_url:
            Path(self.uri).mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri=self.uri)
        if run_id:
            self.run_id = run_id
            self.experiment_id = self.client.get_run(run_id).info.experiment_id
            self.client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))
            return run_id
        # The experiment is named explicitly: the file store has no default experiment 0.
        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or PROJECT
        found = self.client.get_experiment_by_name(experiment)
        if found is None:
            try:
                self.experiment_id = self.client.create_experiment(experiment)
            except Exception:  # noqa: BLE001 - another run created it meanwhile
                self.experiment_id = self.client.get_experiment_by_name(experiment).experiment_id
        else:
            self.experiment_id = found.experiment_id
        run = self.client.create_run(self.experiment_id, run_name=name, tags=dict(tags))
        self.run_id = run.info.run_id
        items = [Param(k, _param_text(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # log_batch takes 100 params at most
            self.client.log_batch(self.run_id, params=items[i:i + 100])
        return self.run_id

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(mlflow_name(k), v, now, step)
                                                    for k, v in metrics.items()])

    def finish(self) -> None:
        self.client.set_terminated(self.run_id, "FINISHED")

    def link(self) -> str:
        if self.spec.is_url:
            return (f"{self.uri.rstrip('/')}/#/experiments/{self.experiment_id}"
                    f"/runs/{self.run_id}")
        return f"{self.uri}/{self.experiment_id}/{self.run_id}"


class WandbTarget:
    """Weights & Biases through ``wandb.init``/``run.log``: offline into a folder (``wandb
    sync FOLDER/wandb/offline-run-*`` uploads it later), or online. A resumed run passes the
    same id (``resume="allow"``): offline, each resume writes one more offline-run folder of
    that id, and ``wandb sync`` uploads them all into the one run."""

    def __init__(self, spec: TargetSpec) -> None:
        self.spec = spec
        self.online = spec.where == "online"
        self.folder = None if self.online else Path(spec.where).resolve()
        self.run: Any = None

    def prepare(self) -> None:
        import wandb  # noqa: F401

    def open(self, run_id: str | None, name: str, params: Mapping[str, Any],
             tags: Mapping[str, str]) -> str:
        import wandb
        from wandb.sdk.lib.runid import generate_id

        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            mode="online" if self.online else "offline",
            dir=None if self.folder is None else str(self.folder),
            project=os.environ.get("WANDB_PROJECT") or PROJECT, name=name,
            id=run_id or generate_id(), resume="allow", reinit="create_new",
            config=dict(params), notes=tags.get("rada.link") or None,
            tags=[f"{k}={v}"[:64] for k, v in tags.items() if k != "rada.link"],
            # No system metrics, package list or machine scan: a run's mirror is its record.
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True,
                                    x_save_requirements=False, x_disable_meta=True,
                                    x_disable_machine_info=True, save_code=False,
                                    disable_git=True))
        return str(self.run.id)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log(dict(metrics), step=step)

    def finish(self) -> None:
        self.run.finish()

    def link(self) -> str:
        return str(self.run.url) if self.online else str(self.run.dir).removesuffix("/files")


class TensorboardTarget:
    """TensorBoard event files written by its own ``EventFileWriter``, in FOLDER/<run name>/:
    each metric a scalar summary (float64, so the value read back is the value recorded), the
    config and the links as the HParams plugin's session (``hparams_pb``). The tracker's run
    id is the run's folder name; a resumed run appends a new event file to it, which
    TensorBoard reads as one run."""

    def __init__(self, spec: TargetSpec) -> None:
        self.spec = spec
        self.folder = Path(spec.where).resolve()
        self.writer: Any = None
        self.run_id = ""

    def prepare(self) -> None:
        import tensorboard.plugins.hparams.summary_v2  # noqa: F401
        import tensorboard.summary.writer.event_file_writer  # noqa: F401

    def open(self, run_id: str | None, name: str, params: Mapping[str, Any],
             tags: Mapping[str, str]) -> str:
        from tensorboard.compat.proto import event_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.run_id = run_id or _folder_name(name)
        self.writer = EventFileWriter(str(self.folder / self.run_id), flush_secs=2)
        if not run_id:
            from tensorboard.plugins.hparams.summary_v2 import hparams_pb

            session = {k: v if isinstance(v, (bool, int, float, str)) else _param_text(v)
                       for k, v in params.items()}
            session.update(tags)
            self.writer.add_event(event_pb2.Event(wall_time=time.time(), step=0,
                                                  summary=hparams_pb(session)))
        return self.run_id

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        import numpy as np
        from tensorboard.compat.proto import event_pb2
        from tensorboard.plugins.scalar.metadata import create_summary_metadata
        from tensorboard.util.tensor_util import make_tensor_proto

        event = event_pb2.Event(wall_time=time.time(), step=step)
        for key, value in metrics.items():
            event.summary.value.add(tag=key, tensor=make_tensor_proto(np.float64(value)),
                                    metadata=create_summary_metadata(key, ""))
        self.writer.add_event(event)

    def finish(self) -> None:
        self.writer.close()

    def link(self) -> str:
        return str(self.folder / self.run_id)


TARGETS: dict[str, Callable[[TargetSpec], Target]] = {
    "mlflow": MlflowTarget, "wandb": WandbTarget, "tensorboard": TensorboardTarget}


def mlflow_name(key: str) -> str:
    """``key`` as MLflow accepts a metric's name (alphanumerics and ``_-. :/``): ``@`` of the
    evaluations' ``avg@k`` and ``pass@k`` reads ``_at_`` (``eval/pass_at_8``), anything else
    outside the set ``_``."""
    key = key.replace("@", "_at_")
    return "".join(c if c.isalnum() or c in "_-. :/" else "_" for c in key)


def _param_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _folder_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".") or "run"


def numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The metrics a tracker takes: finite numbers (the platform stores a NaN as null, and a
    tracker's chart has nothing to draw of one)."""
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


# --- one target's background delivery ----------------------------------------------------------

_STOP = object()


class Channel:
    """One target's thread: opens the tracker run, delivers the queued events in order with
    retries, keeps the cursor (``state``) and counts what it lost."""

    def __init__(self, spec: TargetSpec, cursor: Mapping[str, Any], name: str,
                 params: Mapping[str, Any], tags: Mapping[str, str],
                 saved: Callable[[], None], root: str | Path | None = None) -> None:
        self.spec, self.name, self.params, self.tags, self.saved = spec, name, params, tags, saved
        where = spec.where
        if spec.is_folder and root is not None:
            where = str(Path(root) / where)
        self.target: Target = TARGETS[spec.kind](TargetSpec(spec.kind, where))
        self.lock = threading.Lock()
        self.state: dict[str, Any] = {
            "target": str(spec), "run_id": cursor.get("run_id") or "",
            "link": cursor.get("link") or "", "last_step": int(cursor.get("last_step", 0)),
            "last_eval_step": int(cursor.get("last_eval_step", -1)),
            "lost": int(cursor.get("lost", 0)), "error": ""}
        self.queue: queue.Queue[Any] = queue.Queue(QUEUE_LIMIT)
        self.opened = False
        self.healthy = True
        self.abandoned = threading.Event()
        self.busy = False
        self.prepared = False
        self.delivered_at = time.monotonic()
        self.thread = threading.Thread(target=self._work, name=f"mirror-{spec.kind}",
                                       daemon=True)
        self.thread.start()

    # -- the training thread's side ------------------------------------------------------------
    def put(self, kind: str, step: int, metrics: dict[str, float]) -> None:
        """Queue an event unless the tracker already has it (a resumed run's repeat); never
        blocks: a full queue counts the event lost."""
        last = self.state["last_step" if kind == "step" else "last_eval_step"]
        if step <= last or not metrics:
            return
        try:
            self.queue.put_nowait((kind, step, metrics))
        except queue.Full:
            self._lose(1, "queue full: the tracker falls behind")

    def close(self, stall_seconds: float, close_seconds: float) -> None:
        """Let the thread deliver what it holds and finish the tracker run, while it makes
        progress (once its client library is imported, ``stall_seconds`` at most without a
        tracker call coming back; ``close_seconds`` in all); count what is left lost."""
        try:
            self.queue.put(_STOP, timeout=stall_seconds)
        except queue.Full:
            pass
        start = time.monotonic()
        while self.thread.is_alive() and time.monotonic() - start < close_seconds:
            if self.prepared and \
                    time.monotonic() - max(start, self.delivered_at) > stall_seconds:
                break
            self.thread.join(0.05)
        if self.thread.is_alive():
            self.abandoned.set()
            with self.lock:  # the event in the thread's hands, unless it settled it meanwhile
                in_flight, self.busy = self.busy, False
            left = sum(1 for item in _drain(self.queue) if item is not _STOP) + int(in_flight)
            self._lose(left, self.state["error"] or "the tracker did not answer in time")

    # -- the thread ----------------------------------------------------------------------------
    def _work(self) -> None:
        # Open at once: the client's import and the tracker's first answer take seconds, which
        # then overlap the run's start instead of its end.
        try:
            self.target.prepare()
            # A server may hang from its first answer on; a folder's first open is local work
            # (W&B's offline start spawns its service), waited for as the import is.
            self.prepared = not self.spec.is_folder
            self._open()
        except Exception as exc:  # noqa: BLE001 - retried with the first event
            self._set(error=_why(exc))
        self.delivered_at = time.monotonic()
        self.prepared = True
        while not self.abandoned.is_set():
            item = self.queue.get()
            if item is _STOP:
                break
            with self.lock:
                self.busy = True
            self._deliver(*item)
        if self.opened and not self.abandoned.is_set():
            try:
                self.target.finish()
            except Exception as exc:  # noqa: BLE001 - the tracker's failure, never the run's
                self._set(error=_why(exc))
        self.delivered_at = time.monotonic()

    def _deliver(self, kind: str, step: int, metrics: dict[str, float]) -> None:
        waits = RETRY_WAITS if self.healthy else ()
        for attempt in range(len(waits) + 1):
            if self.abandoned.is_set():
                break
            try:
                if not self.opened:
                    self._open()
                self.target.log(step, metrics)
            except Exception as exc:  # noqa: BLE001 - any client error is the tracker's
                self.delivered_at = time.monotonic()  # it answered, with an error
                self._set(error=_why(exc))
                if attempt < len(waits) and not self.abandoned.wait(waits[attempt]):
                    continue
                break
            else:
                self.healthy = True
                self.delivered_at = time.monotonic()
                counted = not self._settle()  # close() counted it lost meanwhile: it is not
                with self.lock:
                    self.state["lost"] -= int(counted)
                # ``error`` stays the last one seen: next to ``lost``, it says why.
                self._set(**{"last_step" if kind == "step" else "last_eval_step": step})
                return
        self.healthy = False
        self.delivered_at = time.monotonic()
        if self._settle():
            self._lose(1, self.state["error"])

    def _settle(self) -> bool:
        """Take the event in hand as settled; False when ``close`` counted it already (the
        thread was abandoned meanwhile)."""
        with self.lock:
            mine, self.busy = self.busy, False
        return mine

    def _open(self) -> None:
        run_id = self.target.open(self.state["run_id"] or None, self.name, self.params,
                                  self.tags)
        self.opened = True
        self._set(run_id=run_id, link=self.target.link())

    def _set(self, **changes: Any) -> None:
        with self.lock:
            self.state.update(changes)
        self.saved()

    def _lose(self, count: int, why: str) -> None:
        if count:
            with self.lock:
                self.state["lost"] += count
                self.state["error"] = why
            self.saved()


def _drain(q: queue.Queue[Any]) -> Iterator[Any]:
    while True:
        try:
            yield q.get_nowait()
        except queue.Empty:
            return


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300]


# --- the recorder -------------------------------------------------------------------------------

class MirrorRecorder:
    """A run's recorder (``trainer.types.Recorder``) that also mirrors each step and evaluation
    to the targets, after the recorder it wraps has recorded it (so a tracker holds what the
    run's record holds). Every other call and attribute is the wrapped recorder's."""

    def __init__(self, inner: Any, channels: list[Channel], cursor_path: Path,
                 on_state: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
        self.inner, self.channels, self.cursor_path = inner, channels, cursor_path
        self.on_state = on_state
        self._save_lock = threading.Lock()
        self._published: list[dict[str, Any]] | None = None

    def __getattr__(self, name: str) -> Any:  # before_checkpoint and the like
        return getattr(self.inner, name)

    def on_round(self, step: int, stat: Any) -> None:
        self.inner.on_round(step, stat)

    def on_step(self, record: Any) -> None:
        self.inner.on_step(record)
        metrics = numeric(record.metrics)
        for channel in self.channels:
            channel.put("step", record.step, metrics)
        self.publish()

    def on_eval(self, record: Any) -> None:
        self.inner.on_eval(record)
        metrics = {f"eval/{k}": v for k, v in numeric(record.metrics).items()}
        for channel in self.channels:
            channel.put("eval", record.step, metrics)
        self.publish()

    def on_checkpoint(self, record: Any) -> None:
        self.inner.on_checkpoint(record)

    def state(self) -> list[dict[str, Any]]:
        """Each target's state: target, run_id, link, last_step, last_eval_step, lost, error."""
        out = []
        for channel in self.channels:
            with channel.lock:
                out.append(dict(channel.state))
        return out

    def save(self) -> None:
        """Write the cursor (every target's state) to ``mirror.json``, atomically."""
        with self._save_lock:
            tmp = self.cursor_path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"targets": self.state()}, indent=1))
            tmp.replace(self.cursor_path)

    def publish(self) -> None:
        """Hand the state to ``on_state`` (the platform's run row) when it changed; called from
        the training thread, so the callback never runs in a tracker's thread."""
        state = self.state()
        if self.on_state is not None and state != self._published:
            self._published = state
            self.on_state(state)

    def close(self, stall_seconds: float = STALL_SECONDS,
              close_seconds: float = CLOSE_SECONDS) -> list[dict[str, Any]]:
        """Wait for the targets (in parallel, within the limits ``Channel.close`` says), save
        the cursor, publish and return the final state."""
        closers = [threading.Thread(target=c.close, args=(stall_seconds, close_seconds))
                   for c in self.channels]
        for t in closers:
            t.start()
        for t in closers:
            t.join()
        self.save()
        self.publish()
        return self.state()


def read_cursor(out_dir: str | Path) -> dict[str, dict[str, Any]]:
    """The saved state of each target of the run in ``out_dir``, by target."""
    path = Path(out_dir) / CURSOR_FILE
    try:
        targets = json.loads(path.read_text())["targets"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {t["target"]: t for t in targets if isinstance(t, dict) and "target" in t}


@contextmanager
def mirrored(spec: str, recorder: Any, out_dir: str | Path, *, name: str,
             params: Mapping[str, Any], tags: Mapping[str, str] | None = None,
             resume: bool = False,
             on_state: Callable[[list[dict[str, Any]]], None] | None = None,
             stall_seconds: float = STALL_SECONDS,
             close_seconds: float = CLOSE_SECONDS,
             root: str | Path | None = None) -> Iterator[Any]:
    """``recorder`` mirrored to the targets ``spec`` names (``recorder`` itself when none):
    the tracker run is called ``name``, logs ``params`` (the config) and ``tags`` (the
    platform's run id, the link to its page). ``resume``: continue the tracker runs of the
    cursor saved in ``out_dir``. ``on_state``: called with every target's state when it
    changed, from the training thread (the platform's run row). ``root``: what relative
    folders are relative to (else the working directory). On exit the targets get
    ``stall_seconds``/``close_seconds`` to deliver what they hold (``Channel.close``)."""
    specs = parse_mirror(spec)
    if not specs:
        yield recorder
        return
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cursor = read_cursor(out) if resume else {}
    box: list[MirrorRecorder] = []

    def saved() -> None:
        if box:
            box[0].save()

    channels = [Channel(s, cursor.get(str(s), {}), name, params, dict(tags or {}), saved, root)
                for s in specs]
    mirror = MirrorRecorder(recorder, channels, out / CURSOR_FILE, on_state)
    box.append(mirror)
    mirror.save()
    try:
        yield mirror
    finally:
        mirror.close(stall_seconds, close_seconds)
