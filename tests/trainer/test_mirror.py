"""Tracker mirroring (trainer.mirror) with the trackers' real clients: a run crashes after its
third step, is resumed from the checkpoint of step 2 through the CLI (``--resume --mirror``),
and each tracker, read back with its own reader, holds the run's record value for value: every
step once, no gap, the evaluations, the config as parameters, the run's tags. A tracker that
refuses connections or never answers neither fails the run nor holds it: what it lost is
counted."""

from __future__ import annotations

import glob
import json
import socket
import struct
from pathlib import Path
from typing import Any

import pytest

from trainer.cli import main
from trainer.config import ConfigError, TrainConfig
from trainer.mirror import mirrored, parse_mirror, read_cursor
from trainer.recorders import JsonlRecorder, read_events

CONFIG = ('backend = "simulated"\nalgorithm = "ada-pos"\nbatch_size = 4\ntotal_steps = 4\n'
          'save_every = 2\neval_every = 2\ntask_num_prompts = 32\neval_num_prompts = 8\n')


class Crash(RuntimeError):
    pass


class CrashAt:
    """The run's recorder, until step ``step``'s records: then the process "dies"."""

    def __init__(self, inner: Any, step: int) -> None:
        self.inner, self.step = inner, step

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def on_step(self, record: Any) -> None:
        if record.step == self.step:
            raise Crash(f"killed at step {record.step}")
        self.inner.on_step(record)


def _train(config: TrainConfig, recorder: Any, out: Path, resume_from: Any = None) -> Any:
    from trainer.backends import make_backend
    from trainer.data import resolve_prompts
    from trainer.loop import train

    prompts, eval_prompts = resolve_prompts(config)
    backend = make_backend(config, prompts)
    try:
        return train(config, prompts, backend, recorder, out_dir=out,
                     eval_prompts=eval_prompts, resume_from=resume_from)
    finally:
        backend.close()


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory) -> dict[str, Any]:
    """One run mirrored to all three trackers, crashed after step 3 and resumed by the CLI;
    one wandb service for the module."""
    root = tmp_path_factory.mktemp("mirror")
    targets = [f"mlflow:{root / 'mlruns'}", f"tensorboard:{root / 'tb'}",
               f"wandb:{root / 'wandb'}"]
    (root / "run.toml").write_text(CONFIG)
    out = root / "out"
    config = TrainConfig.from_toml(root / "run.toml")
    with pytest.raises(Crash), JsonlRecorder(out / "events.jsonl") as rec, \
            mirrored(", ".join(targets), CrashAt(rec, 4), out, name="out",
                     params=config.to_dict(), tags={"rada.out": str(out)}) as recorder:
        _train(config, recorder, out)
    first = read_cursor(out)
    # What the tracker got before the crash: the resumed run records step 3 again (its timings
    # differ) and the tracker keeps the first, as a tracker never overwrites a step.
    before = [e for e in read_events(out / "events.jsonl") if e.get("step", 0) <= 3]
    assert [first[t]["last_step"] for t in targets] == [3, 3, 3]
    assert main(["run", "--config", str(root / "run.toml"), "--out", str(out), "--resume",
                 "--no-progress",
                 *(a for t in targets for a in ("--mirror", t))]) == 0
    return {"root": root, "out": out, "targets": targets, "first": first,
            "config": config,
            "events": before + [e for e in read_events(out / "events.jsonl")
                                if e.get("step", 0) > 3]}


def test_cli_resume_continues_the_same_tracker_runs(resumed_run) -> None:
    cursor = read_cursor(resumed_run["out"])
    for target in resumed_run["targets"]:
        state = cursor[target]
        assert state["run_id"] == resumed_run["first"][target]["run_id"] != ""
        assert (state["last_step"], state["last_eval_step"], state["lost"], state["error"]) \
            == (4, 4, 0, "")


def _record(events: list[dict[str, Any]]) -> dict[str, dict[int, float]]:
    """The run's record as {metric: {step: value}}, steps and evaluations (``eval/`` keys)."""
    series: dict[str, dict[int, float]] = {}
    steps = [e for e in events if e["type"] == "step"]
    assert [e["step"] for e in steps] == [1, 2, 3, 4]
    for e in steps:
        for k, v in e["metrics"].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v:
                series.setdefault(k, {})[e["step"]] = float(v)
    evals = [e for e in events if e["type"] == "eval"]
    assert [e["step"] for e in evals] == [0, 2, 4]
    for e in evals:
        for k, v in e["metrics"].items():
            series.setdefault(f"eval/{k}", {})[e["step"]] = float(v)
    return series


def test_mlflow_holds_the_record(resumed_run) -> None:
    from mlflow import MlflowClient

    from trainer.mirror import mlflow_name

    series = _record(resumed_run["events"])
    target = resumed_run["targets"][0]
    client = MlflowClient(tracking_uri=target.split(":", 1)[1])
    run = client.get_run(read_cursor(resumed_run["out"])[target]["run_id"])
    for key, values in series.items():
        history = client.get_metric_history(run.info.run_id, mlflow_name(key))
        assert [(m.step, m.value) for m in history] == sorted(values.items()), key
    assert run.data.params["group_size"] == str(resumed_run["config"].group_size)
    assert run.data.params["algorithm"] == "ada-pos"
    assert run.data.tags["rada.out"] == str(resumed_run["out"])
    assert run.info.status == "FINISHED"


