"""A failure's reason, first and in plain text, from Ray's wrappers (``trainer.errors``). The
real path, a rank raising in a Ray actor, is in test_distributed.py; these are the shapes Ray
hands over, built with Ray's own exception class."""

from __future__ import annotations

import traceback

from trainer.distributed.launcher import RankFailed
from trainer.errors import is_environment_error, plain_traceback, reason


def from_a_rank(exc: Exception) -> RankFailed:
    """``exc`` raised in a rank as the driver receives it: Ray's ``RayTaskError`` (also an
    instance of the cause's class; its text the coloured remote traceback), wrapped by the
    launcher."""
    from ray.exceptions import RayTaskError

    try:
        raise exc
    except Exception:
        remote = traceback.format_exc()
    try:
        raise RayTaskError("call", remote, exc, proctitle="ray::RankActor.call", pid=7,
                           ip="127.0.0.1").as_instanceof_cause()
    except Exception as ray_error:
        return RankFailed("rank 1 of 2 failed in update; every rank was stopped", ray_error)


def test_a_ranks_error_reads_reason_first_in_plain_text() -> None:
    failed = from_a_rank(ValueError("device: these ranks were built with 'cpu'"))
    ray_text = str(failed.__cause__)
    assert "\x1b[36m" in ray_text and ray_text.splitlines()[-1].startswith("ValueError")
    assert reason(failed) == ("ValueError: device: these ranks were built with 'cpu' (rank 1 of "
                              "2 failed in update; every rank was stopped)")
    # Its own text (a traceback's last line, the CLI's) says where, then why.
    assert str(failed) == ("rank 1 of 2 failed in update; every rank was stopped: ValueError: "
                           "device: these ranks were built with 'cpu'")
    trace = plain_traceback(failed)
    assert "\x1b" not in trace and "ray::RankActor.call()" in trace
    assert trace.rstrip().endswith(str(failed))


def test_reasons_of_plain_and_odd_errors() -> None:
    assert reason(RuntimeError("boom")) == "RuntimeError: boom"
    assert reason(KeyError("lr")) == "KeyError: 'lr'"
    assert reason(ValueError("")) == "ValueError"
    # A message of several lines is one line; colour codes go.
    assert reason(OSError("\x1b[31mno file\x1b[0m\n  in /models/x")) == (
        "OSError: no file in /models/x")
    # Ray's text for a cause it could not pickle is a traceback: its last line is the reason.
    from ray.exceptions import RayError

    unpicklable = RayError("Exception x.Err isn't serializable: ...\nOriginal exception details:"
                           "\nTraceback (most recent call last):\n  File \"a.py\", line 1, in f"
                           "\n    g()\n    ^^^\nx.Err: the real reason")
    assert reason(unpicklable) == "RayError: x.Err: the real reason"


def test_an_import_error_anywhere_in_the_chain_is_the_environments() -> None:
    assert is_environment_error(from_a_rank(ModuleNotFoundError("No module named 'vllm'")))
    try:
        try:
            import no_such_module_anywhere  # noqa: F401
        except ImportError as exc:
            raise RuntimeError("the engine cannot start") from exc
    except RuntimeError as outer:
        assert is_environment_error(outer)
    assert not is_environment_error(from_a_rank(ValueError("a bad setting")))
    assert not is_environment_error(RuntimeError("boom"))
