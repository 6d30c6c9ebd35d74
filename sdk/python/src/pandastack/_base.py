"""Pieces shared by the sync and async clients: configuration, retry policy, error mapping,
request bodies and the Server-Sent Events decoder. No I/O happens here."""

from __future__ import annotations

import datetime
import decimal
import email.utils
import json
import os
import random
import time
import uuid
from dataclasses import dataclass
from typing import IO, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union, cast
from urllib.parse import quote

import httpx

from . import _wire
from ._version import __version__
from .errors import (
    APIConnectionError,
    AuthenticationError,
    DeployTimeoutError,
    FunctionVersionTimeoutError,
    InvalidArgumentError,
    NotFoundError,
    PandaStackError,
    RequestTimeoutError,
    StreamError,
    TemplateBuildError,
    TemplateBuildTimeoutError,
    VolumeBackupError,
    VolumeBackupTimeoutError,
    error_for_status,
)
from .types import (
    ROLES,
    AppBuild,
    AppGit,
    AppStart,
    CodeContext,
    Deploy,
    Event,
    ExecEvent,
    ExecResult,
    Execution,
    ExecutionError,
    ExitEvent,
    FunctionTarget,
    FunctionVersion,
    Result,
    SandboxExecTarget,
    StderrEvent,
    StdoutEvent,
    Template,
    VolumeBackup,
    VolumeMount,
    WatchEvent,
)

DEFAULT_BASE_URL = "http://localhost:8080"
DEFAULT_TIMEOUT = 60.0
#: Creates, forks, snapshots and wakes may bake a template first; they get at least this long.
DEFAULT_LIFECYCLE_TIMEOUT = 600.0
DEFAULT_MAX_RETRIES = 3
#: The server's default command timeout when ``timeout_seconds`` is not given.
SERVER_DEFAULT_EXEC_TIMEOUT = 60
#: Extra time the HTTP request of an exec gets beyond the command's own timeout.
EXEC_HTTP_MARGIN = 30.0
CHUNK_SIZE = 1 << 20
#: The server's bound on a code run when ``timeout_seconds`` is not given.
SERVER_DEFAULT_CODE_TIMEOUT = 300
#: Extra time the HTTP request of a code run gets beyond the run's own bound (the server gives
#: the kernel 30 s past the bound to report).
CODE_HTTP_MARGIN = 60.0
#: Starting or stopping a code context (the server bounds it at 60 s; the sandbox may wake first).
CODE_CONTEXT_TIMEOUT = 120.0

USER_AGENT = f"pandastack-python/{__version__}"

# Retry classes of a request.
#: GET and friends: retried on 429/502/503/504 and on any transport error.
RETRY_READ = "read"
#: PUT/PATCH/DELETE and creates carrying an Idempotency-Key: retried on 429/502/503/504 and on
#: errors that happen before the request reached the server (connect errors).
RETRY_IDEMPOTENT = "idempotent"
#: exec, fork, snapshot, lifecycle verbs: retried only when the server certainly did nothing
#: (429, connect errors). A 502/503 might come after the command already ran.
RETRY_UNSAFE = "unsafe"
#: A body that can be sent once only (a caller's stream): never retried.
RETRY_NEVER = "never"

RETRY_STATUSES = frozenset({429, 502, 503, 504})


@dataclass
class Config:
    api_key: str
    base_url: str
    timeout: float
    max_retries: int
    initial_backoff: float = 0.5
    max_backoff: float = 8.0
    #: A ``Retry-After`` longer than this is not waited for: the error is raised instead.
    max_retry_after: float = 60.0


def resolve_config(
    token: Optional[str],
    api_key: Optional[str],
    base_url: Optional[str],
    timeout: Optional[float],
    max_retries: Optional[int],
) -> Config:
    if token and api_key and token != api_key:
        raise ValueError("pass token= or api_key=, not both")
    key = (
        token
        or api_key
        or os.environ.get("PANDASTACK_API_KEY")
        or os.environ.get("PANDASTACK_TOKEN")
    )
    if not key:
        raise AuthenticationError(
            "no API key: pass PandaStack(api_key=...) or set PANDASTACK_API_KEY",
            code="missing_api_key",
        )
    url = base_url or os.environ.get("PANDASTACK_BASE_URL") or DEFAULT_BASE_URL
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"base_url must start with http:// or https://, got {url!r}")
    if timeout is None:
        env_t = os.environ.get("PANDASTACK_REQUEST_TIMEOUT")
        timeout = float(env_t) if env_t else DEFAULT_TIMEOUT
    if max_retries is None:
        max_retries = DEFAULT_MAX_RETRIES
    if max_retries < 0:
        raise ValueError("max_retries must be >= 0")
    return Config(api_key=key, base_url=url, timeout=float(timeout), max_retries=max_retries)


def default_headers(cfg: Config) -> Dict[str, str]:
    return {
        "Authorization": f"Bearer {cfg.api_key}",
        "User-Agent": USER_AGENT,
        "Accept": "application/json",
    }


def seg(s: str) -> str:
    """One URL path segment."""
    if not isinstance(s, str) or not s:
        raise InvalidArgumentError(f"expected a non-empty id, got {s!r}", code="invalid_argument")
    return quote(s, safe="")


#: Header that carries a sandbox's access token to a private preview URL.
ACCESS_TOKEN_HEADER = "X-PandaStack-Access-Token"


def port(p: Any) -> int:
    """A TCP port number (1 to 65535), checked before any request."""
    if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 65535:
        raise InvalidArgumentError(f"port: a TCP port, 1 to 65535, got {p!r}", code="invalid_argument")
    return p


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


def timeout_for(seconds: Optional[float], default: float) -> httpx.Timeout:
    t = default if seconds is None else float(seconds)
    return httpx.Timeout(t, connect=min(t, 30.0))


# ---------------------------------------------------------------- retries


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def retryable_status(policy: str, status: int) -> bool:
    if status not in RETRY_STATUSES or policy == RETRY_NEVER:
        return False
    if policy == RETRY_UNSAFE:
        return status == 429
    return True


def retryable_exception(policy: str, exc: BaseException) -> bool:
    """Whether a transport error may be retried under ``policy``."""
    if policy == RETRY_NEVER:
        return False
    before_sending = isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
    if before_sending:
        return True
    if policy == RETRY_READ:
        return isinstance(exc, httpx.TransportError)
    return False


def backoff(cfg: Config, attempt: int, retry_after: Optional[float]) -> Optional[float]:
    """Seconds to wait before retry number ``attempt`` (0-based), or None to give up."""
    if retry_after is not None:
        if retry_after > cfg.max_retry_after:
            return None
        # A little jitter so that many clients told "0" do not all come back at once.
        return float(retry_after) + random.uniform(0, min(0.25, cfg.initial_backoff))
    base = float(min(cfg.max_backoff, cfg.initial_backoff * (2.0 ** attempt)))
    return base / 2 + random.uniform(0, base / 2)


# ---------------------------------------------------------------- errors


def error_from_response(resp: httpx.Response, content: bytes) -> PandaStackError:
    return error_from_parts(
        resp.status_code,
        resp.headers.get("x-request-id"),
        resp.headers.get("retry-after"),
        content,
        resp.reason_phrase,
    )


