"""A platform run mirrored by a real Celery worker to TensorBoard (the lightest client to
import: MLflow and W&B are read back value for value in tests/trainer/test_mirror.py, through
the same ``trainer.mirror``): its event files, read back with TensorBoard's own reader, hold the
run's Step rows value for value, tag the platform's run id and link back to its page; the run
page shows the tracker's state. A tracker folder outside the mirror root is refused at launch,
naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from experiments import services
from experiments.models import Run, Step

from tests.platform.test_worker import SIM, wait_status


def test_a_worker_run_mirrors_its_rows_and_folders_stay_under_the_root(
        start_worker: Any, user: Any, prompt_set_factory: Any, tmp_path: Path,
        client: Any) -> None:
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.plugins.hparams import metadata
    from tensorboard.util.tensor_util import make_ndarray

    root = tmp_path / "mirror"
    start_worker("cpu", env={"RUN_MIRROR_ROOT": str(root),
                             "RADA_PUBLIC_URL": "https://rada.example"})
    ps = prompt_set_factory(12, pass_rate=0.5)
    run = services.launch_run(user, "mirrored", SIM | {
        "total_steps": 3, "save_every": 0, "mirror": "tensorboard:tb"}, ps)
    run = wait_status(run)
    assert run.status == Run.Status.SUCCEEDED, run.traceback
    rows = {s.step: s.metrics for s in Step.objects.filter(run=run).order_by("step")}
    assert sorted(rows) == [1, 2, 3]
    series = {}
    for step, metrics in rows.items():
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                series.setdefault(key, []).append((step, float(value)))
    (state,) = run.mirror_state
    assert (state["target"], state["run_id"], state["last_step"], state["lost"],
            state["error"]) == ("tensorboard:tb", f"run-{run.pk}", 3, 0, "")

    acc = ea.EventAccumulator(str(root / "tb" / f"run-{run.pk}"),
                              size_guidance={ea.TENSORS: 0})
    acc.Reload()
    for key, values in series.items():
        assert [(e.step, make_ndarray(e.tensor_proto).item()) for e in acc.Tensors(key)] \
            == values, key
    session = metadata.parse_session_start_info_plugin_data(acc.SummaryMetadata(
        metadata.SESSION_START_INFO_TAG).plugin_data.content).hparams
    assert session["rada.run_id"].string_value == str(run.pk)
    assert session["rada.link"].string_value == f"https://rada.example/runs/{run.pk}/"
    assert session["batch_size"].number_value == SIM["batch_size"]

    client.force_login(user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-mirror"' in page and "tensorboard:tb" in page and "0 events lost" in page

    # A folder outside the mirror root is refused at launch, naming the field.
    for where in ("/etc/rada", "../elsewhere"):
        with pytest.raises(services.LaunchError) as err:
            services.launch_run(user, "escape", SIM | {"mirror": f"tensorboard:{where}"}, ps)
        assert [f for f, _ in err.value.pairs] == ["mirror"]


def test_runs_differing_only_by_their_trackers_are_one_seed_group() -> None:
    from dashboard.selectors import seed_group_key

    config = SIM | {"total_steps": 3}
    plain = Run(prompt_set_id=1, model="builtin:tiny", config=config | {"seed": 0})
    mirrored = Run(prompt_set_id=1, model="builtin:tiny",
                   config=config | {"seed": 1, "mirror": "tensorboard:tb"})
    other = Run(prompt_set_id=1, model="builtin:tiny", config=config | {"batch_size": 7})
    assert seed_group_key(plain) == seed_group_key(mirrored) != seed_group_key(other)
