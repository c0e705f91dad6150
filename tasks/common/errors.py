"""docflow's exceptions; the CLI maps them to exit codes in one place (flows/commands/common.py)."""

from __future__ import annotations

import signal


class DocflowError(Exception):
    """Base of every error docflow raises on purpose."""


class ConfigError(DocflowError):
    """A bad option, config file or environment variable (CLI exit code 2)."""


class LoadError(DocflowError):
    """A file that cannot be loaded; recorded with its one-line reason, never fatal."""


class EmbedError(DocflowError):
    """The embedding model cannot be loaded or used."""


class LLMError(DocflowError):
    """The LLM endpoint failed, timed out, kept refusing, or gave no valid reply twice."""


class StoreError(DocflowError):
    """The vector store refused an operation or does not match this run's settings."""


class StateError(DocflowError):
    """The data dir's state (manifest, lexical index, tables) is damaged, full or unwritable."""


def describe(exc: BaseException) -> str:
    """Return the one line a run records for ``exc``.

    docflow's own errors are written for the reader; anything else is named by its type, and
    a Ctrl-C (whose message is empty) says so instead of ``KeyboardInterrupt: ``, and a
    SIGTERM (``docker stop``, a pod's eviction) instead of ``TerminationSignal``.
    """
    if isinstance(exc, DocflowError):
        return str(exc)
    stop = stop_signal(exc)
    if isinstance(stop, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    if stop is not None:
        return terminated(stop.signal)  # type: ignore[attr-defined]
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def terminated(signum: int) -> str:
    """Return the one line of a run or command that signal ``signum`` stopped from outside."""
    return f"terminated ({signal.Signals(signum).name}: stopped from outside)"


def stop_signal(exc: BaseException) -> BaseException | None:
    """Return the Ctrl-C or SIGTERM that ``exc`` stems from, if it does (else None).

    A signal can land while Prefect's task engine sets a task run up; its handling then
    fails in turn (``ValueError: Task run is not set``), and that error, not the signal,
    reaches the run. The stop is what happened: it is found in the exception's chain.
    """
    seen: set[int] = set()
    at: BaseException | None = exc
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        if isinstance(at, KeyboardInterrupt):
            return at
        signum = getattr(at, "signal", None)  # Prefect's TerminationSignal: a SIGTERM
        if type(at).__name__ == "TerminationSignal" and isinstance(signum, int):
            return at
        at = at.__cause__ or at.__context__
    return None
