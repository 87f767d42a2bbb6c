"""The project's own exceptions: library errors are wrapped into these at the edges."""

from __future__ import annotations

from pydantic import ValidationError


class RemediatorError(Exception):
    """Base of every error remediator raises on purpose."""


class TransientError(RemediatorError):
    """Worth retrying later; `delay` is the earliest sensible retry, in seconds."""

    def __init__(self, message: str, delay: float = 5.0) -> None:
        super().__init__(message)
        self.delay = delay


class ApiUnavailable(TransientError):
    """The Kubernetes API did not take the request (overloaded, failing, unreachable): nothing
    happened, the step waits for the API instead of failing. `status` is the HTTP status (0 for
    a lost connection)."""

    def __init__(self, message: str, delay: float = 1.0, status: int = 0) -> None:
        super().__init__(message, delay)
        self.status = status


class NotActing(TransientError):
    """This replica may not write to the cluster now: its leadership lapsed (or was never won)."""


class PermanentError(RemediatorError):
    """Retrying will not help: stop the step and escalate to a human."""


class NotFoundError(PermanentError):
    """The object the step works on does not exist (any more)."""


class ConflictError(TransientError):
    """Optimistic concurrency lost a race; re-read and try again."""

    def __init__(self, message: str, delay: float = 0.0) -> None:
        super().__init__(message, delay)


class PolicyError(RemediatorError):
    """A policy set could not be loaded; `problems` lists every `file:line: field: message`."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class IllegalTransition(RemediatorError):
    """A state change the transition table does not allow."""


def validation_problems(exc: ValidationError, whole: str = "body") -> list[str]:
    """Each refused field as "where: why" (`whole` names the value itself, at no location)."""
    return [
        f"{'.'.join(str(p) for p in err['loc']) or whole}: {err['msg']}" for err in exc.errors()
    ]


def validation_message(exc: ValidationError, whole: str = "body") -> str:
    return "; ".join(validation_problems(exc, whole))
