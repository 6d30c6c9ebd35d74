"""Data objects returned by the SDK. They mirror the server's wire types (snake_case) and keep
the raw JSON in ``raw`` so fields added by newer servers stay reachable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Union

from typing import Literal

__all__ = [
    "SandboxState",
    "SandboxInfo",
    "ExecResult",
    "StdoutEvent",
    "StderrEvent",
    "ExitEvent",
    "ExecEvent",
    "FileInfo",
    "WriteInfo",
    "Snapshot",
    "Template",
    "Metrics",
    "APIKey",
    "CreatedAPIKey",
    "Page",
    "Result",
    "ExecutionError",
    "Execution",
    "CodeContext",
    "VolumeMount",
    "VolumeAttachment",
    "Volume",
    "VolumeSnapshot",
    "VolumeBackup",
    "BackupState",
    "DatabaseState",
    "Database",
    "QueryField",
    "QueryResult",
    "DatabaseExtension",
    "DatabaseExtensions",
    "AppGit",
    "AppBuild",
    "AppStart",
    "App",
    "DeployState",
    "Deploy",
    "FunctionRuntime",
    "Function",
    "FunctionVersion",
    "InvocationStatus",
    "InvocationError",
    "Invocation",
    "SandboxExecTarget",
    "FunctionTarget",
    "Schedule",
    "ScheduleRun",
]

SandboxState = Literal["starting", "running", "paused", "hibernated", "stopped", "failed"]
BackupState = Literal["uploading", "done", "failed"]
DatabaseState = Literal["creating", "ready", "hibernated", "stopped"]
DeployState = Literal[
    "queued", "cloning", "building", "baking", "checking", "live", "standby", "failed", "superseded"
]
#: The states of a deploy still under way (any other is where it ended).
DEPLOY_ACTIVE_STATES = ("queued", "cloning", "building", "baking", "checking")
FunctionRuntime = Literal["python", "node"]
InvocationStatus = Literal["queued", "running", "ok", "error", "timeout"]
ConcurrencyPolicy = Literal["allow", "forbid", "replace"]
RunState = Literal["queued", "running", "succeeded", "failed", "skipped", "missed", "cancelled"]
#: The states of a schedule run not over yet.
RUN_ACTIVE_STATES = ("queued", "running")


def _s(d: Mapping[str, Any], k: str, default: Any = None) -> Any:
    v = d.get(k, default)
    return default if v is None else v


@dataclass
class VolumeMount:
    """A volume mounted in a sandbox: pass a list of these (or of dicts with the same keys) as
    ``volumes=`` to :meth:`~pandastack.PandaStack.sandboxes.create`; :attr:`SandboxInfo.volumes`
    lists them.

    ``path`` is the absolute mount point inside the sandbox (created if missing). ``read_only``
    mounts a copy of the volume as of the create (any number of sandboxes may); otherwise the
    volume itself is mounted read-write, by one sandbox at a time."""

    name: str
    path: str
    read_only: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "VolumeMount":
        return cls(name=_s(d, "name", ""), path=_s(d, "path", ""), read_only=bool(_s(d, "read_only", False)))

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "path": self.path, "read_only": bool(self.read_only)}


@dataclass
class SandboxInfo:
    """A sandbox as the server describes it (``GET /v1/sandboxes/{id}``)."""

    id: str
    template: str
    state: str
    cpu: int = 0
    memory_mb: int = 0
    #: Disk limits its VM runs with: MiB/s and I/O operations per second, root disk and volumes,
    #: reads and writes together (0: unlimited).
    disk_mbps: int = 0
    disk_iops: int = 0
    metadata: Dict[str, str] = field(default_factory=dict)
    created_at: str = ""
    expires_at: Optional[str] = None
    ttl_seconds: Optional[int] = None
    idle_timeout_seconds: Optional[int] = None
    on_timeout: str = "kill"
    boot_ms: int = 0
    boot_mode: str = ""
    snapshot_id: Optional[str] = None
    host: str = ""
    volumes: List[VolumeMount] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SandboxInfo":
        return cls(
            id=d["id"],
            template=_s(d, "template", ""),
            state=_s(d, "state", ""),
            cpu=_s(d, "cpu", 0),
            memory_mb=_s(d, "memory_mb", 0),
            disk_mbps=_s(d, "disk_mbps", 0),
            disk_iops=_s(d, "disk_iops", 0),
            metadata=dict(_s(d, "metadata", {})),
            created_at=_s(d, "created_at", ""),
            expires_at=d.get("expires_at"),
            ttl_seconds=d.get("ttl_seconds"),
            idle_timeout_seconds=d.get("idle_timeout_seconds"),
            on_timeout=_s(d, "on_timeout", "kill"),
            boot_ms=_s(d, "boot_ms", 0),
            boot_mode=_s(d, "boot_mode", ""),
            snapshot_id=d.get("snapshot_id"),
            host=_s(d, "host", ""),
            volumes=[VolumeMount.from_json(v) for v in _s(d, "volumes", []) if isinstance(v, Mapping)],
            raw=dict(d),
        )


@dataclass
class ExecResult:
    """The outcome of a command. A non-zero ``exit_code`` is data, not an exception.

    ``timed_out`` is true when the server killed the command at its ``timeout_seconds`` (the
    exit code is then the signal's, usually -1 or 137); ``truncated`` when stdout or stderr was
    cut at the server's output limit (4 MiB each).
    """

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool = False
    truncated: bool = False
    duration_ms: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """``exit_code == 0`` and not ``timed_out``."""
        return self.exit_code == 0 and not self.timed_out

    @property
    def output(self) -> str:
        """stdout followed by stderr."""
        return self.stdout + self.stderr

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ExecResult":
        return cls(
            stdout=_s(d, "stdout", ""),
            stderr=_s(d, "stderr", ""),
            exit_code=int(_s(d, "exit_code", -1)),
            timed_out=bool(_s(d, "timed_out", False)),
            truncated=bool(_s(d, "truncated", False)),
            duration_ms=int(_s(d, "duration_ms", 0)),
            raw=dict(d),
        )


@dataclass
class StdoutEvent:
    """A chunk of the command's standard output (not necessarily a whole line)."""

    data: str
    type: Literal["stdout"] = "stdout"


@dataclass
class StderrEvent:
    """A chunk of the command's standard error (not necessarily a whole line)."""

    data: str
    type: Literal["stderr"] = "stderr"


@dataclass
class ExitEvent:
    """The command finished; always the last event of a stream."""

    exit_code: int
    timed_out: bool = False
    truncated: bool = False
    duration_ms: int = 0
    type: Literal["exit"] = "exit"


ExecEvent = Union[StdoutEvent, StderrEvent, ExitEvent]


@dataclass
class FileInfo:
    """A guest file's metadata. ``type`` is ``file``, ``dir``, ``symlink`` or ``other``."""

    name: str
    path: str
    type: str
    size: int = 0
    mode: int = 0
    mtime_ms: int = 0
    symlink_target: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FileInfo":
        return cls(
            name=_s(d, "name", ""),
            path=_s(d, "path", ""),
            type=_s(d, "type", "other"),
            size=_s(d, "size", 0),
            mode=_s(d, "mode", 0),
            mtime_ms=_s(d, "mtime_ms", 0),
            symlink_target=d.get("symlink_target"),
            raw=dict(d),
        )


@dataclass
class WriteInfo:
    """What a write stored."""

    path: str
    bytes_written: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "WriteInfo":
        return cls(path=_s(d, "path", ""), bytes_written=int(_s(d, "bytes_written", 0)))


@dataclass
class Snapshot:
    """A sandbox snapshot; create new sandboxes from it with
    ``client.sandboxes.create(snapshot_id=snap.id)``."""

    id: str
    sandbox_id: str
    template: str = ""
    created_at: str = ""
    size_bytes: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Snapshot":
        return cls(
            id=d["id"],
            sandbox_id=_s(d, "sandbox_id", ""),
            template=_s(d, "template", ""),
            created_at=_s(d, "created_at", ""),
            size_bytes=int(_s(d, "size_bytes", 0)),
            raw=dict(d),
        )


@dataclass
class Template:
    """A template sandboxes can be created from: a catalog template of the server
    (``source == "catalog"``; ``state`` is ``ready`` once baked, ``available`` before first use)
    or one the workspace built with :meth:`~pandastack.PandaStack.templates.build`
    (``source`` ``"spec"`` or ``"oci"``; ``state`` is the newest build's: ``queued``,
    ``building``, ``baking``, ``ready`` or ``failed``).

    For built templates, ``version`` is the newest build's number, ``ready_version`` the one new
    sandboxes get (the newest ready build, or ``None``) and ``error`` why the newest build
    failed. Fields the server did not send are ``None``; everything it sent is in ``raw``.
    """

    name: str
    description: str = ""
    cpu: int = 0
    memory_mb: int = 0
    disk_mb: int = 0
    state: str = ""
    bake_ms: Optional[int] = None
    source: str = "catalog"
    version: Optional[int] = None
    ready_version: Optional[int] = None
    error: Optional[str] = None
    build_ms: Optional[int] = None
    image_bytes: Optional[int] = None
    created_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def building(self) -> bool:
        """``True`` while the newest build is under way (``queued``, ``building`` or
        ``baking``)."""
        return self.state in ("queued", "building", "baking")

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Template":
        return cls(
            name=d["name"],
            description=_s(d, "description", ""),
            cpu=_s(d, "cpu", 0),
            memory_mb=_s(d, "memory_mb", 0),
            disk_mb=_s(d, "disk_mb", 0),
            state=_s(d, "state", ""),
            bake_ms=d.get("bake_ms"),
            source=_s(d, "source", "catalog"),
            version=d.get("version"),
            ready_version=d.get("ready_version"),
            error=d.get("error"),
            build_ms=d.get("build_ms"),
            image_bytes=d.get("image_bytes"),
            created_at=d.get("created_at"),
            raw=dict(d),
        )


@dataclass
class Metrics:
    """Resource usage of a sandbox. Fields the server did not send are ``None``; everything it
    sent is in ``raw``."""

    state: str
    host_rss_bytes: Optional[int] = None
    host_pss_bytes: Optional[int] = None
    cpu_time_ms: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Metrics":
        return cls(
            state=_s(d, "state", ""),
            host_rss_bytes=d.get("host_rss_bytes"),
            host_pss_bytes=d.get("host_pss_bytes"),
            cpu_time_ms=d.get("cpu_time_ms"),
            raw=dict(d),
        )


@dataclass
class PortUrl:
    """A port's preview URL (``GET /v1/sandboxes/{id}/ports/{port}/url``). While the port is
    private, send ``token`` as the ``X-PandaStack-Access-Token`` header (or open
    ``url + "?pandastack_access=" + token`` once in a browser)."""

    url: str
    port: int
    public: bool
    token: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "PortUrl":
        return cls(
            url=_s(d, "url", ""),
            port=int(_s(d, "port", 0)),
            public=bool(_s(d, "public", False)),
            token=_s(d, "token", ""),
        )


@dataclass
class APIKey:
    id: str
    name: str
    prefix: str
    created_at: str = ""
    revoked: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "APIKey":
        return cls(
            id=d["id"],
            name=_s(d, "name", ""),
            prefix=_s(d, "prefix", ""),
            created_at=_s(d, "created_at", ""),
            revoked=bool(_s(d, "revoked", False)),
        )


@dataclass
class CreatedAPIKey(APIKey):
    """A key just created; ``secret`` is shown this once."""

    secret: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CreatedAPIKey":
        k = APIKey.from_json(d)
        return cls(
            id=k.id, name=k.name, prefix=k.prefix, created_at=k.created_at, revoked=k.revoked,
            secret=_s(d, "secret", ""),
        )


@dataclass
class Result:
    """One rich result of :meth:`~pandastack.Sandbox.run_code`: the value of the code's final
    expression, a ``display(...)`` call or a matplotlib figure.

    ``text`` (the ``repr``) is always there; the other representations when the object provides
    them (``_repr_html_``, ``_repr_png_``, ...). ``png`` is base64 text: :meth:`png_bytes`
    decodes it. ``json`` is the decoded JSON value.
    """

    text: str = ""
    html: Optional[str] = None
    png: Optional[str] = None
    svg: Optional[str] = None
    markdown: Optional[str] = None
    json: Any = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def png_bytes(self) -> Optional[bytes]:
        """The PNG image as bytes, or ``None`` when the result has none."""
        import base64

        return base64.b64decode(self.png) if self.png is not None else None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Result":
        return cls(
            text=_s(d, "text", ""),
            html=d.get("html"),
            png=d.get("png"),
            svg=d.get("svg"),
            markdown=d.get("markdown"),
            json=d.get("json"),
            raw=dict(d),
        )


@dataclass
class ExecutionError:
    """The exception a :meth:`~pandastack.Sandbox.run_code` run ended with. This is data, not a
    raised exception: ``name`` is the exception class (``ZeroDivisionError``; ``TimeoutError``
    when the run hit its ``timeout_seconds``; ``KernelError`` when the kernel itself failed),
    ``value`` its message and ``traceback`` the formatted traceback of the user's frames."""

    name: str
    value: str = ""
    traceback: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ExecutionError":
        return cls(
            name=_s(d, "name", ""),
            value=_s(d, "value", ""),
            traceback=_s(d, "traceback", ""),
        )


@dataclass
class Execution:
    """What a :meth:`~pandastack.Sandbox.run_code` run produced. An exception in the code is
    data (``error``), not an exception of the SDK.

    ``results`` holds the rich results in order (the final expression's value last);
    ``truncated`` is true when the output was cut at the server's limit.
    """

    stdout: str = ""
    stderr: str = ""
    results: List[Result] = field(default_factory=list)
    error: Optional[ExecutionError] = None
    truncated: bool = False
    duration_ms: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def text(self) -> Optional[str]:
        """The ``text`` of the last result, or ``None`` when there is none."""
        return self.results[-1].text if self.results else None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Execution":
        err = d.get("error")
        return cls(
            stdout=_s(d, "stdout", ""),
            stderr=_s(d, "stderr", ""),
            results=[Result.from_json(r) for r in _s(d, "results", []) if isinstance(r, Mapping)],
            error=ExecutionError.from_json(err) if isinstance(err, Mapping) else None,
            truncated=bool(_s(d, "truncated", False)),
            duration_ms=int(_s(d, "duration_ms", 0)),
            raw=dict(d),
        )


@dataclass
class CodeContext:
    """A code context: a kernel of its own in the sandbox, with its own variables. Pass it (or
    its ``id``) as ``context=`` to :meth:`~pandastack.Sandbox.run_code`."""

    id: str
    language: str = "python"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CodeContext":
        return cls(id=d["id"], language=_s(d, "language", "python"))


@dataclass
class VolumeAttachment:
    """A sandbox that has a volume mounted (``read_only``: a copy of it as of the sandbox's
    create)."""

    sandbox_id: str
    path: str = ""
    read_only: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "VolumeAttachment":
        return cls(
            sandbox_id=_s(d, "sandbox_id", ""),
            path=_s(d, "path", ""),
            read_only=bool(_s(d, "read_only", False)),
        )


@dataclass
class Volume:
    """A durable volume: an ext4 disk that outlives the sandboxes that mount it.

    ``attached_to`` is the sandbox that has it mounted read-write (at most one), ``attachments``
    every sandbox that has it (or a read-only copy of it) mounted; ``source`` the volume
    snapshot or backup it was restored from."""

    id: str
    name: str
    size_gb: int = 0
    attached_to: Optional[str] = None
    attachments: List[VolumeAttachment] = field(default_factory=list)
    source: Optional[str] = None
    host: str = ""
    created_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Volume":
        return cls(
            id=_s(d, "id", ""),
            name=_s(d, "name", ""),
            size_gb=int(_s(d, "size_gb", 0)),
            attached_to=d.get("attached_to"),
            attachments=[
                VolumeAttachment.from_json(a) for a in _s(d, "attachments", []) if isinstance(a, Mapping)
            ],
            source=d.get("source"),
            host=_s(d, "host", ""),
            created_at=_s(d, "created_at", ""),
            raw=dict(d),
        )


@dataclass
class VolumeSnapshot:
    """A volume's content as of one instant, on the volume's host; restore it with
    ``client.volumes.create(name, from_snapshot=snap.id)``. ``frozen``: a sandbox's file
    system on the volume was frozen for the copy."""

    id: str
    volume: str = ""
    size_gb: int = 0
    frozen: bool = False
    created_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "VolumeSnapshot":
        return cls(
            id=_s(d, "id", ""),
            volume=_s(d, "volume", ""),
            size_gb=int(_s(d, "size_gb", 0)),
            frozen=bool(_s(d, "frozen", False)),
            created_at=_s(d, "created_at", ""),
            raw=dict(d),
        )


@dataclass
class VolumeBackup:
    """A volume backup in the object store; restore it (on any host) with
    ``client.volumes.create(name, from_backup=backup.id)`` once ``state`` is ``"done"``.

    ``state`` is ``"uploading"``, ``"done"`` or ``"failed"`` (``error`` says why);
    ``bytes_uploaded`` counts only the chunks earlier backups had not stored."""

    id: str
    volume: str = ""
    size_gb: int = 0
    state: str = "uploading"
    bytes_uploaded: Optional[int] = None
    chunks: Optional[int] = None
    error: Optional[str] = None
    created_at: str = ""
    finished_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def finished(self) -> bool:
        """``True`` once the upload has ended (``done`` or ``failed``)."""
        return self.state != "uploading"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "VolumeBackup":
        return cls(
            id=_s(d, "id", ""),
            volume=_s(d, "volume", ""),
            size_gb=int(_s(d, "size_gb", 0)),
            state=_s(d, "state", "uploading"),
            bytes_uploaded=d.get("bytes_uploaded"),
            chunks=d.get("chunks"),
            error=d.get("error"),
            created_at=_s(d, "created_at", ""),
            finished_at=d.get("finished_at"),
            raw=dict(d),
        )


@dataclass
class Database:
    """A managed PostgreSQL database: its own microVM, its data on a durable volume.

    ``connection_uri`` (``postgres://user:password@<id>.<domain>:<port>/<name>?sslmode=require``)
    is what any PostgreSQL driver connects with, through the server's TLS front; ``pooled_uri``
    the same through PgBouncer (transaction pooling). On the server's own machine the default
    domain ``db.localhost`` does not resolve: add libpq's ``hostaddr=127.0.0.1`` (the TLS server
    name still comes from the host name), e.g. ``psycopg.connect(db.connection_uri,
    hostaddr="127.0.0.1")``.

    ``state`` is ``"creating"``, ``"ready"``, ``"hibernated"`` (idle for ``idle_seconds``: the
    next connection or query wakes it) or ``"stopped"`` (its VM is gone: the next connection or
    query starts a new one on the same data). ``parent`` is the database it was branched from;
    ``volume`` the durable volume holding its data; ``sandbox_id`` the VM serving it now."""

    id: str
    name: str = ""
    version: int = 0
    state: str = "creating"
    user: str = ""
    connection_uri: str = ""
    pooled_uri: str = ""
    http_url: str = ""
    size_gb: int = 0
    memory_mb: int = 0
    idle_seconds: int = 0
    parent: Optional[str] = None
    sandbox_id: Optional[str] = None
    volume: str = ""
    host: str = ""
    created_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __repr__(self) -> str:
        # The connection strings carry the password: keep them out of logs of the object.
        return (
            f"Database(id={self.id!r}, name={self.name!r}, version={self.version!r}, "
            f"state={self.state!r}, parent={self.parent!r})"
        )

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Database":
        return cls(
            id=_s(d, "id", ""),
            name=_s(d, "name", ""),
            version=int(_s(d, "version", 0)),
            state=_s(d, "state", "creating"),
            user=_s(d, "user", ""),
            connection_uri=_s(d, "connection_uri", ""),
            pooled_uri=_s(d, "pooled_uri", ""),
            http_url=_s(d, "http_url", ""),
            size_gb=int(_s(d, "size_gb", 0)),
            memory_mb=int(_s(d, "memory_mb", 0)),
            idle_seconds=int(_s(d, "idle_seconds", 0)),
            parent=d.get("parent"),
            sandbox_id=d.get("sandbox_id"),
            volume=_s(d, "volume", ""),
            host=_s(d, "host", ""),
            created_at=_s(d, "created_at", ""),
            raw=dict(d),
        )


@dataclass
class QueryField:
    """A result column: its ``name`` and its type's OID (``pg_type.oid``: 23 ``int4``, 25
    ``text``, 16 ``bool``, …)."""

    name: str
    data_type_id: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "QueryField":
        return cls(name=_s(d, "name", ""), data_type_id=int(_s(d, "data_type_id", 0)))


@dataclass
class QueryResult:
    """What :meth:`~pandastack.PandaStack.databases.query` returns.

    ``rows`` are lists in field order, values converted to JSON by the server: booleans, small
    integers and floats as numbers, ``json``/``jsonb`` as JSON, arrays as lists, everything else
    (``int8`` and ``numeric`` included, to keep their precision) as PostgreSQL's text; NULL is
    ``None``. ``command`` is the command tag's verb (``SELECT``, ``INSERT``, ...), ``row_count``
    the rows it returned or touched (``None`` for commands without a count)."""

    command: str = ""
    row_count: Optional[int] = None
    fields: List[QueryField] = field(default_factory=list)
    rows: List[List[Any]] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def columns(self) -> List[str]:
        """The field names, in order."""
        return [f.name for f in self.fields]

    def dicts(self) -> List[Dict[str, Any]]:
        """The rows as ``{column: value}`` dicts (a later column wins over an earlier one of the
        same name)."""
        names = self.columns
        return [dict(zip(names, r)) for r in self.rows]

    def scalar(self) -> Any:
        """The first column of the first row (``None`` when there is no row)."""
        return self.rows[0][0] if self.rows and self.rows[0] else None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "QueryResult":
        rc = d.get("row_count")
        return cls(
            command=_s(d, "command", ""),
            row_count=int(rc) if rc is not None else None,
            fields=[QueryField.from_json(f) for f in _s(d, "fields", []) if isinstance(f, Mapping)],
            rows=[list(r) for r in _s(d, "rows", []) if isinstance(r, list)],
            raw=dict(d),
        )


@dataclass
class DatabaseExtension:
    """An extension ``CREATE EXTENSION`` can load (``vector``, ``pg_trgm``, ...)."""

    name: str
    default_version: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "DatabaseExtension":
        return cls(name=_s(d, "name", ""), default_version=_s(d, "default_version", ""))


@dataclass
class DatabaseExtensions:
    """The extensions databases can load: ``versions`` maps a PostgreSQL major version (as a
    string, ``"17"``) to its extensions; ``preloaded`` lists the libraries loaded at start
    (``shared_preload_libraries``)."""

    versions: Dict[str, List[DatabaseExtension]] = field(default_factory=dict)
    preloaded: List[str] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def names(self, version: Optional[Union[int, str]] = None) -> List[str]:
        """The extension names of one PostgreSQL major version (default: the newest)."""
        if not self.versions:
            return []
        key = str(version) if version is not None else max(self.versions, key=lambda v: (len(v), v))
        return [e.name for e in self.versions.get(key, [])]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "DatabaseExtensions":
        versions = _s(d, "versions", {})
        return cls(
            versions={
                str(k): [DatabaseExtension.from_json(e) for e in v if isinstance(e, Mapping)]
                for k, v in (versions.items() if isinstance(versions, Mapping) else [])
                if isinstance(v, list)
            },
            preloaded=[str(x) for x in _s(d, "preloaded", []) if isinstance(x, str)],
            raw=dict(d),
        )


@dataclass
class AppGit:
    """Where an app's code comes from: ``url`` is a repository the server fetches over the
    network (``https://…``, ``http://…``, ``git://…``, ``ssh://…`` or ``user@host:path``; never a
    path or ``file://`` on the server, nor a loopback or private address unless its operator
    allows it); ``ref`` the
    branch, tag or commit to deploy (``None``: the server's default, ``main``). Pushes to that
    branch deploy (through the app's webhook)."""

    url: str
    ref: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "AppGit":
        return cls(url=_s(d, "url", ""), ref=d.get("ref"))

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"url": self.url}
        if self.ref is not None:
            out["ref"] = self.ref
        return out


