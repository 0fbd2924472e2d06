"""A run as a Parquet bundle: one zip holding a Parquet file per table and two JSON files, which
pandas, polars and pyarrow read directly once unzipped (``pd.read_parquet("samples.parquet")``).

    manifest.json        the run (name, algorithm, status, model, seed, retention...), the format
                         version, and each table's row count
    config.json          the run's full TrainConfig
    steps.parquet        one row per step: the columns of the runs' charts, ``metrics`` as JSON
                         text (every key, nulls kept) and each numeric metric as a column
    rounds.parquet       one row per (step, sampling round)
    prompt_steps.parquet one row per (step, prompt)
    samples.parquet      one row per response, texts as the run's retention policy kept them;
                         ``reward_components`` as JSON text where the run combined rewards
    evaluations.parquet  one row per held-out evaluation: ``metrics`` as JSON and as columns
    checkpoints.parquet  step and path of each checkpoint the run recorded, relative to the
                         checkpoint root (``run-7/checkpoints/step-000040``): a bundle does not
                         show its reader the server's file system. A checkpoint outside the root
                         is named by its folder's name alone. ``import_run`` resolves the paths
                         against its own CHECKPOINT_ROOT.
    prompts.parquet      the run's prompt set (``prompt_id`` is the key the other tables use)

Memory stays bounded whatever the run's size: rows are read from PostgreSQL with a server-side
cursor ``CHUNK_ROWS`` at a time, and each chunk is written to its Parquet file (a row group) as it
arrives, straight into the zip; nothing holds a whole table.
"""

from __future__ import annotations

import json
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.db import connection, transaction

from experiments.models import Run

FORMAT = "rada-run-bundle"
VERSION = 1
CHUNK_ROWS = 50_000

# name -> (SQL source table, [(column, Arrow type name)]); the key columns first, in key order.
# Type names, not pyarrow types: the web process imports pyarrow only when it exports.
TABLES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "steps": ("experiments_step", [
        ("step", "int64"), ("real_reward", "float64"), ("kept_reward", "float64"),
        ("samples", "int64"), ("tokens", "int64"), ("wall_seconds", "float64"),
        ("metrics", "string")]),
    "rounds": ("experiments_roundstat", [
        ("step", "int64"), ("round", "int32"), ("active_prompts", "int64"),
        ("samples", "int64"), ("positives", "int64"), ("finished", "int64"),
        ("tokens", "int64")]),
    "prompt_steps": ("experiments_promptstep", [
        ("step", "int64"), ("prompt_id", "int64"), ("samples", "int32"),
        ("positives", "int32"), ("negatives", "int32"), ("rounds", "int32"),
        ("exit_round", "int32"), ("missing", "string"), ("kept_positives", "int32"),
        ("kept_negatives", "int32"), ("baseline", "float64"), ("tokens", "int64"),
        ("p_hat", "float64"), ("allocated", "int32")]),
    "samples": ("experiments_sample", [
        ("step", "int64"), ("prompt_id", "int64"), ("index", "int32"),
        ("round", "int32"), ("response", "string"), ("tokens", "int64"),
        ("reward", "float64"), ("kept", "bool_"), ("advantage", "float64"),
        ("verifier_error", "string"), ("weight", "float64"), ("policy_version", "int64"),
        ("reward_components", "string")]),
    "evaluations": ("experiments_evalresult", [("step", "int64"), ("metrics", "string")]),
    "checkpoints": ("experiments_checkpoint", [("step", "int64"), ("path", "string")]),
}
# Columns added after version 1 of the format: a bundle written before lacks them, and its
# import leaves them to the database's default (a sample's loss weight: 1; its policy version:
# null, synchronous; its reward components: null, the verifier alone).
ADDED_COLUMNS = frozenset({"weight", "policy_version", "reward_components"})
# The JSON columns, written as their text.
JSON_COLUMNS = frozenset({"metrics", "reward_components"})
# Each table's unique key, the order rows are written in (and the index the read walks).
KEYS = {"rounds": ("step", "round"), "prompt_steps": ("step", "prompt_id"),
        "samples": ("step", "prompt_id", "index")}
PROMPT_COLUMNS = [("prompt_id", "int64"), ("index", "int64"), ("text", "string"),
                  ("answer", "string"), ("metadata", "string")]
# Tables whose ``metrics`` JSON is also spread into one float column per numeric key.
SPREAD_METRICS = ("steps", "evaluations")
RUN_FIELDS = ("id", "name", "algorithm", "status", "model", "seed", "queue", "retention",
              "total_steps", "current_step", "samples_spent", "latest_real_reward", "error")


def arrow_schema(columns: Sequence[tuple[str, str]]) -> Any:
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, kind)()) for name, kind in columns])


def _sql(name: str, columns: Sequence[str]) -> str:
    table = TABLES[name][0]
    keys = KEYS.get(name, ("step",))
    cols = ", ".join(f'"{c}"' + ("::text" if c in JSON_COLUMNS else "") for c in columns)
    order = ", ".join(f'"{k}"' for k in keys)
    return f"SELECT {cols} FROM {table} WHERE run_id = %s ORDER BY {order}"


def _chunks(sql: str, params: list[Any]) -> Iterator[list[tuple[Any, ...]]]:
    """Rows of ``sql`` ``CHUNK_ROWS`` at a time from a server-side (named) cursor."""
    with transaction.atomic():  # a named cursor lives inside a transaction
        connection.ensure_connection()
        with connection.connection.cursor(name="bundle_export") as cursor:
            cursor.itersize = CHUNK_ROWS
            cursor.execute(sql, params)
            while rows := cursor.fetchmany(CHUNK_ROWS):
                yield rows


