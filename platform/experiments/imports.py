"""Import a run recorded outside the platform as a finished run, so the dashboard can show,
compare and report it (``python manage.py import_run DIR``). Two sources:

- a trainer CLI run (``python -m trainer run --out DIR``): ``DIR/events.jsonl`` (one JSON event
  per line: step records with their rounds, prompts and samples; checkpoints; evaluations), the
  config from ``DIR/config.json`` or else from its checkpoints' ``trainer_state.json``, and the
  prompts the config names (the built-in task is generated again; a prompt file must still be
  where the config says);
- a platform export bundle (``experiments.bundles``), unzipped, or the zip itself.

Idempotent: the run remembers where it came from (``Run.import_key``, a hash of the folder's
absolute path); importing the same folder again replaces that run's records with the folder's,
in one transaction, so a CLI run that went on training can be imported again to catch up.

Rows are converted as the worker's recorder converts them (non-finite numbers become null, a
missing "missing" is empty, sample texts follow the retention policy) and written with ``COPY``,
a step (or a Parquet row group) at a time: memory stays bounded.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from experiments import bundles
from experiments.models import Prompt, PromptSet, Run
from experiments.services import (
    LaunchError,
    User,
    check_fits_columns,
    delete_run_records,
    find_or_import_prompt_set,
)
from trainer.digest import PromptDigest

SAMPLE_COLUMNS = ("run_id", "step", "prompt_id", "index", "round", "response", "tokens",
                  "reward", "kept", "advantage", "verifier_error", "weight", "policy_version",
                  "reward_components")
PROMPTSTEP_COLUMNS = ("run_id", "step", "prompt_id", "samples", "positives", "negatives",
                      "rounds", "exit_round", "missing", "kept_positives", "kept_negatives",
                      "baseline", "tokens", "p_hat", "allocated")
# Rows converted to Python objects at a time when a bundle is imported.
IMPORT_BATCH_ROWS = 10_000
ROUNDSTAT_COLUMNS = ("run_id", "step", "round", "active_prompts", "samples", "positives",
                     "finished", "tokens")


class ImportError_(LaunchError):  # noqa: N801 - "ImportError" is Python's
    """A folder that cannot be imported; ``field`` says which file (or option) is at fault."""


@dataclass
class ImportResult:
    run: Run
    created: bool
    steps: int


def finite_or_none(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _components(value: Any) -> str | None:
    """A CLI sample's reward components as the recorder stores them (JSON, no NaN)."""
    if not isinstance(value, dict):
        return None
    return json.dumps({str(k): finite_or_none(v) if isinstance(v, (int, float)) else None
                       for k, v in value.items()})


def clean_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """As the recorder stores metrics: jsonb has no NaN or infinity, so they become null."""
    return {k: finite_or_none(v) if isinstance(v, (int, float)) and not isinstance(v, bool)
            else v for k, v in metrics.items()}


def import_key(folder: Path, kind: str) -> str:
    return f"{kind}:" + hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:40]


def _copy(table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    cols = ", ".join(f'"{c}"' for c in columns)
    with connection.cursor() as cursor, cursor.copy(f"COPY {table} ({cols}) FROM STDIN") as cp:
        for row in rows:
            cp.write_row(row)


def import_run(folder: str | Path, owner: User, *, name: str | None = None) -> ImportResult:
    """Import ``folder`` (a CLI run, an unzipped bundle, or a bundle's zip) as ``owner``'s, its
    memory growth bounded by IMPORT_RUN_MAX_MEMORY_BYTES (``memory_budget``) and a zip's
    unzipped size by IMPORT_BUNDLE_MAX_BYTES and IMPORT_BUNDLE_MAX_RATIO (``extract_bundle``)."""
    budget = settings.IMPORT_RUN_MAX_MEMORY_BYTES
    try:
        with memory_budget(budget):
            return _import_run(Path(folder), owner, name)
    except MemoryError:
        raise ImportError_("dir", f"{folder}: importing it needed more than "
                           f"{budget / 2**30:,.1f} GiB of memory, the limit "
                           "(IMPORT_RUN_MAX_MEMORY_BYTES)") from None


@contextmanager
def memory_budget(extra_bytes: int) -> Iterator[None]:
    """Cap this process's address space at its present size plus ``extra_bytes`` while the
    block runs (``RLIMIT_AS``; 0: no cap): a decompression bomb in a bundle's Parquet files ends
    in ``MemoryError``, not in the machine's memory. The cap before is restored after."""
    if extra_bytes <= 0:
        yield
        return
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _address_space() + extra_bytes
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY:
        cap = min(cap, soft)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _address_space() -> int:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[0])
    return pages * os.sysconf("SC_PAGE_SIZE")


