"""Typed errors raised by the PandaStack SDK.

Every error is a :class:`PandaStackError` and carries ``code`` (the server's machine-readable
``error.code``, or an SDK code such as ``"connection_error"``), ``message``, ``request_id`` (the
server's ``X-Request-Id`` when there was a response) and ``status`` (the HTTP status, or ``None``).

A command that exits non-zero is *data* (:class:`~pandastack.ExecResult`), not an error, unless
``check=True`` was passed: then :class:`CommandExitError` (non-zero exit) or
:class:`CommandTimeoutError` (the server killed the command at ``timeout_seconds``) is raised.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Type

if TYPE_CHECKING:  # pragma: no cover
    from .types import Deploy, ExecResult, FunctionVersion, Template, VolumeBackup

__all__ = [
    "PandaStackError",
    "APIError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "SandboxNotFoundError",
    "TemplateNotFoundError",
    "SnapshotNotFoundError",
    "VolumeNotFoundError",
    "DatabaseNotFoundError",
    "AppNotFoundError",
    "ConflictError",
    "SandboxStateError",
    "VolumeBusyError",
    "QuotaExceededError",
    "QueryError",
    "InvalidArgumentError",
    "RateLimitError",
    "LimitReachedError",
    "ServerError",
    "APIConnectionError",
    "RequestTimeoutError",
    "CommandTimeoutError",
    "CommandExitError",
    "StreamError",
    "TemplateBuildError",
    "TemplateBuildTimeoutError",
    "VolumeBackupError",
    "VolumeBackupTimeoutError",
    "DeployTimeoutError",
    "FunctionVersionTimeoutError",
    "GitError",
    "GitAuthError",
    "GitConflictError",
]


class PandaStackError(Exception):
    """Base class of every SDK error."""

    code: str
    message: str
    request_id: Optional[str]
    status: Optional[int]

    def __init__(
        self,
        message: str,
        *,
        code: str = "error",
        request_id: Optional[str] = None,
        status: Optional[int] = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.request_id = request_id
        self.status = status
        self.body = body

    def __str__(self) -> str:
        parts = []
        if self.status is not None:
            parts.append(str(self.status))
        if self.code:
            parts.append(self.code)
        head = " ".join(parts)
        tail = f" (request_id={self.request_id})" if self.request_id else ""
        return f"{head}: {self.message}{tail}" if head else f"{self.message}{tail}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, "
            f"status={self.status!r}, request_id={self.request_id!r})"
        )


class APIError(PandaStackError):
    """The server answered with an error status (the ``{"error": {...}}`` envelope)."""


class AuthenticationError(APIError):
    """401: missing, invalid or revoked API key."""


class PermissionDeniedError(APIError):
    """403."""


class NotFoundError(APIError):
    """404: the object does not exist (or belongs to another workspace), or a guest path is
    missing."""


class SandboxNotFoundError(NotFoundError):
    """404 ``sandbox_not_found``."""


class TemplateNotFoundError(NotFoundError):
    """404 ``template_not_found``."""


class SnapshotNotFoundError(NotFoundError):
    """404 ``snapshot_not_found``."""


class VolumeNotFoundError(NotFoundError):
    """404 ``volume_not_found``: no volume of that name in the workspace (or, for a create
    ``from_snapshot`` / ``from_backup``, no such snapshot or backup)."""


class DatabaseNotFoundError(NotFoundError):
    """404 ``database_not_found``: no database of that id or name in the workspace."""


class AppNotFoundError(NotFoundError):
    """404 ``app_not_found``: no app of that name or id in the workspace."""


class ConflictError(APIError):
    """409: e.g. an ``Idempotency-Key`` reused with a different body, or a state conflict."""


class SandboxStateError(ConflictError):
    """409 ``sandbox_state``: the operation is not valid in the sandbox's current state (for
    example ``resume`` on a running sandbox)."""


class VolumeBusyError(ConflictError):
    """409 ``volume_busy``: the volume is mounted read-write by a sandbox (the message names
    it), so it cannot be mounted read-write again, grown or deleted until that sandbox is
    gone. Mount it ``read_only`` to share a copy."""


class QuotaExceededError(APIError):
    """507 ``quota_exceeded``: a workspace storage quota is full: the total size of its volumes,
    or the host disk its snapshots, hibernated sandboxes and template builds take (the message
    says which)."""


_PG_ERROR = re.compile(r"^(?P<severity>[A-Z]+) (?P<sqlstate>[0-9A-Z]{5}): (?P<text>.*)$", re.DOTALL)


class QueryError(APIError):
    """400 ``query_failed``: PostgreSQL refused a query of ``databases.query`` (a syntax error,
    a constraint violation, a missing table, ...). The statement did not take effect.

    ``sqlstate`` is PostgreSQL's five-character error code (``"42601"`` syntax error,
    ``"23505"`` unique violation, ``"42P01"`` undefined table, ...), ``severity`` its severity
    (``"ERROR"``) and ``pg_message`` PostgreSQL's own message; all three are parsed from the
    server's message ``"ERROR 42601: syntax error at or near ..."`` (``None`` if it has another
    shape)."""

    sqlstate: Optional[str]
    severity: Optional[str]
    pg_message: str

    def __init__(self, message: str, **kw: Any) -> None:
        kw.setdefault("code", "query_failed")
        super().__init__(message, **kw)
        m = _PG_ERROR.match(message or "")
        self.severity = m.group("severity") if m else None
        self.sqlstate = m.group("sqlstate") if m else None
        self.pg_message = m.group("text") if m else (message or "")


class InvalidArgumentError(APIError):
    """400 / 413 / 422: a request field was rejected (the message names the field)."""


class RateLimitError(APIError):
    """429: a workspace limit was reached. ``retry_after`` is the server's ``Retry-After`` in
    seconds (or ``None``). The client already retried up to ``max_retries`` times."""

    def __init__(self, message: str, *, retry_after: Optional[float] = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class LimitReachedError(RateLimitError):
    """429 ``limit_reached``: the workspace keeps as many snapshots, hibernated sandboxes or
    template builds as its quota allows (the message names which). It lasts until something is
    deleted, so the client does not retry it."""


class ServerError(APIError):
    """5xx."""

    def __init__(self, message: str, *, retry_after: Optional[float] = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class APIConnectionError(PandaStackError):
    """The server could not be reached, or the connection broke before a full answer."""


class RequestTimeoutError(APIConnectionError):
    """The HTTP request exceeded the client's request timeout (not a command timeout)."""


