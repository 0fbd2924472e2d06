"""The recorder a worker hands to ``trainer.train``: each step's rows go to PostgreSQL in one
transaction, streamed with ``COPY`` (a step of 512 prompts x 32 samples is 16k sample rows;
``save()`` per row would dominate the step time).

Idempotent per (run, step): a step that is recorded again (a resumed run re-emits the steps after
its checkpoint) replaces the earlier rows inside the same transaction, so the unique keys hold and
no row is ever duplicated. A recorder that holds a lease writes only while it still holds it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone
from experiments.models import Run

from trainer.types import CheckpointRecord, EvalRecord, RoundStat, SampleRecord, StepRecord

STEP_TABLES = ("experiments_sample", "experiments_promptstep", "experiments_roundstat",
               "experiments_step")
SAMPLE_COLUMNS = ("run_id", "step", "prompt_id", "index", "round", "response", "tokens",
                  "reward", "kept", "advantage", "verifier_error", "weight", "policy_version",
                  "reward_components")
PROMPTSTEP_COLUMNS = ("run_id", "step", "prompt_id", "samples", "positives", "negatives",
                      "rounds", "exit_round", "missing", "kept_positives", "kept_negatives",
                      "baseline", "tokens", "p_hat", "allocated")
ROUNDSTAT_COLUMNS = ("run_id", "step", "round", "active_prompts", "samples", "positives",
                     "finished", "tokens")


logger = logging.getLogger("workers.recorder")
T = TypeVar("T")
# How long a worker keeps retrying a write while the database is unreachable (a restart, a
# failover) before the run gives up its attempt: longer than a PostgreSQL restart.
RECONNECT_SECONDS = float(getattr(settings, "RUN_RECONNECT_SECONDS", 120.0))


class LeaseLost(RuntimeError):
    """Another worker took the run over (or it was deleted): stop without writing."""


def is_database_outage(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is the database being unreachable."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (OperationalError, InterfaceError)):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


def reconnecting(fn: Callable[..., T], seconds: float | None = None) -> Callable[..., T]:
    """Retry ``fn`` while the database connection is broken (``OperationalError``,
    ``InterfaceError``: a restarted server, a dropped socket), reconnecting each time, for up to
    ``RECONNECT_SECONDS``. Only for idempotent writes (every recorder write is: per-step rows are
    replaced, checkpoints and evaluations upserted), and never inside an outer transaction,
    which a broken connection has lost anyway."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> T:
        deadline = time.monotonic() + (RECONNECT_SECONDS if seconds is None else seconds)
        delay = 0.2
        while True:
            try:
                return fn(*args, **kwargs)
            except (OperationalError, InterfaceError) as exc:
                if connection.in_atomic_block or time.monotonic() > deadline:
                    raise
                logger.warning("database unreachable (%s); reconnecting in %.1f s",
                               str(exc).strip().splitlines()[0] if str(exc) else exc, delay)
                try:
                    connection.close()
                except Exception:  # noqa: BLE001 - the broken connection may not close cleanly
                    pass
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    return call