@dataclass
class AppBuild:
    """How to build an app, overriding what the server's detection chose: ``command`` runs in
    the app's directory after the install; ``output_dir`` is the directory of a static build's
    output, served as files. ``None``: detected."""

    command: Optional[str] = None
    output_dir: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "AppBuild":
        return cls(command=d.get("command"), output_dir=d.get("output_dir"))

    def to_json(self) -> Dict[str, Any]:
        return {k: v for k, v in (("command", self.command), ("output_dir", self.output_dir)) if v is not None}


@dataclass
class AppStart:
    """How to start an app, overriding what the server's detection chose: ``command`` serves
    HTTP on ``$PORT``; ``port`` is the port it listens on (also in ``$PORT``). ``None``:
    detected."""

    command: Optional[str] = None
    port: Optional[int] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "AppStart":
        return cls(command=d.get("command"), port=d.get("port"))

    def to_json(self) -> Dict[str, Any]:
        return {k: v for k, v in (("command", self.command), ("port", self.port)) if v is not None}


@dataclass
class AppDomain:
    """A custom domain of an app (:attr:`App.domains`): ``name`` is the host name (its DNS
    pointed at the server's proxy), ``tls`` where its certificate comes from: ``"none"`` (the
    proxy serves no TLS, or nothing covers the name), ``"files"`` (the operator's certificate
    directory), ``"pending"`` (an ACME order is under way), ``"issued"`` (by ACME) or
    ``"failed"`` (the last ACME order failed: ``tls_error`` says why). ``tls_expires_at`` is
    the end of the certificate's validity (RFC 3339), when known."""

    name: str
    tls: str = "none"
    tls_expires_at: Optional[str] = None
    tls_error: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "AppDomain":
        return cls(
            name=_s(d, "name", ""),
            tls=_s(d, "tls", "none"),
            tls_expires_at=d.get("tls_expires_at"),
            tls_error=d.get("tls_error"),
        )