def extract_bundle(path: Path, dest: Path) -> None:
    """Unzip a bundle into ``dest``, bounded: the sizes its entries declare, at most
    IMPORT_BUNDLE_MAX_BYTES in all and IMPORT_BUNDLE_MAX_RATIO times the zip's own size (a
    bundle stores Parquet files that are compressed already: its ratio is about 1), within the
    free space; the bytes each entry actually writes, at most what it declares; flat names only
    (a bundle has no folders)."""
    limit, ratio = settings.IMPORT_BUNDLE_MAX_BYTES, settings.IMPORT_BUNDLE_MAX_RATIO
    size = path.stat().st_size
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise ImportError_("dir", f"{path.name}: not a readable zip: {exc}") from None
    with zf:
        entries = [i for i in zf.infolist() if not i.is_dir()]
        declared = sum(i.file_size for i in entries)
        if declared > limit:
            raise ImportError_("dir", f"{path.name}: its entries declare {_gib(declared)} "
                               f"unzipped; the limit is {_gib(limit)} (IMPORT_BUNDLE_MAX_BYTES)")
        if declared > max(ratio * size, BUNDLE_RATIO_FLOOR):
            raise ImportError_("dir", f"{path.name}: its entries declare {_gib(declared)} "
                               f"unzipped from {size:,} bytes, {declared / max(size, 1):,.0f} "
                               f"times its size; the limit is {ratio:g} times "
                               "(IMPORT_BUNDLE_MAX_RATIO)")
        free = shutil.disk_usage(dest).free
        if declared > free:
            raise ImportError_("dir", f"{path.name}: its entries declare {_gib(declared)} "
                               f"unzipped; {dest} has {_gib(free)} free")
        for info in entries:
            name = info.filename
            if "/" in name or "\\" in name or name in ("", ".", ".."):
                raise ImportError_("dir", f"{path.name}: entry {name!r} is not a bundle's file")
            written = 0
            try:
                with zf.open(info) as src, open(dest / name, "wb") as out:
                    while chunk := src.read(2**20):
                        written += len(chunk)
                        if written > info.file_size:
                            raise ImportError_("dir", f"{path.name}: entry {name!r} unzips past "
                                               f"the {info.file_size:,} bytes it declares")
                        out.write(chunk)
            except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                raise ImportError_("dir", f"{path.name}: entry {name!r}: {exc}") from None


# Past this, a zip's entries may declare at most IMPORT_BUNDLE_MAX_RATIO times its size (a small
# bundle's JSON files compress well).
BUNDLE_RATIO_FLOOR = 64 * 2**20