def test_tensorboard_holds_the_record(resumed_run) -> None:
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util.tensor_util import make_ndarray

    series = _record(resumed_run["events"])
    state = read_cursor(resumed_run["out"])[resumed_run["targets"][1]]
    acc = ea.EventAccumulator(state["link"], size_guidance={ea.TENSORS: 0})
    acc.Reload()
    for key, values in series.items():
        got = [(e.step, make_ndarray(e.tensor_proto).item()) for e in acc.Tensors(key)]
        assert got == sorted(values.items()), key
    assert "_hparams_/session_start_info" in acc.Tags()["tensors"]


def wandb_records(path: str) -> list[Any]:
    """The records of a W&B run file (``run-ID.wandb``): LevelDB's log format (32 KiB blocks,
    each record a 7-byte header: CRC, length, FULL/FIRST/MIDDLE/LAST) after W&B's 7-byte
    header, each record one ``wandb_internal_pb2.Record``. wandb 0.31 keeps its reader in its
    Go core; the protobuf is its Python library's."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    pos, block, out, chunk = 7, 32768, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:  # zero padding to the block's end
            pos += block - pos % block
            continue
        chunk += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            out.append(record)
            chunk = b""
    return out


def test_wandb_offline_holds_the_record(resumed_run) -> None:
    series = _record(resumed_run["events"])
    state = read_cursor(resumed_run["out"])[resumed_run["targets"][2]]
    files = sorted(glob.glob(str(resumed_run["root"] / "wandb" / "wandb"
                                 / f"offline-run-*-{state['run_id']}" / "*.wandb")))
    assert len(files) == 2  # the first attempt's and the resume's, one W&B run id
    got: dict[str, dict[int, float]] = {}
    config: dict[str, Any] = {}
    tags: set[str] = set()
    for path in files:
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "history":
                step = record.history.step.num
                for item in record.history.item:
                    key = item.key or "/".join(item.nested_key)
                    if not key.startswith("_"):
                        assert step not in got.get(key, {}), (key, step)  # no duplicate
                        got.setdefault(key, {})[step] = json.loads(item.value_json)
            elif kind == "run":
                assert record.run.run_id == state["run_id"]
                tags.update(record.run.tags)
                config.update({u.key: json.loads(u.value_json) for u in record.run.config.update})
    assert got == series
    assert config["group_size"] == resumed_run["config"].group_size
    assert f"rada.out={resumed_run['out']}"[:64] in tags


@pytest.fixture
def silent_server():
    """A TCP server that accepts connections and never answers (a hanging tracker)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_a_hanging_and_a_refusing_tracker_neither_fail_nor_hold_the_run(tmp_path,
                                                                         silent_server) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused = f"http://127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # nothing listens there now: connections are refused
    config = TrainConfig.from_toml(_write(tmp_path / "run.toml", CONFIG))
    spec = f"mlflow:{silent_server}, mlflow:{refused}"
    with JsonlRecorder(tmp_path / "events.jsonl") as rec, \
            mirrored(spec, rec, tmp_path, name="run", params=config.to_dict(),
                     stall_seconds=0.5) as recorder:
        result = _train(config, recorder, tmp_path)
    assert result.status == "completed" and result.last_step == 4
    events = len([e for e in read_events(tmp_path / "events.jsonl")
                  if e["type"] in ("step", "eval")])
    for target in parse_mirror(spec):
        state = read_cursor(tmp_path)[str(target)]
        assert (state["lost"], state["last_step"], state["run_id"]) == (events, 0, "")
        assert state["error"]


def test_a_full_queue_drops_and_counts_instead_of_waiting(tmp_path, silent_server,
                                                          monkeypatch) -> None:
    """A tracker that never answers holds its thread; the loop's hand-over never waits: past
    the queue's bound each event is dropped and counted, and so is what the queue held."""
    from types import SimpleNamespace

    from trainer import mirror
    from trainer.recorders import ListRecorder

    monkeypatch.setattr(mirror, "QUEUE_LIMIT", 2)
    inner = ListRecorder()
    with mirrored(f"mlflow:{silent_server}", inner, tmp_path, name="run", params={},
                  stall_seconds=0.3) as recorder:
        for step in range(1, 6):
            recorder.on_step(SimpleNamespace(step=step, metrics={"real_reward": 0.5}))
        assert [e[1] for e in inner.events] == [1, 2, 3, 4, 5]  # recorded, none waited
    (state,) = read_cursor(tmp_path).values()
    assert (state["lost"], state["last_step"]) == (5, 0)


@pytest.mark.parametrize("value, reason", [
    ("neptune:x", "unknown tracker 'neptune'"),
    ("tensorboard:http://h:1", "only mlflow takes a server URL"),
    ("mlflow, mlflow:var/mlruns", "named twice"),
])
def test_bad_mirror_names_the_field(value, reason) -> None:
    with pytest.raises(ConfigError) as err:
        TrainConfig(mirror=value).validate()
    assert err.value.field == "mirror" and reason in err.value.reason


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
