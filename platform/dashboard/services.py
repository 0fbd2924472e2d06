"""The writes the dashboard triggers, delegated to ``experiments.services``.

TEMPORARY ADAPTER: the platform foundation owns the write services (issue 3). Until
``experiments.services`` lands on main, minimal stand-ins with the same signatures live here so
the pages can be built and tested; each function prefers the real service when it exists. Remove
the fallbacks once the foundation's services are merged.
"""

from __future__ import annotations

import io
import json
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from experiments.models import Prompt, PromptSet, Run

from trainer.config import BUILTIN_TASK, ConfigError, TrainConfig

try:  # pragma: no cover - depends on what main holds
    from experiments import services as _real  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    _real = None


class UploadError(ValueError):
    """A prompt file that cannot be imported; ``line`` is 1-based (None: the file as a whole)."""

    def __init__(self, line: int | None, reason: str) -> None:
        super().__init__(f"line {line}: {reason}" if line else reason)
        self.line = line
        self.reason = reason


def can_manage(user: Any, run: Run) -> bool:
    return bool(user.is_authenticated and (user.is_staff or run.owner_id == user.pk))


def _check_manage(user: Any, run: Run) -> None:
    if not can_manage(user, run):
        raise PermissionDenied("only the run's owner or staff may do this")


def create_prompt_set_from_upload(owner: Any, name: str, uploaded_bytes: bytes,
                                  filename: str) -> PromptSet:
    import importlib.util

    if (_real and hasattr(_real, "create_prompt_set_from_upload")
            and importlib.util.find_spec("trainer.data")):  # the real one parses with it
        return _real.create_prompt_set_from_upload(owner, name, uploaded_bytes, filename)
    rows = _parse_prompt_file(uploaded_bytes, filename)
    with transaction.atomic():
        ps = PromptSet.objects.create(name=name, source=PromptSet.Source.UPLOAD, owner=owner,
                                      size=len(rows), description=f"uploaded {filename}")
        Prompt.objects.bulk_create(Prompt(prompt_set=ps, index=i, text=t, answer=a, metadata=m)
                                   for i, (t, a, m) in enumerate(rows))
    return ps


def _parse_prompt_file(data: bytes, filename: str) -> list[tuple[str, str, dict[str, Any]]]:
    records: list[tuple[int, Any]] = []
    if filename.lower().endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(io.BytesIO(data))
        except Exception as exc:  # noqa: BLE001 - any reader error means an unreadable file
            raise UploadError(None, f"not a readable Parquet file: {exc}") from exc
        records = list(enumerate(table.to_pylist(), start=1))
    else:
        for no, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append((no, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise UploadError(no, f"invalid JSON: {exc.msg}") from exc
    if not records:
        raise UploadError(None, "the file holds no prompts")
    out = []
    for no, rec in records:
        if not isinstance(rec, dict):
            raise UploadError(no, "expected a JSON object")
        prompt = rec.get("prompt")
        if isinstance(prompt, list):  # verl chat layout: [{"role": ..., "content": ...}]
            prompt = "\n".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict))
        answer = rec.get("answer")
        if answer is None and isinstance(rec.get("reward_model"), dict):
            answer = rec["reward_model"].get("ground_truth")
        if not isinstance(prompt, str) or not prompt.strip():
            raise UploadError(no, "missing or empty 'prompt'")
        if answer is None or str(answer).strip() == "":
            raise UploadError(no, "missing 'answer' (or reward_model.ground_truth)")
        metadata = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {}
        out.append((prompt, str(answer), metadata))
    return out


def create_builtin_prompt_set(owner: Any, name: str, num_prompts: int, min_digits: int,
                              max_digits: int, seed: int) -> PromptSet:
    import importlib.util

    if (_real and hasattr(_real, "create_builtin_prompt_set")
            and importlib.util.find_spec("trainer.tasks")):  # the real one generates with it
        return _real.create_builtin_prompt_set(owner=owner, name=name, num_prompts=num_prompts,
                                               min_digits=min_digits, max_digits=max_digits,
                                               seed=seed)
    import random

    rng = random.Random(seed)
    rows = []
    for _ in range(num_prompts):
        a = rng.randint(10 ** (min_digits - 1) if min_digits > 1 else 0, 10 ** max_digits - 1)
        b = rng.randint(10 ** (min_digits - 1) if min_digits > 1 else 0, 10 ** max_digits - 1)
        rows.append((f"{a}+{b}=", str(a + b)[::-1]))
    with transaction.atomic():
        ps = PromptSet.objects.create(name=name, source=PromptSet.Source.BUILTIN, owner=owner,
                                      size=len(rows), description="built-in arithmetic")
        Prompt.objects.bulk_create(Prompt(prompt_set=ps, index=i, text=t, answer=a)
                                   for i, (t, a) in enumerate(rows))
    return ps


def launch_run(owner: Any, name: str, config_dict: dict[str, Any], prompt_set: PromptSet,
               eval_set: PromptSet | None = None, queue: str = "cpu", retention: str = "all",
               cloned_from: Run | None = None) -> Run:
    if _real and hasattr(_real, "launch_run"):
        return _real.launch_run(owner, name, config_dict, prompt_set, eval_set=eval_set,
                                queue=queue, retention=retention, cloned_from=cloned_from)
    cfg = dict(config_dict)
    cfg["prompts"] = BUILTIN_TASK  # the stand-in cannot materialise a prompt file
    cfg["eval_prompts"] = ""
    config = TrainConfig.from_dict(cfg)
    with transaction.atomic():
        run = Run.objects.create(owner=owner, name=name, algorithm=config.algorithm,
                                 config=config.to_dict(), prompt_set=prompt_set,
                                 eval_set=eval_set, model=config.model, seed=config.seed,
                                 queue=queue, retention=retention, total_steps=config.total_steps,
                                 cloned_from=cloned_from)
    return run


def request_cancel(run: Run, user: Any) -> None:
    _check_manage(user, run)
    if _real and hasattr(_real, "request_cancel"):
        _real.request_cancel(run, user)
        return
    Run.objects.filter(pk=run.pk, status__in=Run.ACTIVE_STATUSES).update(cancel_requested=True)


def delete_run(run: Run, user: Any) -> None:
    _check_manage(user, run)
    if _real and hasattr(_real, "delete_run"):
        _real.delete_run(run, user)
        return
    run.delete()


def relaunch_run(run: Run, user: Any) -> Run:
    _check_manage(user, run)
    if _real and hasattr(_real, "relaunch_run"):
        return _real.relaunch_run(run, user)
    cfg = {k: v for k, v in run.config.items() if k not in ("prompts", "eval_prompts")}
    return launch_run(user, f"{run.name} (relaunch)", cfg, run.prompt_set, run.eval_set,
                      queue=run.queue, retention=run.retention, cloned_from=run)


__all__ = ["ConfigError", "UploadError", "can_manage", "create_builtin_prompt_set",
           "create_prompt_set_from_upload", "delete_run", "launch_run", "relaunch_run",
           "request_cancel"]