@dataclass
class App:
    """An app deployed from git (or from uploaded directories): built in a VM, health-checked
    and served at ``url`` (``<name>.<domain>``) by the server's proxy.

    ``env`` is the environment of its build and of the running app; ``secret_names`` the names
    of its secrets (their values are never shown). ``min_instances`` ``0`` hibernates it after
    ``idle_seconds`` without requests (the next request wakes it), ``1`` keeps it running.
    ``live_deploy`` is the deploy serving traffic (``None`` until one passes its health check on
    ``health_path``) and ``instance_state`` the state of that deploy's VM (``running``,
    ``hibernated``, …). ``webhook_secret`` signs webhook deliveries of git hosts.
    ``deploy_key`` is the public half of the app's own SSH key (one OpenSSH
    ``authorized_keys`` line, ``ssh-ed25519 … pandastack-app-<name>``): add it as a read-only
    deploy key on the repository to deploy from an ``ssh://`` or ``git@host:path`` URL.
    ``domains`` are its custom domains (:class:`AppDomain`), each with where its TLS
    certificate comes from."""

    id: str
    name: str = ""
    url: str = ""
    git: AppGit = field(default_factory=lambda: AppGit(""))
    env: Dict[str, str] = field(default_factory=dict)
    secret_names: List[str] = field(default_factory=list)
    build: AppBuild = field(default_factory=AppBuild)
    start: AppStart = field(default_factory=AppStart)
    memory_mb: int = 0
    min_instances: int = 0
    idle_seconds: int = 0
    health_path: str = "/"
    webhook_secret: str = ""
    deploy_key: str = ""
    domains: List[AppDomain] = field(default_factory=list)
    live_deploy: Optional[str] = None
    instance_state: Optional[str] = None
    created_at: str = ""
    updated_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __repr__(self) -> str:
        # The webhook secret signs deliveries: keep it out of logs of the object.
        return (
            f"App(id={self.id!r}, name={self.name!r}, url={self.url!r}, "
            f"live_deploy={self.live_deploy!r}, instance_state={self.instance_state!r})"
        )

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "App":
        git, build, start = d.get("git"), d.get("build"), d.get("start")
        return cls(
            id=_s(d, "id", ""),
            name=_s(d, "name", ""),
            url=_s(d, "url", ""),
            git=AppGit.from_json(git) if isinstance(git, Mapping) else AppGit(""),
            env=dict(_s(d, "env", {})),
            secret_names=[str(x) for x in _s(d, "secret_names", [])],
            build=AppBuild.from_json(build) if isinstance(build, Mapping) else AppBuild(),
            start=AppStart.from_json(start) if isinstance(start, Mapping) else AppStart(),
            memory_mb=int(_s(d, "memory_mb", 0)),
            min_instances=int(_s(d, "min_instances", 0)),
            idle_seconds=int(_s(d, "idle_seconds", 0)),
            health_path=_s(d, "health_path", "/"),
            webhook_secret=_s(d, "webhook_secret", ""),
            deploy_key=_s(d, "deploy_key", ""),
            domains=[AppDomain.from_json(x) for x in _s(d, "domains", []) if isinstance(x, Mapping)],
            live_deploy=d.get("live_deploy"),
            instance_state=d.get("instance_state"),
            created_at=_s(d, "created_at", ""),
            updated_at=_s(d, "updated_at", ""),
            raw=dict(d),
        )