def error_from_parts(
    status: int,
    request_id: Optional[str],
    retry_after: Optional[str],
    content: bytes,
    reason: str = "",
) -> PandaStackError:
    code = f"http_{status}"
    message = ""
    body: Any = None
    try:
        body = json.loads(content.decode("utf-8")) if content else None
    except (ValueError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        code = str(err.get("code") or code)
        message = str(err.get("message") or "")
        request_id = err.get("request_id") or request_id
    if not message:
        text = content.decode("utf-8", "replace").strip()
        message = text[:500] if text else (reason or f"HTTP {status}")
    return error_for_status(
        status,
        code,
        message,
        request_id,
        body=body,
        retry_after=parse_retry_after(retry_after),
    )


def error_from_exception(exc: BaseException, what: str) -> PandaStackError:
    if isinstance(exc, httpx.TimeoutException):
        return RequestTimeoutError(f"{what}: request timed out ({type(exc).__name__})", code="request_timeout")
    return APIConnectionError(f"{what}: {type(exc).__name__}: {exc}", code="connection_error")


# ---------------------------------------------------------------- bodies


def drop_none(d: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def create_body(
    template: Optional[str],
    snapshot_id: Optional[str],
    ttl_seconds: Optional[int],
    idle_timeout_seconds: Optional[int],
    on_timeout: Optional[str],
    metadata: Optional[Mapping[str, str]],
    env: Optional[Mapping[str, str]],
    volumes: Optional[Sequence[VolumeMountLike]] = None,
    disk_mbps: Optional[int] = None,
    disk_iops: Optional[int] = None,
    on_host_loss: Optional[str] = None,
) -> _wire.CreateSandboxRequest:
    body: _wire.CreateSandboxRequest = {}
    if template is not None:
        body["template"] = template
    if snapshot_id is not None:
        body["snapshot_id"] = snapshot_id
    if ttl_seconds is not None:
        body["ttl_seconds"] = ttl_seconds
    if idle_timeout_seconds is not None:
        body["idle_timeout_seconds"] = idle_timeout_seconds
    if on_timeout is not None:
        body["on_timeout"] = on_timeout  # type: ignore[typeddict-item]  # the server checks it
    if metadata is not None:
        body["metadata"] = dict(metadata)
    if env is not None:
        body["env"] = dict(env)
    if volumes is not None:
        body["volumes"] = volume_mounts(volumes)
    if disk_mbps is not None:
        body["disk_mbps"] = int(disk_mbps)
    if disk_iops is not None:
        body["disk_iops"] = int(disk_iops)
    if on_host_loss is not None:
        body["on_host_loss"] = on_host_loss  # type: ignore[typeddict-item]  # the server checks it
    return body


#: What ``volumes=`` of a sandbox create takes: :class:`~pandastack.VolumeMount` objects or
#: dicts ``{"name", "path", "read_only"?}``.
VolumeMountLike = Union[VolumeMount, Mapping[str, Any]]


def volume_mounts(volumes: Sequence[VolumeMountLike]) -> List[_wire.SandboxVolume]:
    """The ``volumes`` of a create request; each entry checked for shape (the server checks
    names, paths and counts)."""
    if isinstance(volumes, (str, bytes, Mapping, VolumeMount)):
        raise InvalidArgumentError(
            "volumes: a list of VolumeMount or {'name', 'path', 'read_only'} dicts",
            code="invalid_argument",
        )
    out: List[_wire.SandboxVolume] = []
    for i, v in enumerate(volumes):
        if isinstance(v, VolumeMount):
            out.append({"name": v.name, "path": v.path, "read_only": bool(v.read_only)})
            continue
        if not isinstance(v, Mapping) or not isinstance(v.get("name"), str) or not isinstance(v.get("path"), str):
            raise InvalidArgumentError(
                f"volumes[{i}]: a VolumeMount or a dict with str 'name' and 'path', got {v!r}",
                code="invalid_argument",
            )
        extra = set(v) - {"name", "path", "read_only"}
        if extra:
            raise InvalidArgumentError(
                f"volumes[{i}]: unknown keys {sorted(extra)} (name, path, read_only)",
                code="invalid_argument",
            )
        out.append({"name": v["name"], "path": v["path"], "read_only": bool(v.get("read_only", False))})
    return out


def volume_body(
    name: str,
    size_gb: Optional[int],
    from_snapshot: Optional[str],
    from_backup: Optional[str],
) -> _wire.CreateVolumeRequest:
    """The body of ``POST /v1/volumes``."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"expected a volume name, got {name!r}", code="invalid_argument")
    if from_snapshot is not None and from_backup is not None:
        raise InvalidArgumentError(
            "give from_snapshot or from_backup, not both", code="invalid_argument"
        )
    body: _wire.CreateVolumeRequest = {"name": name}
    if size_gb is not None:
        body["size_gb"] = int(size_gb)
    if from_snapshot is not None:
        body["from_snapshot"] = from_snapshot
    if from_backup is not None:
        body["from_backup"] = from_backup
    return body


#: How often ``volumes.wait_backup`` asks about an upload under way, seconds.
BACKUP_POLL_INTERVAL = 0.5
#: How long ``volumes.wait_backup`` waits by default, seconds.
DEFAULT_BACKUP_TIMEOUT = 3600.0


def backup_outcome(name: str, backup: VolumeBackup, what: str = "volume") -> VolumeBackup:
    """A finished backup, or :class:`~pandastack.VolumeBackupError` if it failed."""
    if backup.state == "failed":
        raise VolumeBackupError(
            f"backup {backup.id} of {what} {name} failed: {backup.error or 'no reason given'}",
            backup=backup,
        )
    return backup


def backup_timeout(
    name: str, backup: VolumeBackup, timeout: float, what: str = "volume"
) -> VolumeBackupTimeoutError:
    follow = "volumes.get_backup" if what == "volume" else "databases.backups"
    return VolumeBackupTimeoutError(
        f"backup {backup.id} of {what} {name} still uploading after {timeout:g} s; the upload "
        f"goes on on the server ({follow} shows its state)",
        backup=backup,
    )


# ---------------------------------------------------------------- databases

#: A database create (and a branch) may build and bake the ``postgres`` template first, which
#: takes minutes: it gets at least this long, seconds.
DATABASE_CREATE_TIMEOUT = 900.0
#: The server's statement timeout of a query when ``timeout_ms`` is not given, seconds.
SERVER_DEFAULT_QUERY_TIMEOUT = 30.0
#: Extra time the HTTP request of a query gets beyond its statement timeout: a hibernated
#: database wakes, a stopped one gets a new VM, before the query runs.
QUERY_HTTP_MARGIN = 300.0


def database_body(
    name: str,
    version: Optional[int],
    size_gb: Optional[int],
    idle_seconds: Optional[int],
    memory_mb: Optional[int] = None,
) -> _wire.CreateDatabaseRequest:
    """The body of ``POST /v1/databases``."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"expected a database name, got {name!r}", code="invalid_argument")
    body: _wire.CreateDatabaseRequest = {"name": name}
    if version is not None:
        body["version"] = int(version)
    if size_gb is not None:
        body["size_gb"] = int(size_gb)
    if memory_mb is not None:
        body["memory_mb"] = int(memory_mb)
    if idle_seconds is not None:
        body["idle_seconds"] = int(idle_seconds)
    return body


def rfc3339(field: str, t: Union[datetime.datetime, str]) -> str:
    """A time as the wire takes it (RFC 3339): a ``datetime`` by ``isoformat()``, a naive one
    taken as UTC; a string as it is (the server checks it)."""
    if isinstance(t, datetime.datetime):
        if t.tzinfo is None or t.utcoffset() is None:
            t = t.replace(tzinfo=datetime.timezone.utc)
        return t.isoformat()
    if isinstance(t, str) and t:
        return t
    raise InvalidArgumentError(
        f"{field}: expected a datetime or an RFC 3339 string, got {t!r}", code="invalid_argument"
    )


def metrics_params(
    since: Optional[Union[datetime.datetime, datetime.timedelta, str]], step: Optional[int]
) -> Dict[str, str]:
    """The query of ``GET /v1/{sandboxes,databases,apps,functions}/{id}/metrics``: ``since`` a
    span back as the server takes it (``"90s"``, ``"15m"``, ``"1h"``), a ``timedelta`` (sent as
    whole seconds) or a time (a ``datetime``, or an RFC 3339 string); ``step`` seconds per point.
    Only their types are checked here; the server checks the ranges (``since`` at most 6 h back,
    ``step`` 1 to 86400) and answers ``invalid_argument``."""
    p: Dict[str, str] = {}
    if since is not None:
        if isinstance(since, datetime.timedelta):
            p["since"] = f"{int(since.total_seconds())}s"
        else:
            p["since"] = rfc3339("since", since)
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, int):
            raise InvalidArgumentError(f"step: whole seconds per point, got {step!r}", code="invalid_argument")
        p["step"] = str(step)
    return p


def branch_body(
    name: Optional[str],
    idle_seconds: Optional[int],
    from_time: Optional[Union[datetime.datetime, str]] = None,
) -> _wire.CreateBranchRequest:
    """The body of ``POST /v1/databases/{id}/branches``."""
    if name is not None and (not isinstance(name, str) or not name):
        raise InvalidArgumentError(f"expected a branch name, got {name!r}", code="invalid_argument")
    body: _wire.CreateBranchRequest = {}
    if name is not None:
        body["name"] = name
    if from_time is not None:
        body["from_time"] = rfc3339("from_time", from_time)
    if idle_seconds is not None:
        body["idle_seconds"] = int(idle_seconds)
    return body


def restore_body(to_time: Union[datetime.datetime, str]) -> _wire.RestoreDatabaseRequest:
    """The body of ``POST /v1/databases/{id}/restore``."""
    return {"to_time": rfc3339("to_time", to_time)}


def query_param(i: int, v: Any) -> Any:
    """One query parameter as the wire takes it (a string, number, boolean or null; the server
    sends each to PostgreSQL as text). Lists and dicts become compact JSON text (what ``json``,
    ``jsonb`` and pgvector's ``vector`` read); dates, times, decimals and UUIDs their text."""
    if v is None or isinstance(v, (str, bool, int)):
        return v
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return str(v).replace("inf", "Infinity").replace("nan", "NaN")
        return v
    if isinstance(v, (list, tuple, dict)):
        try:
            return json.dumps(v, separators=(",", ":"), allow_nan=False, default=str)
        except ValueError as e:
            raise InvalidArgumentError(f"params[{i}]: {e}", code="invalid_argument") from None
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(v).hex()
    iso = getattr(v, "isoformat", None)
    if callable(iso):
        return iso()
    if isinstance(v, (decimal.Decimal, uuid.UUID)):
        return str(v)
    raise InvalidArgumentError(
        f"params[{i}]: a str, int, float, bool, None, list or dict, got {type(v).__name__}",
        code="invalid_argument",
    )


def query_body(sql: str, params: Optional[Sequence[Any]], timeout_ms: Optional[int]) -> _wire.QueryRequest:
    """The body of ``POST /v1/databases/{id}/query``."""
    if not isinstance(sql, str) or not sql.strip():
        raise InvalidArgumentError("sql: a non-empty SQL statement", code="invalid_argument")
    if params is not None and (isinstance(params, (str, bytes, Mapping)) or not hasattr(params, "__iter__")):
        raise InvalidArgumentError(
            f"params: a list of values for $1, $2, ..., got {type(params).__name__}",
            code="invalid_argument",
        )
    body: _wire.QueryRequest = {"sql": sql}
    if params is not None:
        body["params"] = [query_param(i, v) for i, v in enumerate(params)]
    if timeout_ms is not None:
        body["timeout_ms"] = int(timeout_ms)
    return body


def query_http_timeout(timeout_ms: Optional[int], default: float) -> httpx.Timeout:
    """The HTTP timeout of a query: its statement timeout plus time for the database to wake."""
    statement = SERVER_DEFAULT_QUERY_TIMEOUT if timeout_ms is None else max(0, int(timeout_ms)) / 1000
    return timeout_for(None, max(default, statement + QUERY_HTTP_MARGIN))


def exec_body(
    cmd: Union[str, Sequence[str], None],
    argv: Optional[Sequence[str]],
    timeout_seconds: Optional[float],
    env: Optional[Mapping[str, str]],
    cwd: Optional[str],
    user: Optional[str],
    stdin: Union[str, bytes, None],
) -> _wire.ExecRequest:
    if cmd is not None and argv is not None:
        raise InvalidArgumentError("give cmd or argv, not both", code="invalid_argument")
    body: _wire.ExecRequest = {}
    if argv is not None:
        body["argv"] = [str(a) for a in argv]
    elif isinstance(cmd, str):
        body["cmd"] = cmd
    elif cmd is not None:
        if isinstance(cmd, (bytes, bytearray)):
            raise InvalidArgumentError("cmd must be str or a list of str", code="invalid_argument")
        body["argv"] = [str(a) for a in cmd]
    else:
        raise InvalidArgumentError("cmd or argv is required", code="invalid_argument")
    if timeout_seconds is not None:
        body["timeout_seconds"] = wire_seconds(timeout_seconds)
    if env:
        body["env"] = wire_env(env)
    if cwd is not None:
        body["cwd"] = cwd
    if user is not None:
        body["user"] = user
    if stdin is not None:
        if isinstance(stdin, (bytes, bytearray)):
            try:
                stdin = bytes(stdin).decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidArgumentError(
                    "stdin: the server takes UTF-8 text; write binary input to a file and "
                    "redirect it instead",
                    code="invalid_argument",
                ) from None
        body["stdin"] = stdin
    return body


def wire_seconds(seconds: float) -> int:
    """A timeout in whole seconds, rounded up (the wire takes whole seconds), at least 1."""
    return max(1, int(-(-float(seconds) // 1)))


def wire_env(env: Mapping[str, str]) -> Dict[str, str]:
    """Environment variables as the wire takes them: string keys and values."""
    return {str(k): str(v) for k, v in env.items()}


def run_http_timeout(
    body: Mapping[str, Any], request_timeout: Optional[float], server_default: float, margin: float
) -> httpx.Timeout:
    """The HTTP timeout of a blocking run: the caller's, else the run's own (or the server's
    default) plus a margin for the answer to arrive."""
    if request_timeout is not None:
        return timeout_for(request_timeout, request_timeout)
    t = float(body.get("timeout_seconds") or server_default) + margin
    return httpx.Timeout(t, connect=30.0)


def exec_http_timeout(body: Mapping[str, Any], request_timeout: Optional[float]) -> httpx.Timeout:
    return run_http_timeout(body, request_timeout, SERVER_DEFAULT_EXEC_TIMEOUT, EXEC_HTTP_MARGIN)


def exec_stream_timeout(request_timeout: Optional[float]) -> httpx.Timeout:
    # The server sends a keep-alive comment every 15 s, so a read gap of a minute means trouble.
    read = 60.0 if request_timeout is None else float(request_timeout)
    return httpx.Timeout(read, connect=30.0)


def context_id_of(context: Union[str, CodeContext, None]) -> Optional[str]:
    """The id of a :class:`CodeContext` or an id string (``None`` stays ``None``)."""
    if context is None:
        return None
    if isinstance(context, CodeContext):
        return context.id
    if isinstance(context, str) and context:
        return context
    raise InvalidArgumentError(
        f"context must be a CodeContext or a context id, got {context!r}", code="invalid_argument"
    )


def code_body(
    code: str,
    language: Optional[str],
    context: Union[str, CodeContext, None],
    env: Optional[Mapping[str, str]],
    timeout_seconds: Optional[float],
) -> _wire.CodeRequest:
    if not isinstance(code, str):
        raise InvalidArgumentError("code must be str", code="invalid_argument")
    body: _wire.CodeRequest = {"code": code}
    if language is not None:
        body["language"] = language
    ctx = context_id_of(context)
    if ctx is not None:
        body["context_id"] = ctx
    if env:
        body["env"] = wire_env(env)
    if timeout_seconds is not None:
        body["timeout_seconds"] = wire_seconds(timeout_seconds)
    return body


def code_context_body(
    language: Optional[str], env: Optional[Mapping[str, str]]
) -> _wire.CodeContextRequest:
    body: _wire.CodeContextRequest = {}
    if language is not None:
        body["language"] = language
    if env:
        body["env"] = wire_env(env)
    return body


def code_http_timeout(body: Mapping[str, Any], request_timeout: Optional[float]) -> httpx.Timeout:
    return run_http_timeout(body, request_timeout, SERVER_DEFAULT_CODE_TIMEOUT, CODE_HTTP_MARGIN)


def _rfc3339(name: str, v: Any) -> str:
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            raise ValueError(f"{name}: an aware datetime (with a time zone)")
        return v.isoformat()
    if not isinstance(v, str):
        raise TypeError(f"{name}: an RFC 3339 string or an aware datetime")
    return v


def usage_params(from_: Any, to: Any, group_by: Any) -> Dict[str, str]:
    """The query of ``GET /v1/usage``: ``from``/``to`` (RFC 3339 or aware ``datetime``) and
    ``group_by`` (a comma string or a list of dimensions)."""
    p: Dict[str, str] = {}
    if from_ is not None:
        p["from"] = _rfc3339("from_", from_)
    if to is not None:
        p["to"] = _rfc3339("to", to)
    if group_by is not None:
        p["group_by"] = group_by if isinstance(group_by, str) else ",".join(group_by)
    return p


def list_params(
    limit: Optional[int],
    cursor: Optional[str],
    state: Optional[str] = None,
    metadata: Optional[Mapping[str, str]] = None,
) -> Dict[str, str]:
    p: Dict[str, str] = {}
    if limit is not None:
        p["limit"] = str(int(limit))
    if cursor:
        p["cursor"] = cursor
    if state:
        p["state"] = state
    for k, v in (metadata or {}).items():
        p[f"metadata.{k}"] = str(v)
    return p


def member_body(name: str, email: str, role: str) -> _wire.CreateMemberRequest:
    """The body of ``POST /v1/members``."""
    for field, v in (("name", name), ("email", email)):
        if not isinstance(v, str) or not v:
            raise InvalidArgumentError(f"{field}: a non-empty string, got {v!r}", code="invalid_argument")
    return {"name": name, "email": email, "role": _role(role)}


def member_update_body(name: Optional[str], role: Optional[str]) -> _wire.UpdateMemberRequest:
    """The body of ``PATCH /v1/members/{id}``: what is given changes, the rest stays."""
    body: _wire.UpdateMemberRequest = {}
    if name is not None:
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"name: a non-empty string, got {name!r}", code="invalid_argument")
        body["name"] = name
    if role is not None:
        body["role"] = _role(role)
    return body


def _role(role: Any) -> _wire.Role:
    if role not in ROLES:
        raise InvalidArgumentError(
            f"role: one of {', '.join(ROLES)}, got {role!r}", code="invalid_argument"
        )
    return cast(_wire.Role, role)


def audit_params(
    limit: Optional[int],
    cursor: Optional[str],
    key_id: Optional[str],
    resource_id: Optional[str],
    action: Optional[str],
    since: Optional[Union[datetime.datetime, str]],
) -> Dict[str, str]:
    """The query of ``GET /v1/audit``: ``since`` a ``datetime`` (a naive one taken as UTC) or
    an RFC 3339 string."""
    p = list_params(limit, cursor)
    if key_id:
        p["key_id"] = key_id
    if resource_id:
        p["resource_id"] = resource_id
    if action:
        p["action"] = action
    if since is not None:
        p["since"] = rfc3339("since", since)
    return p


def event_params(
    limit: Optional[int],
    cursor: Optional[str],
    type: Optional[str],
    resource: Optional[str],
) -> Dict[str, str]:
    """The query of ``GET /v1/events``: ``type`` an exact type, ``<kind>.*`` or ``*``;
    ``resource`` a resource's id (or name)."""
    p = list_params(limit, cursor)
    if type:
        p["type"] = type
    if resource:
        p["resource"] = resource
    return p


def webhook_body(url: str, events: Sequence[str], secret: Optional[str]) -> "_wire.CreateWebhookRequest":
    """The body of ``POST /v1/webhooks``."""
    if isinstance(events, str):
        raise TypeError("events: a list of event types or patterns, not one string")
    body: _wire.CreateWebhookRequest = {"url": url, "events": list(events)}
    if secret is not None:
        body["secret"] = secret
    return body


#: An event stream carries a keep-alive comment at least every 15 s: this long without a byte
#: means the connection is gone (it is then reopened).
EVENT_STREAM_READ_TIMEOUT = 60.0
#: Pause before reopening a broken event stream.
EVENT_STREAM_RETRY_DELAY = 1.0
#: Reopenings in a row without a new event before the stream's error is raised.
EVENT_STREAM_MAX_FAILURES = 5


def event_from_sse(event: str, data: str) -> Optional[Event]:
    """One SSE event of ``GET /v1/events`` (its ``event:`` is the type, its ``data:`` the event
    as JSON) as an :class:`Event`; ``None`` for anything that is not an event object."""
    try:
        payload = json.loads(data) if data else None
    except ValueError:
        return None
    if not isinstance(payload, dict) or "id" not in payload:
        return None
    return Event.from_json(payload)


# ---------------------------------------------------------------- SSE


class SSEDecoder:
    """Incremental ``text/event-stream`` decoder: feed it lines, get ``(event, data)`` pairs."""

    def __init__(self) -> None:
        self._event = ""
        self._data: List[str] = []
        #: The stream's last event id (its last ``id:`` field), ``None`` before any.
        self.last_id: Optional[str] = None

    def feed(self, line: str) -> Optional[Tuple[str, str]]:
        line = line.rstrip("\r\n")
        if line == "":
            if not self._data and not self._event:
                return None
            out = (self._event or "message", "\n".join(self._data))
            self._event, self._data = "", []
            return out
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self.last_id = value
        return None

    def flush(self) -> Optional[Tuple[str, str]]:
        return self.feed("")


def exec_event(event: str, data: str) -> Optional[ExecEvent]:
    """Turns one SSE event of ``/exec/stream`` into a typed event; raises :class:`StreamError`
    on ``error`` events; ignores unknown event names."""
    try:
        payload = json.loads(data) if data else {}
    except ValueError:
        payload = {"data": data}
    if not isinstance(payload, dict):
        payload = {"data": payload}
    if event == "stdout":
        return StdoutEvent(data=str(payload.get("data", "")))
    if event == "stderr":
        return StderrEvent(data=str(payload.get("data", "")))
    if event == "exit":
        return ExitEvent(
            exit_code=int(payload.get("exit_code", -1)),
            timed_out=bool(payload.get("timed_out", False)),
            truncated=bool(payload.get("truncated", False)),
            duration_ms=int(payload.get("duration_ms", 0) or 0),
        )
    if event == "error":
        raise StreamError(
            str(payload.get("message") or "exec stream failed"),
            code=str(payload.get("code") or "stream_error"),
        )
    return None


def code_event(event: str, data: str) -> Optional[Tuple[str, Any]]:
    """Turns one SSE event of ``/code/stream`` into ``(kind, value)``: ``("stdout", text)``,
    ``("stderr", text)``, ``("result", Result)``, ``("error", ExecutionError)`` or
    ``("done", payload)``; ``None`` for unknown event names. An ``error`` event naming
    ``ContextNotFound`` raises :class:`NotFoundError`, as the blocking call's 404 does."""
    try:
        payload = json.loads(data) if data else {}
    except ValueError:
        payload = {"data": data}
    if not isinstance(payload, dict):
        payload = {"data": payload}
    if event in ("stdout", "stderr"):
        return event, str(payload.get("data", ""))
    if event == "result":
        return "result", Result.from_json(payload)
    if event == "error":
        err = ExecutionError.from_json(payload)
        if err.name == "ContextNotFound":
            raise NotFoundError(
                f"code context {err.value} not found (create it with create_code_context())",
                code="not_found",
                status=404,
            )
        return "error", err
    if event == "done":
        return "done", payload
    return None


class CodeCollector:
    """Accumulates the events of ``/code/stream`` into an :class:`Execution`."""

    def __init__(self) -> None:
        self.stdout: List[str] = []
        self.stderr: List[str] = []
        self.results: List[Result] = []
        self.error: Optional[ExecutionError] = None
        self.done: Optional[Dict[str, Any]] = None

    def add(self, kind: str, value: Any) -> None:
        if kind == "stdout":
            self.stdout.append(value)
        elif kind == "stderr":
            self.stderr.append(value)
        elif kind == "result":
            self.results.append(value)
        elif kind == "error":
            self.error = value
        elif kind == "done":
            self.done = value

    def execution(self) -> Execution:
        if self.done is None:
            raise StreamError("code stream ended without a done event", code="stream_incomplete")
        return Execution(
            stdout="".join(self.stdout),
            stderr="".join(self.stderr),
            results=list(self.results),
            error=self.error,
            truncated=bool(self.done.get("truncated", False)),
            duration_ms=int(self.done.get("duration_ms", 0) or 0),
            raw=dict(self.done),
        )


def watch_event(event: str, data: str) -> Optional[WatchEvent]:
    """One SSE event of ``/files/watch`` as a :class:`WatchEvent`; raises :class:`StreamError`
    on ``error`` (the watch is over); ``None`` for events of kinds this client does not know."""
    try:
        payload = json.loads(data) if data else {}
    except ValueError:
        payload = {}
    if not isinstance(payload, dict):
        payload = {}
    if event == "error":
        raise StreamError(
            str(payload.get("message") or "the watch failed"),
            code=str(payload.get("code") or "stream_error"),
        )
    if event in ("ready", "create", "modify", "delete", "rename", "overflow"):
        return WatchEvent.from_json(payload)
    return None


def log_event(event: str, data: str) -> Optional[str]:
    """A ``logs?follow=1`` event: the text of a ``log`` event, ``""`` for events to skip, or
    ``None`` for ``end`` (the sandbox is gone; the stream is over)."""
    if event == "end":
        return None
    if event != "log":
        return ""
    try:
        payload = json.loads(data)
    except ValueError:
        return data
    return str(payload.get("data", "")) if isinstance(payload, dict) else str(payload)


class FrameDecoder:
    """Turns ``…/exec/ws`` server frames of one command into typed events; output is base64
    bytes, decoded as UTF-8 incrementally (a character split across frames stays whole)."""

    def __init__(self, cmd_id: str) -> None:
        import codecs

        self.id = cmd_id
        self._dec = {
            "stdout": codecs.getincrementaldecoder("utf-8")("replace"),
            "stderr": codecs.getincrementaldecoder("utf-8")("replace"),
        }

    def events(self, frame: Any) -> List[ExecEvent]:
        import base64

        if not isinstance(frame, dict):
            return []
        kind = frame.get("type")
        fid = frame.get("id")
        if kind == "error":
            if fid is None or fid == self.id:
                raise StreamError(
                    str(frame.get("message") or "exec failed"),
                    code=str(frame.get("code") or "stream_error"),
                )
            return []
        if fid != self.id:
            return []
        if kind in ("stdout", "stderr"):
            raw = base64.b64decode(str(frame.get("data") or ""))
            text = self._dec[kind].decode(raw)
            if not text:
                return []
            return [StdoutEvent(text) if kind == "stdout" else StderrEvent(text)]
        if kind == "exit":
            out: List[ExecEvent] = []
            for k, d in self._dec.items():
                rest = d.decode(b"", final=True)
                if rest:
                    out.append(StdoutEvent(rest) if k == "stdout" else StderrEvent(rest))
            out.append(
                ExitEvent(
                    exit_code=int(frame.get("exit_code", -1)),
                    timed_out=bool(frame.get("timed_out", False)),
                    truncated=bool(frame.get("truncated", False)),
                    duration_ms=int(frame.get("duration_ms", 0) or 0),
                )
            )
            return out
        return []


def ws_start_frame(cmd_id: str, body: Mapping[str, Any]) -> str:
    frame = {"type": "start", "id": cmd_id}
    frame.update({k: v for k, v in body.items() if k != "stdin"})
    return json.dumps(frame)


def ws_stdin_frame(cmd_id: str, data: Union[str, bytes]) -> str:
    import base64

    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return json.dumps({"type": "stdin", "id": cmd_id, "data": base64.b64encode(raw).decode()})


class ExecCollector:
    """Accumulates streamed events into an :class:`ExecResult`."""

    def __init__(self) -> None:
        self.stdout: List[str] = []
        self.stderr: List[str] = []
        self.exit: Optional[ExitEvent] = None

    def add(self, ev: ExecEvent) -> None:
        if isinstance(ev, StdoutEvent):
            self.stdout.append(ev.data)
        elif isinstance(ev, StderrEvent):
            self.stderr.append(ev.data)
        elif isinstance(ev, ExitEvent):
            self.exit = ev

    def result(self) -> ExecResult:
        if self.exit is None:
            raise StreamError("exec stream ended without an exit event", code="stream_incomplete")
        return ExecResult(
            stdout="".join(self.stdout),
            stderr="".join(self.stderr),
            exit_code=self.exit.exit_code,
            timed_out=self.exit.timed_out,
            truncated=self.exit.truncated,
            duration_ms=self.exit.duration_ms,
        )


def check_result(result: ExecResult, check: bool, what: str) -> ExecResult:
    from .errors import CommandExitError, CommandTimeoutError

    if not check:
        return result
    if result.timed_out:
        raise CommandTimeoutError(
            f"{what}: command timed out after {result.duration_ms} ms", result=result
        )
    if result.exit_code != 0:
        tail = result.stderr.strip().splitlines()[-1:] if result.stderr.strip() else []
        extra = f": {tail[0][:200]}" if tail else ""
        raise CommandExitError(
            f"{what}: command exited with code {result.exit_code}{extra}", result=result
        )
    return result


def describe_cmd(body: Mapping[str, Any]) -> str:
    c = body.get("cmd")
    if c is None:
        c = " ".join(body.get("argv") or [])
    c = str(c)
    return c if len(c) <= 80 else c[:77] + "..."


def chunked(data: bytes, size: int = CHUNK_SIZE) -> Iterable[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


# ---------------------------------------------------------------- template builds

#: What ``templates.build(tarball=...)`` takes: a local path (streamed from disk), bytes, or a
#: binary file object (streamed).
TarballSource = Union[str, os.PathLike[str], bytes, bytearray, memoryview, IO[bytes]]

#: A followed build log carries a keep-alive at least every 15 s: this long without a byte means
#: the connection is gone (it is then reopened).
BUILD_FOLLOW_READ_TIMEOUT = 60.0
#: Pause before reopening a broken build-log stream.
BUILD_FOLLOW_RETRY_DELAY = 1.0
#: Reopenings in a row without new log text before giving up.
BUILD_FOLLOW_MAX_FAILURES = 5
#: The short request that fetches the template's state when a wait runs out of time.
BUILD_PEEK_TIMEOUT = 10.0


@dataclass
class TemplateUpload:
    """The request of ``templates.build``: a JSON body (a spec), or a tarball with its query
    parameters. A tarball is exactly one of ``path`` (reopened on every attempt), ``data`` (in
    memory) or ``stream`` (the caller's file object: sent once, never retried)."""

    params: Dict[str, str]
    json: Optional[Dict[str, Any]] = None
    path: Optional[str] = None
    data: Optional[bytes] = None
    stream: Any = None
    content_type: str = "application/json"
    #: Bytes to send, when known without reading the tarball (sent as ``Content-Length``).
    length: Optional[int] = None


def tarball_content_type(head: bytes) -> str:
    """``application/gzip`` for a gzip stream (by its magic bytes), else ``application/x-tar``."""
    return "application/gzip" if head[:2] == b"\x1f\x8b" else "application/x-tar"


def _peek_file(f: Any) -> Tuple[bytes, Optional[int]]:
    """The first bytes of a binary file object and how many bytes remain, without consuming
    anything (``(b"", None)`` for a stream that cannot seek)."""
    import io

    try:
        if not f.seekable():
            return b"", None
        pos = f.tell()
        head = f.read(2)
        f.seek(pos)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return b"", None
    if isinstance(head, str):
        raise InvalidArgumentError(
            "tarball: open the file in binary mode ('rb')", code="invalid_argument"
        )
    try:
        length: Optional[int] = max(0, os.fstat(f.fileno()).st_size - pos)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        try:
            end = f.seek(0, os.SEEK_END)
            f.seek(pos)
            length = max(0, int(end) - pos)
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            length = None
    return bytes(head or b""), length


def template_upload(
    name: Optional[str],
    tarball: Optional[TarballSource],
    spec: Optional[str],
    cpu: Optional[int],
    memory_mb: Optional[int],
    disk_mb: Optional[int],
    description: Optional[str],
) -> TemplateUpload:
    """Checks the arguments of ``templates.build`` and says what to send. A local path is only
    opened (to see its size and whether it is gzip), never read whole."""
    if (tarball is None) == (spec is None):
        raise InvalidArgumentError(
            "give tarball= (an OCI image layout or `docker save` tarball) or spec= (TOML text), "
            "exactly one",
            code="invalid_argument",
        )
    if spec is not None:
        if not isinstance(spec, str):
            raise InvalidArgumentError("spec: the spec's TOML text (str)", code="invalid_argument")
        extra = [
            k
            for k, v in (
                ("cpu", cpu),
                ("memory_mb", memory_mb),
                ("disk_mb", disk_mb),
                ("description", description),
            )
            if v is not None
        ]
        if extra:
            raise InvalidArgumentError(
                f"{', '.join(extra)}: only for tarball builds (a spec says its own shape and "
                "description)",
                code="invalid_argument",
            )
        return TemplateUpload(params={}, json=drop_none({"name": name, "spec": spec}))
    if not name:
        raise InvalidArgumentError(
            "name: a tarball build needs the template's name", code="invalid_argument"
        )
    params: Dict[str, str] = {"name": str(name)}
    for k, v in (("cpu", cpu), ("memory_mb", memory_mb), ("disk_mb", disk_mb)):
        if v is not None:
            params[k] = str(int(v))
    if description is not None:
        params["description"] = str(description)
    if isinstance(tarball, (bytes, bytearray, memoryview)):
        data = bytes(tarball)
        return TemplateUpload(params, data=data, content_type=tarball_content_type(data[:2]))
    if isinstance(tarball, (str, os.PathLike)):
        path = os.fspath(tarball)
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(2)
        return TemplateUpload(
            params, path=path, content_type=tarball_content_type(head), length=size
        )
    if hasattr(tarball, "read"):
        head, length = _peek_file(tarball)
        return TemplateUpload(
            params, stream=tarball, content_type=tarball_content_type(head), length=length
        )
    raise InvalidArgumentError(
        f"tarball: a path, bytes or a binary file object, not {type(tarball).__name__}",
        code="invalid_argument",
    )


def template_upload_headers(up: TemplateUpload) -> Dict[str, str]:
    h = {"Content-Type": up.content_type}
    if up.length is not None and up.data is None:
        h["Content-Length"] = str(up.length)
    return h


def template_logs_params(version: Optional[int], follow: bool = False) -> Dict[str, str]:
    p: Dict[str, str] = {}
    if version is not None:
        p["version"] = str(int(version))
    if follow:
        p["follow"] = "1"
    return p


class LogFollower:
    """Follows one log to its end through ``GET …/logs?follow=1`` (Server-Sent Events: ``log``
    events with the log from its start, then one ``end`` event with the reason the log ended).
    Kept across reconnections: a new connection sends the log from the top again, and the text
    already passed on is skipped. No I/O here; the clients drive it.

    ``what`` names the log in errors; ``timeout_seconds`` (``None``: none) is the deadline of
    the whole follow."""

    def __init__(
        self,
        path: str,
        params: Mapping[str, str],
        what: str,
        timeout_seconds: Optional[float] = None,
    ) -> None:
        self.path = path
        self._params = dict(params)
        self.what = what
        self.timeout_seconds = timeout_seconds
        self.deadline = (
            None if timeout_seconds is None else time.monotonic() + float(timeout_seconds)
        )
        #: Characters of log passed on so far.
        self.seen = 0
        #: Why the log ended (``None`` while it goes on).
        self.reason: Optional[str] = None
        self.failures = 0
        self._offset = 0
        self._seen_at_start = 0
        self._dec = SSEDecoder()

    @property
    def done(self) -> bool:
        return self.reason is not None

    def params(self) -> Dict[str, str]:
        return dict(self._params)

    def remaining(self) -> Optional[float]:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def expired(self) -> bool:
        r = self.remaining()
        return r is not None and r <= 0

    def http_timeout(self) -> httpx.Timeout:
        t = BUILD_FOLLOW_READ_TIMEOUT
        r = self.remaining()
        if r is not None:
            t = min(t, max(r, 0.05))
        return httpx.Timeout(t, connect=min(t, 30.0))

    def retry_delay(self) -> float:
        r = self.remaining()
        return BUILD_FOLLOW_RETRY_DELAY if r is None else max(0.0, min(BUILD_FOLLOW_RETRY_DELAY, r))

    def start(self) -> None:
        """A new connection: its log starts from the top again."""
        self._offset = 0
        self._seen_at_start = self.seen
        self._dec = SSEDecoder()

    def line(self, line: str) -> str:
        """One line of the stream; returns new log text to pass on (``""`` for none)."""
        pair = self._dec.feed(line)
        return self._event(*pair) if pair is not None else ""

    def finish(self) -> str:
        """The stream ended: its last event, if it did not end with a blank line."""
        pair = self._dec.flush()
        return self._event(*pair) if pair is not None else ""

    def _event(self, event: str, data: str) -> str:
        if event == "end":
            try:
                payload = json.loads(data) if data else {}
            except ValueError:
                payload = {}
            reason = payload.get("reason") if isinstance(payload, dict) else None
            self.reason = str(reason or "ended")
            return ""
        text = log_event(event, data)
        if not text:
            return ""
        start = self._offset
        self._offset += len(text)
        if self._offset <= self.seen:
            return ""
        new = text[max(0, self.seen - start) :]
        self.seen = self._offset
        return new

    def broken(self, err: Optional[PandaStackError]) -> None:
        """The stream broke, or ended without an ``end`` event: reconnect, unless that keeps
        happening without any new log text (then ``err`` is raised)."""
        if self.seen > self._seen_at_start:
            self.failures = 0
        self.failures += 1
        if self.failures > BUILD_FOLLOW_MAX_FAILURES:
            raise err or StreamError(
                f"{self.what}: the stream keeps ending without an end event",
                code="stream_incomplete",
            )


class BuildFollower(LogFollower):
    """Follows one build to its end through ``GET /v1/templates/{name}/logs?follow=1&version=N``
    (its ``end`` event's reason is ``ready``, ``failed`` or ``deleted``)."""

    def __init__(self, queued: Template, timeout_seconds: Optional[float]) -> None:
        super().__init__(
            f"/v1/templates/{seg(queued.name)}/logs",
            template_logs_params(queued.version, follow=True),
            f"build log of template {queued.name}",
            timeout_seconds,
        )
        self.queued = queued
        self.name = queued.name
        self.version = queued.version

    def _what(self) -> str:
        v = f" version {self.version}" if self.version is not None else ""
        return f"template {self.name}{v}"

    def ended_by(self, latest: Template) -> bool:
        """Whether ``latest`` (fetched when the wait ran out of time) shows this build already
        ended; then :meth:`outcome` gives its result instead of a timeout."""
        if latest.building or (self.version is not None and latest.version != self.version):
            return False
        if latest.state not in ("ready", "failed"):
            return False
        self.reason = latest.state
        return True

    def timeout_error(self, latest: Template) -> TemplateBuildTimeoutError:
        return TemplateBuildTimeoutError(
            f"{self._what()}: still {latest.state or 'building'} after timeout_seconds="
            f"{self.timeout_seconds}; the build goes on on the server "
            "(templates.get(name) shows its state)",
            template=latest,
        )

    def outcome(self, latest: Template) -> Template:
        """The built template once the stream said how the build ended, or raises
        :class:`TemplateBuildError`. ``latest`` is ``GET /v1/templates/{name}`` after the end
        (or the queued template when it was deleted)."""
        if self.reason == "ready":
            return latest
        same = self.version is None or latest.version == self.version
        if self.reason == "failed":
            why = latest.error if same and latest.error else "see templates.logs(name)"
            raise TemplateBuildError(f"{self._what()}: build failed: {why}", template=latest)
        raise TemplateBuildError(
            f"{self._what()}: build ended: {self.reason}",
            template=latest,
            code="template_build_ended",
        )


class BackupWait:
    """The clock of ``volumes.wait_backup`` (and of ``apps.wait_for_deploy``): a deadline and
    the pause between two polls."""

    def __init__(
        self,
        timeout: Optional[float],
        default: float = DEFAULT_BACKUP_TIMEOUT,
        interval: float = BACKUP_POLL_INTERVAL,
    ) -> None:
        self.timeout = default if timeout is None else float(timeout)
        self.interval = interval
        self.deadline = time.monotonic() + self.timeout

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def pause(self) -> float:
        return max(0.0, min(self.interval, self.deadline - time.monotonic()))


# ---------------------------------------------------------------- apps

#: How often ``apps.wait_for_deploy`` asks about a deploy under way, seconds.
DEPLOY_POLL_INTERVAL = 1.0
#: How long ``apps.wait_for_deploy`` waits by default, seconds (a first deploy clones,
#: installs, builds, bakes and health-checks).
DEFAULT_DEPLOY_TIMEOUT = 1800.0
#: A rollback wakes a hibernated VM and health-checks it before it answers: at least this
#: long, seconds.
ROLLBACK_TIMEOUT = DEFAULT_LIFECYCLE_TIMEOUT
#: Names ``apps.deploy_directory`` leaves out of the upload, at any depth.
UPLOAD_EXCLUDES = frozenset({".git", "node_modules"})

#: What ``git=`` of ``apps.create`` / ``apps.update`` takes: the repository's URL, an
#: :class:`~pandastack.AppGit`, or a dict ``{"url", "ref"?}``.
AppGitLike = Union[str, AppGit, Mapping[str, Any]]
#: What ``build=`` takes: an :class:`~pandastack.AppBuild` or a dict ``{"command"?, "output_dir"?}``.
AppBuildLike = Union[AppBuild, Mapping[str, Any]]
#: What ``start=`` takes: an :class:`~pandastack.AppStart` or a dict ``{"command"?, "port"?}``.
AppStartLike = Union[AppStart, Mapping[str, Any]]


def app_git(git: AppGitLike, ref: Optional[str]) -> Dict[str, Any]:
    """The ``git`` object of an app request; ``ref`` (when given) overrides the one in ``git``."""
    if isinstance(git, str):
        if not git:
            raise InvalidArgumentError("git: the repository's URL (or path)", code="invalid_argument")
        out: Dict[str, Any] = {"url": git}
    elif isinstance(git, AppGit):
        out = git.to_json()
    elif isinstance(git, Mapping):
        out = _app_part("git", git, ("url", "ref"))
        if not isinstance(out.get("url"), str) or not out["url"]:
            raise InvalidArgumentError(
                f"git: a dict with a str 'url', got {dict(git)!r}", code="invalid_argument"
            )
    else:
        raise InvalidArgumentError(
            f"git: a URL, an AppGit or a {{'url', 'ref'}} dict, not {type(git).__name__}",
            code="invalid_argument",
        )
    if ref is not None:
        out["ref"] = str(ref)
    return out


def _app_part(field: str, v: Any, keys: Sequence[str]) -> Dict[str, Any]:
    """A dict given for ``git``, ``build`` or ``start``: only its known keys, ``None``s left out."""
    extra = set(v) - set(keys)
    if extra:
        raise InvalidArgumentError(
            f"{field}: unknown keys {sorted(extra)} ({', '.join(keys)})", code="invalid_argument"
        )
    return {k: v[k] for k in keys if v.get(k) is not None}


def _app_build(build: AppBuildLike) -> Dict[str, Any]:
    if isinstance(build, AppBuild):
        return build.to_json()
    if isinstance(build, Mapping):
        return _app_part("build", build, ("command", "output_dir"))
    raise InvalidArgumentError(
        f"build: an AppBuild or a {{'command', 'output_dir'}} dict, not {type(build).__name__}",
        code="invalid_argument",
    )


def _app_start(start: AppStartLike) -> Dict[str, Any]:
    if isinstance(start, AppStart):
        out = start.to_json()
    elif isinstance(start, Mapping):
        out = _app_part("start", start, ("command", "port"))
    else:
        raise InvalidArgumentError(
            f"start: an AppStart or a {{'command', 'port'}} dict, not {type(start).__name__}",
            code="invalid_argument",
        )
    if "port" in out:
        out["port"] = port(out["port"])
    return out


def app_domains(domains: Sequence[str]) -> List[str]:
    """The ``domains`` of an app request: a list of non-empty host names (the server checks
    that they are DNS names, how many there are and that no other app has them)."""
    if isinstance(domains, (str, bytes, Mapping)) or not hasattr(domains, "__iter__"):
        raise InvalidArgumentError(
            f"domains: a list of host names, got {type(domains).__name__}", code="invalid_argument"
        )
    out: List[str] = []
    for i, d in enumerate(domains):
        if not isinstance(d, str) or not d:
            raise InvalidArgumentError(
                f"domains[{i}]: a non-empty host name, got {d!r}", code="invalid_argument"
            )
        out.append(d)
    return out


def app_config(
    env: Optional[Mapping[str, str]],
    secrets: Optional[Mapping[str, str]],
    build: Optional[AppBuildLike],
    start: Optional[AppStartLike],
    memory_mb: Optional[int],
    min_instances: Optional[int],
    idle_seconds: Optional[int],
    health_path: Optional[str],
    domains: Optional[Sequence[str]] = None,
    root_dir: Optional[str] = None,
) -> Dict[str, Any]:
    """The configuration fields shared by ``POST /v1/apps`` and ``PATCH /v1/apps/{name}``; what
    is ``None`` is left out (an empty ``domains`` is sent: it removes them all)."""
    return drop_none(
        {
            "env": wire_env(env) if env is not None else None,
            "secrets": wire_env(secrets) if secrets is not None else None,
            "build": _app_build(build) if build is not None else None,
            "start": _app_start(start) if start is not None else None,
            "memory_mb": int(memory_mb) if memory_mb is not None else None,
            "min_instances": int(min_instances) if min_instances is not None else None,
            "idle_seconds": int(idle_seconds) if idle_seconds is not None else None,
            "health_path": health_path,
            "domains": app_domains(domains) if domains is not None else None,
            "root_dir": root_dir,
        }
    )


def app_body(
    name: str,
    git: AppGitLike,
    ref: Optional[str],
    deploy: Optional[bool],
    config: Dict[str, Any],
) -> Dict[str, Any]:
    """The body of ``POST /v1/apps``."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"expected an app name, got {name!r}", code="invalid_argument")
    body: Dict[str, Any] = {"name": name, "git": app_git(git, ref)}
    body.update(config)
    if deploy is not None:
        body["deploy"] = bool(deploy)
    return body


def app_update_body(
    git: Optional[AppGitLike], ref: Optional[str], config: Dict[str, Any]
) -> Dict[str, Any]:
    """The body of ``PATCH /v1/apps/{name}``."""
    body: Dict[str, Any] = {}
    if git is not None:
        body["git"] = app_git(git, ref)
    elif ref is not None:
        raise InvalidArgumentError(
            "ref: give git= with it (an update replaces the app's git whole)",
            code="invalid_argument",
        )
    body.update(config)
    return body


def deploy_body(ref: Optional[str]) -> _wire.CreateDeployRequest:
    """The body of ``POST /v1/apps/{name}/deploys`` (JSON)."""
    return {"ref": str(ref)} if ref is not None else {}


def pack_directory(path: Union[str, "os.PathLike[str]"]) -> bytes:
    """A gzip'd tar of a directory's content, as ``apps.deploy_directory`` uploads it: entries
    named relative to the directory, ``.git`` and ``node_modules`` left out at any depth,
    symbolic links kept as links (the server skips them). The same tree gives the same bytes
    (sorted entries, no owner names, no gzip time stamp), so the same pseudo commit."""
    import gzip
    import io
    import posixpath
    import tarfile

    root = os.fspath(path)
    if not os.path.isdir(root):
        raise InvalidArgumentError(f"path: {root!r} is not a directory", code="invalid_argument")

    def anonymous(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        return ti

    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if d not in UPLOAD_EXCLUDES)
                rel = os.path.relpath(dirpath, root)
                prefix = "" if rel == os.curdir else posixpath.join(*rel.split(os.sep))
                for entry in sorted(dirnames + [f for f in filenames if f not in UPLOAD_EXCLUDES]):
                    # Directories are added here, each before what os.walk then finds in it; a
                    # link to a directory is added as the link (os.walk does not follow it).
                    arcname = posixpath.join(prefix, entry) if prefix else entry
                    tar.add(
                        os.path.join(dirpath, entry), arcname=arcname, recursive=False, filter=anonymous
                    )
    return buf.getvalue()


def deploy_timeout(name: str, deploy: Deploy, timeout: float) -> DeployTimeoutError:
    return DeployTimeoutError(
        f"deploy {deploy.id} of app {name} still {deploy.state} after {timeout:g} s; the deploy "
        "goes on on the server (apps.get_deploy shows its state)",
        deploy=deploy,
    )


# ---------------------------------------------------------------- functions

#: A call may run up to the function's ``timeout_seconds`` (at most 900), and waits up to 60 s
#: for a free instance (and for a restore): ``functions.invoke`` waits at least this long,
#: seconds.
INVOKE_TIMEOUT = 1020.0
#: How long ``functions.wait_for_version`` waits by default, seconds (the first build on a
#: server builds the ``app`` template too).
DEFAULT_VERSION_TIMEOUT = DEFAULT_DEPLOY_TIMEOUT
FUNCTION_RUNTIMES = ("python", "node")


def function_files(files: Mapping[str, str]) -> Dict[str, str]:
    """The ``files`` of a function request: relative paths to UTF-8 text (``bytes`` are
    decoded)."""
    if not isinstance(files, Mapping):
        raise InvalidArgumentError(
            f"files: a dict of relative path -> text, got {type(files).__name__}", code="invalid_argument"
        )
    out: Dict[str, str] = {}
    for k, v in files.items():
        if not isinstance(k, str) or not k:
            raise InvalidArgumentError(f"files: a path must be a non-empty str, got {k!r}", code="invalid_argument")
        if isinstance(v, (bytes, bytearray)):
            try:
                v = bytes(v).decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidArgumentError(f"files.{k}: not UTF-8 text", code="invalid_argument") from None
        if not isinstance(v, str):
            raise InvalidArgumentError(f"files.{k}: text (str), got {type(v).__name__}", code="invalid_argument")
        out[k] = v
    return out


def function_source(
    files: Optional[Mapping[str, str]],
    git: Optional[AppGitLike],
    ref: Optional[str],
    dependencies: Optional[str],
) -> Dict[str, Any]:
    """The source fields of a function create or a new version; what is ``None`` is left out."""
    if files is not None and git is not None:
        raise InvalidArgumentError("give files= or git=, not both", code="invalid_argument")
    if ref is not None and git is None:
        raise InvalidArgumentError("ref: give git= with it", code="invalid_argument")
    body: Dict[str, Any] = {}
    if files is not None:
        body["files"] = function_files(files)
    if git is not None:
        body["git"] = app_git(git, ref)
    if dependencies is not None:
        body["dependencies"] = str(dependencies)
    return body


def function_body(
    name: str,
    runtime: str,
    handler: str,
    source: Dict[str, Any],
    env: Optional[Mapping[str, str]],
    secrets: Optional[Mapping[str, str]],
    limits: Dict[str, Any],
    public: Optional[bool],
) -> Dict[str, Any]:
    """The body of ``POST /v1/functions``."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"expected a function name, got {name!r}", code="invalid_argument")
    if runtime not in FUNCTION_RUNTIMES:
        raise InvalidArgumentError(
            f"runtime: 'python' or 'node', got {runtime!r}", code="invalid_argument"
        )
    if not isinstance(handler, str) or not handler:
        raise InvalidArgumentError(
            f"handler: 'module.function', e.g. 'main.handler', got {handler!r}", code="invalid_argument"
        )
    if not source.get("files") and "git" not in source:
        raise InvalidArgumentError(
            "files: give the handler's files (or git=)", code="invalid_argument"
        )
    body: Dict[str, Any] = {"name": name, "runtime": runtime, "handler": handler}
    body.update(source)
    if env is not None:
        body["env"] = wire_env(env)
    if secrets is not None:
        body["secrets"] = wire_env(secrets)
    body.update(limits)
    if public is not None:
        body["public"] = bool(public)
    return body


def function_limits(
    memory_mb: Optional[int] = None,
    timeout_seconds: Optional[int] = None,
    concurrency: Optional[int] = None,
    max_instances: Optional[int] = None,
    idle_seconds: Optional[int] = None,
) -> Dict[str, Any]:
    """The limits of a function create or update (the server checks their ranges)."""
    return drop_none(
        {
            "memory_mb": int(memory_mb) if memory_mb is not None else None,
            "timeout_seconds": int(timeout_seconds) if timeout_seconds is not None else None,
            "concurrency": int(concurrency) if concurrency is not None else None,
            "max_instances": int(max_instances) if max_instances is not None else None,
            "idle_seconds": int(idle_seconds) if idle_seconds is not None else None,
        }
    )


def version_body(
    handler: Optional[str],
    source: Dict[str, Any],
    env: Optional[Mapping[str, str]],
    secrets: Optional[Mapping[str, str]],
) -> Dict[str, Any]:
    """The body of ``POST /v1/functions/{name}/versions``."""
    body: Dict[str, Any] = {}
    if handler is not None:
        body["handler"] = str(handler)
    body.update(source)
    if env is not None:
        body["env"] = wire_env(env)
    if secrets is not None:
        body["secrets"] = wire_env(secrets)
    return body


def version_number(version: Any) -> int:
    """A version number (1, 2, 3…), checked before any request."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InvalidArgumentError(
            f"version: a version number (1 or more), got {version!r}", code="invalid_argument"
        )
    return version


def version_timeout(name: str, version: FunctionVersion, timeout: float) -> FunctionVersionTimeoutError:
    return FunctionVersionTimeoutError(
        f"version {version.version} of function {name} still {version.state} after {timeout:g} s; "
        "the build goes on on the server (functions.get_version shows its state)",
        version=version,
    )


# ---------------------------------------------------------------- schedules

#: What ``target=`` of ``schedules.create`` / ``schedules.update`` takes: a
#: :class:`~pandastack.SandboxExecTarget`, a :class:`~pandastack.FunctionTarget`, or a dict
#: with its ``type`` (``{"type": "sandbox_exec", "template", "command", ...}``).
ScheduleTargetLike = Union[SandboxExecTarget, FunctionTarget, Mapping[str, Any]]
CONCURRENCY_POLICIES = ("allow", "forbid", "replace")


def schedule_target(target: ScheduleTargetLike) -> Dict[str, Any]:
    """The ``target`` object of a schedule request."""
    if isinstance(target, (SandboxExecTarget, FunctionTarget)):
        return target.to_json()
    if isinstance(target, Mapping):
        if not isinstance(target.get("type"), str):
            raise InvalidArgumentError(
                f"target: a dict with its 'type' ('sandbox_exec' or 'function'), got {dict(target)!r}",
                code="invalid_argument",
            )
        return dict(target)
    raise InvalidArgumentError(
        f"target: a SandboxExecTarget, a FunctionTarget or a dict, not {type(target).__name__}",
        code="invalid_argument",
    )


def schedule_fields(
    timezone: Optional[str],
    target: Optional[ScheduleTargetLike],
    payload: Any,
    concurrency_policy: Optional[str],
    starting_deadline_seconds: Optional[int],
    retries: Optional[int],
) -> Dict[str, Any]:
    """The fields shared by ``POST /v1/schedules`` and ``PATCH /v1/schedules/{name}``; what is
    ``None`` is left out."""
    if concurrency_policy is not None and concurrency_policy not in CONCURRENCY_POLICIES:
        raise InvalidArgumentError(
            f"concurrency_policy: 'allow', 'forbid' or 'replace', got {concurrency_policy!r}",
            code="invalid_argument",
        )
    return drop_none(
        {
            "timezone": timezone,
            "target": schedule_target(target) if target is not None else None,
            "payload": payload,
            "concurrency_policy": concurrency_policy,
            "starting_deadline_seconds": int(starting_deadline_seconds)
            if starting_deadline_seconds is not None
            else None,
            "retries": int(retries) if retries is not None else None,
        }
    )


def schedule_body(name: str, cron: str, fields: Dict[str, Any], paused: Optional[bool]) -> Dict[str, Any]:
    """The body of ``POST /v1/schedules``."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"expected a schedule name, got {name!r}", code="invalid_argument")
    if not isinstance(cron, str) or not cron.strip():
        raise InvalidArgumentError(f"cron: a cron expression, got {cron!r}", code="invalid_argument")
    if "target" not in fields:
        raise InvalidArgumentError("target: what the schedule runs", code="invalid_argument")
    body: Dict[str, Any] = {"name": name, "cron": cron}
    body.update(fields)
    if paused is not None:
        body["paused"] = bool(paused)
    return body
