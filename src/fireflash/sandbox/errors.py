"""Errors of the sandbox stage: infrastructure failures, never the agent's mistakes."""


class SandboxError(RuntimeError):
    """A sandbox failed to start, died, or could not be cleaned up (RECIPE.md §1: an infrastructure failure)."""


class SandboxUnavailable(SandboxError):
    """The host lacks what the backend needs; the message names what is missing and how to fix it."""


class SandboxClosed(SandboxError):
    """The sandbox was used after ``close()`` (or after it died)."""


class OutOfProcesses(SandboxError):
    """No process could be forked for the sandbox: its processes filled its pids limit (the agent's doing).

    The shell session handles it by killing the sandbox's processes and telling the agent, so it only
    escapes as an infrastructure failure when that did not free the limit.
    """