@dataclass
class Deploy:
    """One deploy of an app: ``number`` 1, 2, 3… per app, of ``ref`` (``"upload"`` for an
    uploaded directory) at ``commit``.

    ``state`` goes ``queued → cloning → building → baking → checking → live``, or ``failed``
    at any step (``error`` says why; the deploy's log says more). A live deploy a newer one
    replaced is ``standby`` (its VM hibernated, ready for a rollback); ``superseded`` is a
    queued deploy a newer one replaced before it ran. ``plan`` is what detection decided
    (framework, package manager, commands, port), ``phases_ms`` the milliseconds spent in each
    phase (``clone``, ``install``, ``build``, ``bake``, ``check``, ``switch``), ``sandbox_id``
    the VM that built and serves this version."""

    id: str
    app: str = ""
    number: int = 0
    ref: str = ""
    state: str = "queued"
    commit: Optional[str] = None
    error: Optional[str] = None
    plan: Optional[Dict[str, Any]] = None
    phases_ms: Dict[str, int] = field(default_factory=dict)
    sandbox_id: Optional[str] = None
    created_at: str = ""
    updated_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def active(self) -> bool:
        """``True`` while the deploy is under way (``queued``, ``cloning``, ``building``,
        ``baking`` or ``checking``)."""
        return self.state in DEPLOY_ACTIVE_STATES

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Deploy":
        plan = d.get("plan")
        return cls(
            id=_s(d, "id", ""),
            app=_s(d, "app", ""),
            number=int(_s(d, "number", 0)),
            ref=_s(d, "ref", ""),
            state=_s(d, "state", "queued"),
            commit=d.get("commit"),
            error=d.get("error"),
            plan=dict(plan) if isinstance(plan, Mapping) else None,
            phases_ms=dict(_s(d, "phases_ms", {})),
            sandbox_id=d.get("sandbox_id"),
            created_at=_s(d, "created_at", ""),
            updated_at=_s(d, "updated_at", ""),
            raw=dict(d),
        )