class CommandTimeoutError(PandaStackError):
    """A command ran past its ``timeout_seconds``.

    Raised (1) when ``check=True`` and the server reports ``timed_out`` (``result`` is then the
    partial :class:`~pandastack.ExecResult`), and (2) always when the HTTP request carrying a
    command outlives the command's timeout plus a margin (``result`` is ``None``).
    """

    def __init__(self, message: str, *, result: Optional["ExecResult"] = None, **kw: Any) -> None:
        kw.setdefault("code", "command_timeout")
        super().__init__(message, **kw)
        self.result = result


class CommandExitError(PandaStackError):
    """``check=True`` and the command exited non-zero. ``result`` holds the full
    :class:`~pandastack.ExecResult`; ``exit_code``, ``stdout`` and ``stderr`` are shortcuts."""

    def __init__(self, message: str, *, result: "ExecResult", **kw: Any) -> None:
        kw.setdefault("code", "command_exit")
        super().__init__(message, **kw)
        self.result = result

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    @property
    def stdout(self) -> str:
        return self.result.stdout

    @property
    def stderr(self) -> str:
        return self.result.stderr


class StreamError(PandaStackError):
    """The server sent an ``error`` event on a stream (e.g. the guest agent went away), or the
    stream ended without an ``exit`` event."""


class TemplateBuildError(PandaStackError):
    """A template build waited for with ``templates.build(..., wait=True)`` ended ``failed``.
    ``template`` is the template as the server reported it at the end (its ``state`` is
    ``failed``); ``error`` is the server's reason (``template.error``). The whole build log is
    ``client.templates.logs(name)``."""

    def __init__(self, message: str, *, template: "Template", **kw: Any) -> None:
        kw.setdefault("code", "template_build_failed")
        super().__init__(message, **kw)
        self.template = template

    @property
    def error(self) -> Optional[str]:
        return self.template.error


class TemplateBuildTimeoutError(TemplateBuildError):
    """``templates.build(..., timeout_seconds=…)`` gave up waiting: the build had not finished
    in time. It keeps running on the server; ``template`` is its last known state (follow it with
    ``templates.get(name)``)."""

    def __init__(self, message: str, *, template: "Template", **kw: Any) -> None:
        kw.setdefault("code", "template_build_timeout")
        super().__init__(message, template=template, **kw)


class VolumeBackupError(PandaStackError):
    """A backup waited for with ``volumes.wait_backup`` (or ``volumes.backup(..., wait=True)``)
    ended ``failed``. ``backup`` is the backup as the server reported it; ``error`` the
    server's reason."""

    def __init__(self, message: str, *, backup: "VolumeBackup", **kw: Any) -> None:
        kw.setdefault("code", "volume_backup_failed")
        super().__init__(message, **kw)
        self.backup = backup

    @property
    def error(self) -> Optional[str]:
        return self.backup.error