def finite_or_none(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def clean_metrics(metrics: dict[str, Any]) -> dict[str, float | None]:
    """JSON has no NaN/inf (PostgreSQL's jsonb rejects them): they become null."""
    return {k: finite_or_none(v) if isinstance(v, (int, float)) else v
            for k, v in metrics.items()}


def copy_rows(table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    cols = ", ".join(f'"{c}"' for c in columns)
    with connection.cursor() as cursor, cursor.copy(
            f"COPY {table} ({cols}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def sample_rows(run_id: int, step: int, samples: Sequence[SampleRecord],
                retention: str) -> Iterator[tuple[Any, ...]]:
    """Sample rows in SAMPLE_COLUMNS order. The hot loop of ingest: plain attribute reads, no
    per-row function calls."""
    keep_all = retention == Run.Retention.ALL
    keep_kept = retention == Run.Retention.KEPT
    isfinite = math.isfinite
    for s in samples:
        adv = s.advantage
        if adv is not None and not isfinite(adv):
            adv = None
        text = s.response if keep_all or (keep_kept and s.kept) else None
        yield (run_id, step, int(s.prompt_id), s.index, s.round, text, s.tokens, s.reward,
               s.kept, adv, s.verifier_error or "", s.weight, s.policy_version,
               None if s.reward_components is None else json.dumps(s.reward_components))


class PostgresRecorder:
    """``trainer.types.Recorder`` writing run ``run_id``'s events to PostgreSQL through Django's
    connection (so a test's transaction sees them). ``lease_owner``: the worker's lease id; when
    given, every write first checks the lease and raises ``LeaseLost`` without writing."""

    def __init__(self, run_id: int, *, lease_owner: str | None = None) -> None:
        self.run_id = run_id
        self.lease_owner = lease_owner
        self.retention = Run.objects.values_list("retention", flat=True).get(pk=run_id)

    # -- trainer.types.Recorder ------------------------------------------------------------------
    @reconnecting
    def on_round(self, step: int, stat: RoundStat) -> None:
        """Live progress between rounds; doubles as a heartbeat."""
        runs = Run.objects.filter(pk=self.run_id)
        if self.lease_owner is not None:
            runs = runs.filter(lease_owner=self.lease_owner)
        if not runs.update(current_round=stat.round, heartbeat_at=timezone.now()) \
                and self.lease_owner is not None:
            raise LeaseLost(f"run {self.run_id}: lease lost")

    @reconnecting
    def on_step(self, record: StepRecord) -> None:
        run_id, step = self.run_id, record.step
        m = record.metrics
        with transaction.atomic():
            with connection.cursor() as cursor:
                # One round trip: lock the run row (lease check) and read the last two steps.
                cursor.execute(
                    "SELECT r.lease_owner, s.step, s.wall_seconds FROM experiments_run r "
                    "LEFT JOIN LATERAL (SELECT step, wall_seconds FROM experiments_step "
                    "  WHERE run_id = r.id AND step <= %s ORDER BY step DESC LIMIT 2) s ON true "
                    "WHERE r.id = %s FOR UPDATE OF r", [step, run_id])
                rows = cursor.fetchall()
                self._check_lease(rows[0][0] if rows else None, exists=bool(rows))
                previous = [(r[1], r[2]) for r in rows if r[1] is not None]
                if previous and previous[0][0] == step:
                    # Recorded before (a resumed or repeated step): replace, never duplicate.
                    for table in STEP_TABLES:
                        cursor.execute(f"DELETE FROM {table} WHERE run_id = %s AND step = %s",
                                       [run_id, step])
                    previous = previous[1:]
                # Wall time of training: the previous step's plus this step's duration, so a
                # resumed run's curve continues without the time it spent dead or queued.
                wall = (previous[0][1] if previous else 0.0) + float(m.get("time_step") or 0.0)
                cursor.execute(
                    "INSERT INTO experiments_step (run_id, step, metrics, real_reward, "
                    "kept_reward, samples, tokens, wall_seconds, ranks, created_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, now())",
                    [run_id, step, json.dumps(clean_metrics(m)),
                     finite_or_none(m.get("real_reward")), finite_or_none(m.get("kept_reward")),
                     int(m.get("samples") or sum(r.samples for r in record.rounds)),
                     int(m.get("tokens") or 0), wall,
                     json.dumps([{k: finite_or_none(v) if isinstance(v, float) else v
                                  for k, v in dataclasses.asdict(r).items()}
                                 for r in record.ranks])])
            copy_rows("experiments_roundstat", ROUNDSTAT_COLUMNS, (
                (run_id, step, r.round, r.active_prompts, r.samples, r.positives, r.finished,
                 r.tokens) for r in record.rounds))
            copy_rows("experiments_promptstep", PROMPTSTEP_COLUMNS, (
                (run_id, step, int(p.prompt_id), p.samples, p.positives, p.negatives, p.rounds,
                 p.exit_round, p.missing or "", p.kept_positives, p.kept_negatives,
                 finite_or_none(p.baseline) or 0.0, p.tokens, finite_or_none(p.p_hat),
                 p.allocated) for p in record.prompts))
            copy_rows("experiments_sample", SAMPLE_COLUMNS,
                      sample_rows(run_id, step, record.samples, self.retention))
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE experiments_run SET current_step = %s, current_round = 0, "
                    "  samples_spent = (SELECT COALESCE(SUM(samples), 0) FROM experiments_step "
                    "                   WHERE run_id = %s), "
                    "  latest_real_reward = %s, heartbeat_at = now() WHERE id = %s",
                    [step, run_id, finite_or_none(m.get("real_reward")), run_id])

    @reconnecting
    def before_checkpoint(self, step: int) -> None:
        """Called before a checkpoint's files are written: a worker that lost its lease (the
        run was taken over or deleted) must not write files into the run's folder."""
        with transaction.atomic():
            self._lock_run()

    @reconnecting
    def on_checkpoint(self, record: CheckpointRecord) -> None:
        self._upsert_step_row("experiments_checkpoint", "path", record.step, str(record.path))

    @reconnecting
    def on_eval(self, record: EvalRecord) -> None:
        self._upsert_step_row("experiments_evalresult", "metrics", record.step,
                              json.dumps(clean_metrics(record.metrics)))

    # --------------------------------------------------------------------------------------------
    def _upsert_step_row(self, table: str, column: str, step: int, value: Any) -> None:
        """One row per (run, step) of ``table``; a resumed run's repeat replaces it."""
        with transaction.atomic():
            self._lock_run()
            with connection.cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {table} (run_id, step, {column}, created_at) "
                    f"VALUES (%s, %s, %s, now()) ON CONFLICT (run_id, step) "
                    f"DO UPDATE SET {column} = EXCLUDED.{column}, created_at = EXCLUDED.created_at",
                    [self.run_id, step, value])

    def _lock_run(self) -> None:
        """Lock the run row for this transaction and check the lease: a worker that was declared
        dead and taken over must not write the new owner's steps."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT lease_owner FROM experiments_run WHERE id = %s FOR UPDATE",
                           [self.run_id])
            row = cursor.fetchone()
        self._check_lease(row[0] if row else None, exists=row is not None)

    def _check_lease(self, owner: str | None, *, exists: bool) -> None:
        if not exists or (self.lease_owner is not None and owner != self.lease_owner):
            raise LeaseLost(f"run {self.run_id}: lease lost")