def _opt_int(v: Any) -> Optional[int]:
    return None if v is None else int(v)


@dataclass
class Function:
    """A function: a handler in Python or Node.js (``runtime``), built with its dependencies
    in a VM, baked with the handler imported (a VM snapshot), and called with
    :meth:`~pandastack.PandaStack.functions.invoke`.

    ``handler`` is ``module.function`` (``main.handler``: ``handler`` in ``main.py``;
    Node.js: the export ``handler`` of ``index.js``/``index.mjs`` for ``index.handler``).
    ``url`` is its public endpoint (``fn-<name>.<domain>``), answering only when ``public``.
    ``env`` is the environment of its builds and calls; ``secret_names`` the names of its
    secrets (their values are never shown). Each call may run ``timeout_seconds``; an instance
    serves ``concurrency`` calls at once, at most ``max_instances`` instances run at once, and
    one without calls for ``idle_seconds`` is removed. ``live_version`` is the version calls go
    to (``None`` until one is built); ``warm_instances`` how many instances are warm now."""

    id: str
    name: str = ""
    runtime: str = "python"
    handler: str = ""
    url: str = ""
    public: bool = False
    env: Dict[str, str] = field(default_factory=dict)
    secret_names: List[str] = field(default_factory=list)
    memory_mb: int = 0
    timeout_seconds: int = 0
    concurrency: int = 0
    max_instances: int = 0
    idle_seconds: int = 0
    live_version: Optional[int] = None
    warm_instances: int = 0
    created_at: str = ""
    updated_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Function":
        return cls(
            id=_s(d, "id", ""),
            name=_s(d, "name", ""),
            runtime=_s(d, "runtime", "python"),
            handler=_s(d, "handler", ""),
            url=_s(d, "url", ""),
            public=bool(d.get("public", False)),
            env=dict(_s(d, "env", {})),
            secret_names=[str(x) for x in _s(d, "secret_names", [])],
            memory_mb=int(_s(d, "memory_mb", 0)),
            timeout_seconds=int(_s(d, "timeout_seconds", 0)),
            concurrency=int(_s(d, "concurrency", 0)),
            max_instances=int(_s(d, "max_instances", 0)),
            idle_seconds=int(_s(d, "idle_seconds", 0)),
            live_version=_opt_int(d.get("live_version")),
            warm_instances=int(_s(d, "warm_instances", 0)),
            created_at=_s(d, "created_at", ""),
            updated_at=_s(d, "updated_at", ""),
            raw=dict(d),
        )