def _gib(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def _import_run(path: Path, owner: User, name: str | None) -> ImportResult:
    if path.is_file() and zipfile.is_zipfile(path):
        with tempfile.TemporaryDirectory() as tmp:
            extract_bundle(path, Path(tmp))
            return _import_bundle(Path(tmp), owner, name, key=import_key(path, "bundle"))
    if not path.is_dir():
        raise ImportError_("dir", f"{path} is not a folder (nor a bundle's zip)")
    if (path / "manifest.json").is_file():
        return _import_bundle(path, owner, name, key=import_key(path, "bundle"))
    if (path / "events.jsonl").is_file():
        return _import_cli_run(path, owner, name)
    raise ImportError_("dir", f"{path} holds neither events.jsonl (a trainer CLI run) nor "
                              "manifest.json (an export bundle)")


# --- the run row --------------------------------------------------------------------------------

def _upsert_run(key: str, owner: User, fields: dict[str, Any]) -> tuple[Run, bool]:
    """The run ``key`` names, its records deleted (re-import), or a new one; locked."""
    run = Run.objects.select_for_update().filter(import_key=key).first()
    created = run is None
    if run is None:
        run = Run(import_key=key, owner=owner)
    else:
        delete_run_records(run.pk)
    for k, v in fields.items():
        setattr(run, k, v)
    run.lease_owner, run.cancel_requested = "", False
    # Each import is an attempt: the dashboard's caches of a run's records are keyed on
    # ``attempts``, so the records a re-import rewrote are never served from an older import.
    run.attempts = (run.attempts or 0) + 1
    check_fits_columns(run)
    run.save()
    return run, created


def _finish(run: Run, status: str, error: str = "") -> None:
    """Set the run's summary from its records, as the recorder keeps it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE experiments_run SET "
            "  current_step = COALESCE((SELECT MAX(step) FROM experiments_step "
            "                           WHERE run_id = %s), 0), current_round = 0, "
            "  samples_spent = (SELECT COALESCE(SUM(samples), 0) FROM experiments_step "
            "                   WHERE run_id = %s), "
            "  latest_real_reward = (SELECT real_reward FROM experiments_step "
            "                        WHERE run_id = %s ORDER BY step DESC LIMIT 1) "
            "WHERE id = %s", [run.pk, run.pk, run.pk, run.pk])
    run.refresh_from_db()
    if not error and run.current_step < run.total_steps:
        status = Run.Status.CANCELLED
        error = f"imported: recorded {run.current_step} of {run.total_steps} steps"
    Run.objects.filter(pk=run.pk).update(status=status, error=error)
    run.refresh_from_db()


# --- a trainer CLI run --------------------------------------------------------------------------

def _cli_config(folder: Path) -> dict[str, Any]:
    from trainer.checkpoint import STATE_FILE, latest_checkpoint

    if (folder / "config.json").is_file():
        try:
            return json.loads((folder / "config.json").read_text())
        except ValueError as exc:
            raise ImportError_("config.json", f"not JSON: {exc}") from None
    ckpt = latest_checkpoint(folder)
    if ckpt is not None:
        return json.loads((ckpt / STATE_FILE).read_text())["config"]
    raise ImportError_("config.json", f"missing in {folder}, and no checkpoint carries the "
                                      "config")


def _prompt_set_for(prompts: Sequence[Any], label: str, source: str) -> PromptSet:
    """A prompt set holding exactly ``prompts`` in order: any stored set of the same contents
    (``PromptSet.content_hash``), however it was made (the dashboard's "arithmetic (built-in)",
    an upload, an earlier import), so runs on the same prompts share one set and can be
    compared prompt by prompt; else a new one."""
    ps, _ = find_or_import_prompt_set(
        [type(p)(id=p.id, text=p.text, answer=p.answer,
                 metadata={**p.metadata, "source_id": p.id}) for p in prompts],
        name=f"{label} [{PromptDigest.of(prompts)[:12]}]", source=source,
        description=f"imported with a CLI run: {label}", platform=True)
    return ps


def _events(folder: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(folder / "events.jsonl", encoding="utf-8") as fh:
        for no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                # A torn last line (the CLI run was killed mid-write): the trainer's own
                # resume drops it too.
                continue
            if not isinstance(event, dict) or "type" not in event:
                raise ImportError_("events.jsonl", f"line {no}: not an event object")
            yield no, event


def _import_cli_run(folder: Path, owner: User, name: str | None) -> ImportResult:
    from trainer.config import BUILTIN_TASKS, ConfigError, TrainConfig
    from trainer.data import DataError, resolve_prompts
    from trainer.reward_registry import parse_rewards

    raw = _cli_config(folder)
    try:
        # Its rewards need not be registered here: the import runs none of them (a relaunch
        # checks them as any launch does). Their syntax is checked all the same.
        rewards = raw.get("rewards") if isinstance(raw, dict) else None
        config = TrainConfig.from_dict({**raw, "rewards": TrainConfig.rewards} if rewards
                                       else raw)
        if rewards:
            parse_rewards(rewards)
            config.rewards = rewards
    except (ConfigError, TypeError, ValueError) as exc:
        raise ImportError_("config.json", str(exc)) from None
    try:
        prompts, eval_prompts = resolve_prompts(config)
    except (DataError, ValueError, OSError) as exc:
        raise ImportError_("prompts", f"cannot read the run's prompts ({config.prompts}): "
                                      f"{exc}") from None
    builtin = config.prompts in BUILTIN_TASKS
    label = (f"{config.prompts} {config.task_num_prompts} prompts "
             f"{config.task_min_digits}-{config.task_max_digits} digits" if builtin
             else Path(config.prompts).name)
    key = import_key(folder, "cli")
    with transaction.atomic():
        prompt_set = _prompt_set_for(prompts, label, PromptSet.Source.BUILTIN if builtin
                                     else PromptSet.Source.UPLOAD)
        ids = dict(zip((p.id for p in prompts), Prompt.objects.filter(
            prompt_set=prompt_set).order_by("index").values_list("pk", flat=True), strict=True))
        # The held-out prompts too: the run page names them, and a relaunch evaluates on them.
        eval_builtin = not config.eval_prompts or config.eval_prompts in BUILTIN_TASKS
        eval_label = (f"{config.eval_prompts or config.prompts} held-out {len(eval_prompts)} "
                      "prompts" if eval_builtin else Path(config.eval_prompts).name)
        eval_set = _prompt_set_for(eval_prompts, eval_label, PromptSet.Source.BUILTIN
                                   if eval_builtin else PromptSet.Source.UPLOAD
                                   ) if eval_prompts else None
        run, created = _upsert_run(key, owner, {
            "name": name or folder.resolve().name, "algorithm": config.algorithm,
            "config": config.to_dict(), "prompt_set": prompt_set, "eval_set": eval_set,
            "model": config.model, "seed": config.seed, "queue": "cpu",
            "retention": Run.Retention.ALL, "total_steps": config.total_steps,
            "status": Run.Status.SUCCEEDED, "started_at": timezone.now(),
            "finished_at": timezone.now(), "error": "", "traceback": ""})
        steps = _write_cli_events(run, folder, ids)
        _finish(run, Run.Status.SUCCEEDED)
    return ImportResult(run, created, steps)


def _write_cli_events(run: Run, folder: Path, ids: dict[str, int]) -> int:
    seen: set[int] = set()
    wall = 0.0
    for no, event in _events(folder):
        kind = event["type"]
        try:
            if kind == "step":
                step = int(event["step"])
                if step in seen:  # recorded twice: the later record replaces it
                    delete_run_records(run.pk, after_step=step - 1)
                seen.add(step)
                wall = _write_cli_step(run.pk, event, ids, wall)
            elif kind == "eval":
                _upsert_step_row("experiments_evalresult", "metrics", run.pk,
                                 int(event["step"]), json.dumps(clean_metrics(event["metrics"])))
            elif kind == "checkpoint":
                path = folder / "checkpoints" / Path(str(event["path"])).name
                _upsert_step_row("experiments_checkpoint", "path", run.pk, int(event["step"]),
                                 str(path if path.is_dir() else event["path"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ImportError_("events.jsonl", f"line {no}: malformed {kind} event "
                                               f"({type(exc).__name__}: {exc})") from None
        except DatabaseError as exc:  # a value its column refuses (negative count, NUL...)
            raise ImportError_("events.jsonl", f"line {no}: {kind} event refused by the "
                               f"database: {str(exc).splitlines()[0]}") from None
        except _UnknownPrompt as exc:
            raise ImportError_("events.jsonl", f"line {no}: prompt id {exc.args[0]!r} is not "
                               "among the run's prompts (did the prompt file change since "
                               "the run?)") from None
    return len(seen)


class _UnknownPrompt(Exception):
    pass


def _write_cli_step(run_id: int, e: dict[str, Any], ids: dict[str, int], wall: float) -> float:
    step, m = int(e["step"]), dict(e["metrics"])

    def pid(prompt_id: Any) -> int:
        try:
            return ids[str(prompt_id)]
        except KeyError:
            raise _UnknownPrompt(prompt_id) from None

    wall += float(m.get("time_step") or 0.0)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO experiments_step (run_id, step, metrics, real_reward, kept_reward, "
            "samples, tokens, wall_seconds, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, "
            "%s, now())",
            [run_id, step, json.dumps(clean_metrics(m)), finite_or_none(m.get("real_reward")),
             finite_or_none(m.get("kept_reward")),
             int(m.get("samples") or sum(r["samples"] for r in e["rounds"])),
             int(m.get("tokens") or 0), wall])
    _copy("experiments_roundstat", ROUNDSTAT_COLUMNS, (
        (run_id, step, r["round"], r["active_prompts"], r["samples"], r["positives"],
         r["finished"], r.get("tokens", 0)) for r in e["rounds"]))
    _copy("experiments_promptstep", PROMPTSTEP_COLUMNS, (
        (run_id, step, pid(p["prompt_id"]), p["samples"], p["positives"], p["negatives"],
         p["rounds"], p["exit_round"], p.get("missing") or "", p["kept_positives"],
         p["kept_negatives"], finite_or_none(p["baseline"]) or 0.0, p.get("tokens", 0),
         finite_or_none(p.get("p_hat")), p.get("allocated")) for p in e["prompts"]))
    _copy("experiments_sample", SAMPLE_COLUMNS, (
        (run_id, step, pid(s["prompt_id"]), s["index"], s["round"], s["response"], s["tokens"],
         s["reward"], s["kept"], finite_or_none(s.get("advantage")),
         s.get("verifier_error") or "", float(s.get("weight", 1.0)), s.get("policy_version"),
         _components(s.get("reward_components")))
        for s in e["samples"]))
    return wall


def _upsert_step_row(table: str, column: str, run_id: int, step: int, value: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (run_id, step, {column}, created_at) VALUES (%s, %s, %s, "
            f"now()) ON CONFLICT (run_id, step) DO UPDATE SET {column} = EXCLUDED.{column}",
            [run_id, step, value])


# --- an export bundle ---------------------------------------------------------------------------

def _bundle_prompt_set(folder: Path, info: dict[str, Any]) -> tuple[PromptSet, dict[int, int]]:
    """The bundle's prompt set on this platform: a stored set holding the same prompts in order,
    found by content hash whatever its name (importing back where the bundle came from, or a
    set made here from the same problems), else a new set; and the map from the bundle's prompt
    ids to this platform's."""
    import pyarrow.parquet as pq

    from trainer.types import Prompt as TrainerPrompt

    # One thread: under the import's memory cap (memory_budget) an allocation that fails in a
    # worker thread of Arrow's pool hung the read; in this thread it raises MemoryError.
    full = pq.ParquetFile(folder / "prompts.parquet", pre_buffer=False).read(use_threads=False)
    bundle_ids = full.column("prompt_id").to_pylist()
    meta = info["run"]["prompt_set"]
    prompts = [TrainerPrompt(id=str(i), text=t, answer=a, metadata=json.loads(m or "{}"))
               for i, t, a, m in zip(bundle_ids, full.column("text").to_pylist(),
                                     full.column("answer").to_pylist(),
                                     full.column("metadata").to_pylist(), strict=True)]
    created, _ = find_or_import_prompt_set(
        prompts, name=f"{meta['name'][:180]} [{PromptDigest.of(prompts)[:12]}]",
        source=meta.get("source") or "upload", prefer=meta["name"], platform=True,
        description=f"imported with run bundle of run {info['run']['id']}")
    new_ids = Prompt.objects.filter(prompt_set=created).order_by("index").values_list(
        "pk", flat=True)
    return created, dict(zip(bundle_ids, new_ids, strict=True))


def pa_errors() -> type[Exception]:
    import pyarrow as pa

    return pa.ArrowException


def _copy_parquet(run_id: int, path: Path, table: str, names: list[str], ids: dict[int, int],
                  *, timestamps: bool) -> None:
    """COPY a bundle table into ``table`` for run ``run_id``, ``IMPORT_BATCH_ROWS`` at a time,
    prompt ids mapped to this platform's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    # Buffered reads, no pre-buffering, and freed Arrow memory given back after each batch:
    # without them the import's memory grew with the run (249 MiB more for 2M sample rows,
    # 15 MiB with them: docs/benchmarks.md).
    source = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    # A column a later version added is absent from older bundles: the database's default
    # fills it (bundles.ADDED_COLUMNS).
    present = set(source.schema_arrow.names)
    names = [c for c in names if c in present or c not in bundles.ADDED_COLUMNS]
    out_cols = ["run_id", *names, *(["created_at"] if timestamps else [])]
    now = timezone.now()
    for batch in source.iter_batches(batch_size=IMPORT_BATCH_ROWS, columns=names,
                                     use_threads=False):  # see _bundle_prompt_set
        cols = [batch.column(c).to_pylist() for c in names]
        if "prompt_id" in names:
            i = names.index("prompt_id")
            unknown = set(cols[i]) - ids.keys()
            if unknown:
                raise ValueError(f"prompt id {min(unknown)} is not in prompts.parquet")
            cols[i] = [ids[p] for p in cols[i]]
        if table == "experiments_checkpoint":  # relative to the checkpoint root in a bundle
            i = names.index("path")
            cols[i] = [bundles.server_checkpoint_path(p) for p in cols[i]]
        extra = (now,) if timestamps else ()
        _copy(table, out_cols, ((run_id, *row, *extra) for row in zip(*cols, strict=True)))
        del batch, cols
        pa.default_memory_pool().release_unused()


MANIFEST_KEYS = ("name", "algorithm", "model", "seed", "queue", "retention", "total_steps",
                 "status", "prompt_set")


def _import_bundle(folder: Path, owner: User, name: str | None, *, key: str) -> ImportResult:
    try:
        info = bundles.read_manifest(folder)
        config = json.loads((folder / "config.json").read_text())
        meta = info["run"]
        missing = [k for k in MANIFEST_KEYS if k not in meta]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ImportError_("manifest.json", str(exc)) from None
    if missing:
        raise ImportError_("manifest.json", f"the run lacks {', '.join(missing)}")
    with transaction.atomic():
        try:
            prompt_set, ids = _bundle_prompt_set(folder, info)
        except MemoryError:  # Arrow's too: the import's memory cap (import_run says so)
            raise
        except (OSError, KeyError, ValueError, TypeError, DatabaseError, pa_errors()) as exc:
            raise ImportError_("prompts.parquet", str(exc).splitlines()[0]) from None
        run, created = _upsert_run(key, owner, {
            "name": name or meta["name"], "algorithm": meta["algorithm"], "config": config,
            "prompt_set": prompt_set, "eval_set": None, "model": meta["model"],
            "seed": meta["seed"], "queue": meta["queue"], "retention": meta["retention"],
            "total_steps": meta["total_steps"], "status": meta["status"],
            "started_at": timezone.now(), "finished_at": timezone.now(),
            "error": meta.get("error") or "", "traceback": ""})
        for name_, (table, columns) in bundles.TABLES.items():
            names = [c for c, _ in columns]
            try:
                _copy_parquet(run.pk, folder / f"{name_}.parquet", table, names, ids,
                              timestamps=name_ in ("steps", "evaluations", "checkpoints"))
            except MemoryError:
                raise
            except (OSError, KeyError, ValueError, DatabaseError, pa_errors()) as exc:
                raise ImportError_(f"{name_}.parquet", str(exc).splitlines()[0]) from None
        status = meta["status"]
        _finish(run, status if status not in Run.ACTIVE_STATUSES else Run.Status.CANCELLED,
                meta.get("error") or ("" if status not in Run.ACTIVE_STATUSES else
                                      f"imported while {status}"))
    return ImportResult(run, created, run.current_step)