def _metric_keys(run: Run, name: str) -> list[str]:
    """The numeric metric keys any row of ``name`` carries (one column each)."""
    table = TABLES[name][0]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT k FROM {table}, jsonb_each(metrics) AS kv(k, v) "
            f"WHERE run_id = %s AND jsonb_typeof(v) = 'number' ORDER BY k", [run.pk])
        return [r[0] for r in cursor.fetchall()]


def _write_table(zf: zipfile.ZipFile, name: str, schema: Any, batches: Iterator[Any]) -> int:
    import pyarrow.parquet as pq

    rows = 0
    with zf.open(f"{name}.parquet", "w", force_zip64=True) as member, \
            pq.ParquetWriter(member, schema, compression="zstd") as writer:
        for batch in batches:
            writer.write_batch(batch)
            rows += batch.num_rows
        if rows == 0:
            writer.write_table(schema.empty_table())
    return rows


def _record_batches(run: Run, name: str, metric_keys: list[str]) -> tuple[Any, Iterator[Any]]:
    import pyarrow as pa

    columns = TABLES[name][1]
    names = [c for c, _ in columns]
    schema = arrow_schema(columns + [(f"metric.{k}", "float64") for k in metric_keys])

    def batches() -> Iterator[Any]:
        for rows in _chunks(_sql(name, names), [run.pk]):
            cols = [list(col) for col in zip(*rows, strict=True)]
            if name == "checkpoints":
                i = names.index("path")
                cols[i] = [bundle_checkpoint_path(p) for p in cols[i]]
            if metric_keys:
                parsed = [json.loads(m) for m in cols[names.index("metrics")]]
                for k in metric_keys:
                    cols.append([_number(m.get(k)) for m in parsed])
            yield pa.RecordBatch.from_arrays(
                [pa.array(c, type=f.type) for c, f in zip(cols, schema, strict=True)],
                schema=schema)

    return schema, batches()


def bundle_checkpoint_path(path: str) -> str:
    """``path`` as a bundle shows it: relative to CHECKPOINT_ROOT, or, for a checkpoint kept
    elsewhere, its folder's name; never the server's absolute path."""
    root = Path(settings.CHECKPOINT_ROOT).resolve()
    full = Path(path)
    try:
        return full.resolve().relative_to(root).as_posix() if full.is_absolute() else \
            full.as_posix()
    except ValueError:
        return full.name


def server_checkpoint_path(path: str) -> str:
    """A bundle's checkpoint path on this server: under CHECKPOINT_ROOT. Raises ValueError for
    a path that would leave the root (``..``); an absolute path (a bundle written before paths
    were relative) is kept as it is."""
    rel = Path(path)
    if rel.is_absolute():
        return path
    if ".." in rel.parts:
        raise ValueError(f"checkpoint path {path!r} leaves the checkpoint root")
    return str(Path(settings.CHECKPOINT_ROOT) / rel)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def _prompt_batches(run: Run) -> Iterator[Any]:
    import pyarrow as pa

    schema = arrow_schema(PROMPT_COLUMNS)
    sql = ('SELECT id, "index", text, answer, metadata::text FROM experiments_prompt '
           'WHERE prompt_set_id = %s ORDER BY "index"')
    for rows in _chunks(sql, [run.prompt_set_id]):
        cols = list(zip(*rows, strict=True))
        yield pa.RecordBatch.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(cols, schema, strict=True)],
            schema=schema)


def manifest(run: Run) -> dict[str, Any]:
    data = {f: getattr(run, f if f != "id" else "pk") for f in RUN_FIELDS}
    return {"format": FORMAT, "version": VERSION, "run": {
        **data, "owner": run.owner.username,
        "prompt_set": {"id": run.prompt_set_id, "name": run.prompt_set.name,
                       "source": run.prompt_set.source},
        "created_at": run.created_at.isoformat(),
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None}}


def write_bundle(run: Run, out: IO[bytes]) -> dict[str, Any]:
    """Write ``run``'s bundle as a zip into ``out``; returns the manifest (with row counts)."""
    counts: dict[str, int] = {}
    # Parquet files are compressed already: the zip only stores them. One REPEATABLE READ
    # transaction: the tables of a run still training are read at one moment, so a step is in
    # every table or in none (inside a caller's transaction, that one's snapshot rules).
    outer = connection.in_atomic_block
    with transaction.atomic(), zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as zf:
        if not outer:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        run = Run.objects.select_related("owner", "prompt_set").get(pk=run.pk)
        info = manifest(run)
        zf.writestr("config.json", json.dumps(run.config, indent=2))
        for name in TABLES:
            keys = _metric_keys(run, name) if name in SPREAD_METRICS else []
            schema, batches = _record_batches(run, name, keys)
            counts[name] = _write_table(zf, name, schema, batches)
        counts["prompts"] = _write_table(zf, "prompts", arrow_schema(PROMPT_COLUMNS),
                                         _prompt_batches(run))
        info["rows"] = counts
        zf.writestr("manifest.json", json.dumps(info, indent=2))
    return info


def bundle_file(run: Run) -> IO[bytes]:
    """The bundle in an anonymous temporary file (gone once closed), positioned at its start:
    what a download streams."""
    out = tempfile.TemporaryFile()
    write_bundle(run, out)
    out.seek(0)
    return out


def bundle_filename(run: Run) -> str:
    return f"run-{run.pk}-bundle.zip"


def read_manifest(folder: Path) -> dict[str, Any]:
    data = json.loads((folder / "manifest.json").read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{folder}/manifest.json is not a {FORMAT} manifest")
    if data.get("version") != VERSION:
        raise ValueError(f"bundle version {data.get('version')}; this platform reads {VERSION}")
    return data