@dataclass
class FunctionVersion:
    """One version of a function: one build, numbered 1, 2, 3… per function.

    ``state`` goes ``queued → cloning → building → baking → checking → live`` (calls go to
    it), or ``failed`` (``error`` says why: the handler's import error, a dependency that did
    not install…; the live version, if any, keeps serving). A live version a newer one
    replaced is ``standby`` (ready for a rollback). ``phases_ms`` is the milliseconds spent in
    each phase (``install``, ``bake``, ``snapshot``…)."""

    id: str
    function: str = ""
    version: int = 0
    state: str = "queued"
    error: Optional[str] = None
    handler: Optional[str] = None
    phases_ms: Dict[str, int] = field(default_factory=dict)
    created_at: str = ""
    updated_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def active(self) -> bool:
        """``True`` while the version is being built (``queued``, ``cloning``, ``building``,
        ``baking`` or ``checking``)."""
        return self.state in DEPLOY_ACTIVE_STATES

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FunctionVersion":
        return cls(
            id=_s(d, "id", ""),
            function=_s(d, "function", ""),
            version=int(_s(d, "version", 0)),
            state=_s(d, "state", "queued"),
            error=d.get("error"),
            handler=d.get("handler"),
            phases_ms=dict(_s(d, "phases_ms", {})),
            created_at=_s(d, "created_at", ""),
            updated_at=_s(d, "updated_at", ""),
            raw=dict(d),
        )


