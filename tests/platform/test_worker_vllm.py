"""A run with the ``vllm`` backend, launched through the service layer and executed by a real
Celery worker process on the ``cpu`` queue: vLLM's real engine (its CPU build here and on CI)
inside the worker, the policy trained and its weights pushed into the engine after every step,
every row recorded as the trainer emits it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from experiments import services
from experiments.models import Run, Step

from tests.fixtures.vllm import TEST_KV_CACHE_GIB, requires_vllm
from tests.platform.test_worker import (
    assert_no_duplicates,
    assert_recorded_as_emitted,
    replay_as_the_worker,
    wait_status,
)

pytestmark = [requires_vllm(), pytest.mark.slow]


def test_worker_trains_with_the_vllm_backend(start_worker: Any, user: Any, tiny_model_dir: Path,
                                             tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:

    from trainer.model import MODEL_DIR_ENV

    one_thread = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    start_worker("cpu", env={MODEL_DIR_ENV: str(tiny_model_dir)} | one_thread)
    ps = services.create_builtin_prompt_set(user, "arith-vllm", 16, 1, 2, 0)
    config = {"backend": "vllm", "model": "builtin:tiny", "rollout_dtype": "float32",
              "vllm_kv_cache_gib": TEST_KV_CACHE_GIB, "algorithm": "ada-balance",
              "batch_size": 4, "group_size": 4, "samples_per_round": 4, "max_rounds": 2,
              "total_steps": 2, "lr": 2e-4, "save_every": 1, "eval_every": 0, "seed": 1}
    run = services.launch_run(user, "tiny on vllm", config, ps)
    run = wait_status(run, timeout=900)
    assert run.status == Run.Status.SUCCEEDED, run.traceback
    assert run.current_step == 2
    assert_no_duplicates(run)
    for step in Step.objects.filter(run=run):
        assert step.metrics["grad_norm"] > 0
        assert step.metrics["time_sync"] > 0
        assert 0 <= step.metrics["rollout_logprob_diff_max"] < 1e-3
    # The same run trained in this process on its own engine: per-request seeds make the
    # samples a function of (seed, step, round, prompt, sample), so the worker recorded exactly
    # what this process emits.
    emitted = replay_as_the_worker(run, tmp_path, tiny_model_dir, monkeypatch)
    assert_recorded_as_emitted(run, emitted)