class VolumeBackupTimeoutError(VolumeBackupError):
    """``volumes.wait_backup(..., timeout=…)`` gave up: the upload had not ended in time. It
    goes on on the server; ``backup`` is its last known state."""

    def __init__(self, message: str, *, backup: "VolumeBackup", **kw: Any) -> None:
        kw.setdefault("code", "volume_backup_timeout")
        super().__init__(message, backup=backup, **kw)


class DeployTimeoutError(PandaStackError):
    """``apps.wait_for_deploy(..., timeout=…)`` (or ``apps.deploy(..., wait=True)``) gave up:
    the deploy was still under way. It goes on on the server; ``deploy`` is its last known
    state (follow it with ``apps.get_deploy(name, deploy.id)``)."""

    def __init__(self, message: str, *, deploy: "Deploy", **kw: Any) -> None:
        kw.setdefault("code", "deploy_timeout")
        super().__init__(message, **kw)
        self.deploy = deploy


class FunctionVersionTimeoutError(PandaStackError):
    """``functions.wait_for_version(..., timeout=…)`` (or ``functions.create_version(...,
    wait=True)``) gave up: the version was still being built. The build goes on on the server;
    ``version`` is its last known state (follow it with ``functions.get_version(name,
    version.version)``)."""

    def __init__(self, message: str, *, version: "FunctionVersion", **kw: Any) -> None:
        kw.setdefault("code", "function_version_timeout")
        super().__init__(message, **kw)
        self.version = version


class GitError(PandaStackError):
    """A git command that ``sandbox.git`` ran in the sandbox failed. The message is git's own
    (its standard error, or its output when that is empty) after the command; ``command`` is
    the argv that ran (it never holds a token), ``result`` the whole
    :class:`~pandastack.ExecResult`; ``exit_code`` and ``stderr`` are shortcuts. A token given
    to the call is replaced by ``***`` wherever git echoed it."""

    def __init__(
        self,
        message: str,
        *,
        command: Sequence[str] = (),
        result: Optional["ExecResult"] = None,
        **kw: Any,
    ) -> None:
        kw.setdefault("code", "git_failed")
        super().__init__(message, **kw)
        self.command: List[str] = list(command)
        self.result = result

    @property
    def exit_code(self) -> Optional[int]:
        return self.result.exit_code if self.result is not None else None

    @property
    def stderr(self) -> str:
        return self.result.stderr if self.result is not None else ""


class GitAuthError(GitError):
    """The remote refused the credentials, or wanted some and none were given (git says
    "Authentication failed", "could not read Username", "terminal prompts disabled", or the
    server answered 401 / 403). Git never prompts: the command fails at once."""

    def __init__(self, message: str, **kw: Any) -> None:
        kw.setdefault("code", "git_auth_failed")
        super().__init__(message, **kw)


class GitConflictError(GitError):
    """A pull (a merge) stopped on conflicts. ``files`` are the conflicting paths, relative to
    the repository; the working tree is left mid-merge with conflict markers in them: resolve,
    ``add`` and ``commit``, or run ``git merge --abort``."""

    def __init__(self, message: str, *, files: Sequence[str] = (), **kw: Any) -> None:
        kw.setdefault("code", "git_conflict")
        super().__init__(message, **kw)
        self.files: List[str] = list(files)


_BY_CODE: Dict[str, Type[APIError]] = {
    "sandbox_not_found": SandboxNotFoundError,
    "template_not_found": TemplateNotFoundError,
    "snapshot_not_found": SnapshotNotFoundError,
    "sandbox_state": SandboxStateError,
    "volume_not_found": VolumeNotFoundError,
    "volume_busy": VolumeBusyError,
    "quota_exceeded": QuotaExceededError,
    "limit_reached": LimitReachedError,
    "database_not_found": DatabaseNotFoundError,
    "query_failed": QueryError,
    "app_not_found": AppNotFoundError,
}


def error_for_status(
    status: int,
    code: str,
    message: str,
    request_id: Optional[str],
    body: Any = None,
    retry_after: Optional[float] = None,
) -> APIError:
    """Maps an HTTP error answer onto the error hierarchy."""
    cls: Type[APIError]
    if code in _BY_CODE:
        cls = _BY_CODE[code]
    elif status == 401:
        cls = AuthenticationError
    elif status == 403:
        cls = PermissionDeniedError
    elif status == 404:
        cls = NotFoundError
    elif status == 409:
        cls = ConflictError
    elif status in (400, 413, 422):
        cls = InvalidArgumentError
    elif status == 429:
        return RateLimitError(
            message, code=code, request_id=request_id, status=status, body=body,
            retry_after=retry_after,
        )
    elif status >= 500:
        return ServerError(
            message, code=code, request_id=request_id, status=status, body=body,
            retry_after=retry_after,
        )
    else:
        cls = APIError
    return cls(message, code=code, request_id=request_id, status=status, body=body)
