"""Writes of the experiments app (HackSoft styleguide), one module per concern:

- ``common``: ``LaunchError``, who may change a run, values that must fit their columns;
- ``prompt_sets``: importing, generating and deleting prompt sets;
- ``launch``: validating and launching a run;
- ``runs``: cancel, delete, relaunch; a run's records and checkpoint folder;
- ``sweeps``: grids of runs, launched and cancelled as one; a failed run retried in its place;
- ``leases``: the run lease and the workers' side of a run's life (resume, requeue);
- ``enqueue``: the only way work reaches the broker (tasks sent by name).

Views, the API and the worker call these functions as ``services.<name>``; models carry
constraints only. Everything heavy stays out: configs are validated by ``trainer.config`` (no
torch), prompt files are parsed by ``trainer.data`` and the built-in task by ``trainer.tasks``.
"""

from experiments.services.common import (
    Conflict,
    Gone,
    LaunchError,
    LimitReached,
    User,
    can_modify_run,
    check_fits_columns,
    derived_run_name,
)
from experiments.services.launch import (
    config_errors,
    effective_verifier,
    launch_errors,
    launch_run,
    queue_errors,
    step_work_errors,
    validate_run_config,
    world_size_errors,
)
from experiments.services.leases import (
    acquire_run_lease,
    finish_run,
    hand_back_run,
    latest_checkpoint,
    prepare_resume,
    renew_run_lease,
    requeue_after_environment_error,
    requeue_orphaned_runs,
    run_process_lost,
    run_should_stop,
    set_run_waiting,
    take_next_run,
)
from experiments.services.prompt_sets import (
    create_builtin_prompt_set,
    create_prompt_set_from_upload,
    delete_prompt_set,
    find_or_import_prompt_set,
    import_prompt_set,
    prompt_set_name_error,
)
from experiments.services.runs import (
    RUN_RECORD_TABLES,
    delete_run,
    delete_run_records,
    relaunch_run,
    request_cancel,
    run_checkpoint_dir,
)
from experiments.services.sweeps import (
    UNSWEEPABLE,
    Grid,
    can_modify_sweep,
    cancel_sweep,
    expand_sweep,
    grid_json,
    launch_sweep,
    parse_sweep_spec,
    point_label,
    retry_run,
    retryable,
    run_point,
    sweep_grid,
    sweep_points,
    sweep_run_name,
)

__all__ = [
    "Conflict", "Gone", "Grid", "LaunchError", "LimitReached", "RUN_RECORD_TABLES",
    "UNSWEEPABLE", "User", "acquire_run_lease",
    "can_modify_run", "can_modify_sweep", "cancel_sweep", "check_fits_columns", "config_errors",
    "create_builtin_prompt_set", "create_prompt_set_from_upload", "delete_prompt_set",
    "delete_run", "delete_run_records", "derived_run_name", "effective_verifier", "expand_sweep",
    "find_or_import_prompt_set", "finish_run", "grid_json", "hand_back_run", "import_prompt_set",
    "latest_checkpoint", "launch_errors", "launch_run", "launch_sweep", "parse_sweep_spec",
    "prompt_set_name_error",
    "point_label", "prepare_resume", "queue_errors", "relaunch_run", "renew_run_lease",
    "request_cancel", "requeue_after_environment_error", "requeue_orphaned_runs", "retry_run",
    "retryable", "run_checkpoint_dir", "run_point",
    "run_process_lost", "run_should_stop", "set_run_waiting",
    "step_work_errors", "sweep_grid", "sweep_points", "sweep_run_name", "take_next_run",
    "validate_run_config", "world_size_errors",
]
