"""The writes the dashboard triggers: the platform's write services (``experiments.services``).

Views import from here so that the dashboard's one seam to the write side is in one place; the
permission rule (owner or staff) is the services' own.
"""

from __future__ import annotations

from typing import Any

from experiments import services as _services
from experiments.models import Run
from experiments.services import (
    LaunchError,
    create_builtin_prompt_set,
    create_prompt_set_from_upload,
    delete_run,
    launch_run,
    relaunch_run,
    request_cancel,
)


def can_manage(user: Any, run: Run) -> bool:
    """May ``user`` cancel, delete or relaunch ``run``? (Shows or hides those buttons.)"""
    return _services.can_modify_run(run, user)


__all__ = ["LaunchError", "can_manage", "create_builtin_prompt_set",
           "create_prompt_set_from_upload", "delete_run", "launch_run", "relaunch_run",
           "request_cancel"]