@dataclass
class InvocationError:
    """What a handler raised, as data: ``type`` is the exception's class (``ValueError``…, or
    ``Timeout`` for a call past the function's time limit), ``traceback`` the traceback (or
    stack) as the runtime prints it."""

    type: str
    message: str = ""
    traceback: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "InvocationError":
        return cls(
            type=_s(d, "type", ""), message=_s(d, "message", ""), traceback=_s(d, "traceback", "")
        )


@dataclass
class Invocation:
    """The outcome of a call of a function: ``status`` is ``ok`` (``result`` is the handler's
    return value, any JSON), ``error`` (the handler raised: ``error``) or ``timeout`` (it ran
    past the function's ``timeout_seconds``; its instance was discarded). A handler's error is
    data, not an exception of the SDK.

    ``stdout`` and ``stderr`` are what the call printed (each at most 64 KiB, the end kept),
    ``version`` the version that ran it, ``duration_ms`` the time in the handler, ``cold``
    whether the call needed a new instance (restored from the baked snapshot). ``id``,
    ``attempts``, ``created_at`` and ``finished_at`` are set for queued calls
    (``functions.submit``), whose ``status`` is ``queued`` or ``running`` until they end."""

    function: str
    status: str = "ok"
    result: Optional[Any] = None
    error: Optional[InvocationError] = None
    stdout: str = ""
    stderr: str = ""
    version: Optional[int] = None
    duration_ms: Optional[float] = None
    cold: bool = False
    attempts: int = 0
    id: Optional[str] = None
    created_at: Optional[str] = None
    finished_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """``True`` when the handler returned (``status == "ok"``)."""
        return self.status == "ok"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Invocation":
        err = d.get("error")
        dur = d.get("duration_ms")
        return cls(
            function=_s(d, "function", ""),
            status=_s(d, "status", "ok"),
            result=d.get("result"),
            error=InvocationError.from_json(err) if isinstance(err, Mapping) else None,
            stdout=_s(d, "stdout", ""),
            stderr=_s(d, "stderr", ""),
            version=_opt_int(d.get("version")),
            duration_ms=None if dur is None else float(dur),
            cold=bool(d.get("cold", False)),
            attempts=int(_s(d, "attempts", 0)),
            id=d.get("id"),
            created_at=d.get("created_at"),
            finished_at=d.get("finished_at"),
            raw=dict(d),
        )


@dataclass
class SandboxExecTarget:
    """A schedule target (``type: "sandbox_exec"``): ``command`` runs with ``/bin/sh -c`` in a
    new sandbox of ``template`` (deleted when it ends), with ``env`` and the schedule's payload
    in ``$PANDASTACK_PAYLOAD`` (JSON); it is killed after ``timeout_seconds``."""

    template: str
    command: str = ""
    env: Dict[str, str] = field(default_factory=dict)
    timeout_seconds: int = 300

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SandboxExecTarget":
        return cls(
            template=_s(d, "template", ""),
            command=_s(d, "command", ""),
            env=dict(_s(d, "env", {})),
            timeout_seconds=int(_s(d, "timeout_seconds", 300)),
        )

    def to_json(self) -> Dict[str, Any]:
        return {
            "type": "sandbox_exec",
            "template": self.template,
            "command": self.command,
            "env": dict(self.env),
            "timeout_seconds": int(self.timeout_seconds),
        }


@dataclass
class FunctionTarget:
    """A schedule target (``type: "function"``): a call of function ``name`` of the workspace,
    the schedule's payload as the event; a run succeeds when the handler returns."""

    name: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FunctionTarget":
        return cls(name=_s(d, "name", ""))

    def to_json(self) -> Dict[str, Any]:
        return {"type": "function", "name": self.name}


def _target(v: Any) -> Optional[Union[SandboxExecTarget, FunctionTarget]]:
    if not isinstance(v, Mapping):
        return None
    kind = v.get("type", "sandbox_exec")
    if kind == "sandbox_exec":
        return SandboxExecTarget.from_json(v)
    if kind == "function":
        return FunctionTarget.from_json(v)
    return None


@dataclass
class Schedule:
    """A schedule: ``cron`` (5 fields, 6 with seconds first, or ``@hourly``-style macros) read
    in ``timezone`` runs ``target`` at each due time, each due time once. ``target`` is a
    :class:`SandboxExecTarget` or a :class:`FunctionTarget` (``None`` for a kind this SDK does
    not know: see ``raw``); ``payload`` is the JSON each run gets.

    ``concurrency_policy`` says what a due time does while a previous run is under way:
    ``allow`` (run alongside), ``forbid`` (the new run is ``skipped``) or ``replace`` (cancel
    the old one). A due time found ``starting_deadline_seconds`` late (the server was down) is
    ``missed``. A failed run is tried ``retries`` more times. ``next_run_at`` is the next due
    time (RFC 3339, UTC; ``None`` while ``paused``)."""

    id: str
    name: str = ""
    cron: str = ""
    timezone: str = "UTC"
    target: Optional[Union[SandboxExecTarget, FunctionTarget]] = None
    payload: Any = None
    concurrency_policy: str = "allow"
    starting_deadline_seconds: Optional[int] = None
    retries: int = 0
    paused: bool = False
    next_run_at: Optional[str] = None
    created_at: str = ""
    updated_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Schedule":
        return cls(
            id=_s(d, "id", ""),
            name=_s(d, "name", ""),
            cron=_s(d, "cron", ""),
            timezone=_s(d, "timezone", "UTC"),
            target=_target(d.get("target")),
            payload=d.get("payload"),
            concurrency_policy=_s(d, "concurrency_policy", "allow"),
            starting_deadline_seconds=_opt_int(d.get("starting_deadline_seconds")),
            retries=int(_s(d, "retries", 0)),
            paused=bool(d.get("paused", False)),
            next_run_at=d.get("next_run_at"),
            created_at=_s(d, "created_at", ""),
            updated_at=_s(d, "updated_at", ""),
            raw=dict(d),
        )


@dataclass
class ScheduleRun:
    """One run of a schedule, for the due time ``due_at`` (a ``manual`` run's: when it was
    asked for). ``state`` is ``queued``, ``running``, ``succeeded``, ``failed`` (non-zero exit,
    timeout or error, after ``retries``), ``skipped`` (``forbid``), ``missed`` or
    ``cancelled``; ``attempt`` counts its tries. ``sandbox_id`` is the sandbox of its latest
    attempt, ``exit_code`` the command's, ``output`` its stdout then stderr (at most 64 KiB)."""

    id: str
    schedule: str = ""
    due_at: str = ""
    trigger: str = "scheduled"
    state: str = "queued"
    attempt: int = 0
    sandbox_id: Optional[str] = None
    started_at: Optional[str] = None
    ended_at: Optional[str] = None
    exit_code: Optional[int] = None
    output: Optional[str] = None
    error: Optional[str] = None
    created_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def active(self) -> bool:
        """``True`` while the run is ``queued`` or ``running``."""
        return self.state in RUN_ACTIVE_STATES

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ScheduleRun":
        return cls(
            id=_s(d, "id", ""),
            schedule=_s(d, "schedule", ""),
            due_at=_s(d, "due_at", ""),
            trigger=_s(d, "trigger", "scheduled"),
            state=_s(d, "state", "queued"),
            attempt=int(_s(d, "attempt", 0)),
            sandbox_id=d.get("sandbox_id"),
            started_at=d.get("started_at"),
            ended_at=d.get("ended_at"),
            exit_code=_opt_int(d.get("exit_code")),
            output=d.get("output"),
            error=d.get("error"),
            created_at=_s(d, "created_at", ""),
            raw=dict(d),
        )


def _list_data(body: Any) -> List[Mapping[str, Any]]:
    if isinstance(body, dict):
        return list(body.get("data") or [])
    return list(body or [])


from typing import Generic, TypeVar  # noqa: E402

T = TypeVar("T")


@dataclass
class Page(Generic[T]):
    """One page of a list: ``data`` and the ``next_cursor`` to pass for the next page (``None``
    on the last page)."""

    data: List[T]
    next_cursor: Optional[str] = None
