"""Data objects returned by the SDK. They mirror the server's wire types (snake_case) and keep
the raw JSON in ``raw`` so fields added by newer servers stay reachable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, TypeVar, Union
from typing import cast as _cast

from typing import Literal

from . import _wire

_T = TypeVar("_T")

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
    "MetricPoint",
    "InstanceMetrics",
    "APIKey",
    "CreatedAPIKey",
    "Role",
    "Member",
    "AuditEntry",
    "EventResource",
    "Event",
    "DeliveryState",
    "Webhook",
    "WebhookDelivery",
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
    "HostState",
    "HostCapacity",
    "Host",
    "GitFileStatus",
    "GitStatus",
    "GitBranches",
]

SandboxState = Literal["starting", "running", "paused", "hibernated", "stopped", "failed", "lost"]
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
HostState = Literal["ready", "draining", "dead"]
#: Where a webhook delivery stands (:attr:`WebhookDelivery.state`).
DeliveryState = Literal["pending", "delivered", "failed"]
#: What a workspace member may do (:attr:`Member.role`): ``owner`` (everything, owners
#: included), ``admin`` (everything but touching an owner), ``developer`` (use resources; not
#: members nor the audit log) or ``viewer`` (read only).
Role = Literal["owner", "admin", "developer", "viewer"]
#: The roles, most powerful first.
ROLES = ("owner", "admin", "developer", "viewer")


def _s(d: Mapping[str, Any], k: str, default: Any = None) -> Any:
    v = d.get(k, default)
    return default if v is None else v


def _or(v: Optional[_T], default: _T) -> _T:
    """`v`, or `default` when it is ``None``: ``_or(w.get("k"), default)`` reads a field of a
    wire object ``w`` (a :mod:`._wire` ``TypedDict``, so a type checker sees the field names)."""
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
        w = _cast("_wire.SandboxVolume", d)
        return cls(
            name=_or(w.get("name"), ""), path=_or(w.get("path"), ""), read_only=bool(_or(w.get("read_only"), False))
        )

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
    #: ``lost`` or ``restore``: what becomes of it if its host is lost.
    on_host_loss: str = "lost"
    boot_ms: int = 0
    boot_mode: str = ""
    snapshot_id: Optional[str] = None
    host: str = ""
    volumes: List[VolumeMount] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SandboxInfo":
        w = _cast("_wire.Sandbox", d)
        return cls(
            id=w["id"],
            template=_or(w.get("template"), ""),
            state=_or(w.get("state"), ""),
            cpu=_or(w.get("cpu"), 0),
            memory_mb=_or(w.get("memory_mb"), 0),
            disk_mbps=_or(w.get("disk_mbps"), 0),
            disk_iops=_or(w.get("disk_iops"), 0),
            metadata=dict(_or(w.get("metadata"), {})),
            created_at=_or(w.get("created_at"), ""),
            expires_at=w.get("expires_at"),
            ttl_seconds=w.get("ttl_seconds"),
            idle_timeout_seconds=w.get("idle_timeout_seconds"),
            on_timeout=_or(w.get("on_timeout"), "kill"),
            on_host_loss=_or(w.get("on_host_loss"), "lost"),
            boot_ms=_or(w.get("boot_ms"), 0),
            boot_mode=_or(w.get("boot_mode"), ""),
            snapshot_id=w.get("snapshot_id"),
            host=_or(w.get("host"), ""),
            volumes=[VolumeMount.from_json(v) for v in _or(w.get("volumes"), []) if isinstance(v, Mapping)],
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
        w = _cast("_wire.ExecResult", d)
        return cls(
            stdout=_or(w.get("stdout"), ""),
            stderr=_or(w.get("stderr"), ""),
            exit_code=int(_or(w.get("exit_code"), -1)),
            timed_out=bool(_or(w.get("timed_out"), False)),
            truncated=bool(_or(w.get("truncated"), False)),
            duration_ms=int(_or(w.get("duration_ms"), 0)),
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
        w = _cast("_wire.FileInfo", d)
        return cls(
            name=_or(w.get("name"), ""),
            path=_or(w.get("path"), ""),
            type=_or(w.get("type"), "other"),
            size=_or(w.get("size"), 0),
            mode=_or(w.get("mode"), 0),
            mtime_ms=_or(w.get("mtime_ms"), 0),
            symlink_target=w.get("symlink_target"),
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
class WatchEvent:
    """One event of ``sandbox.files.watch(...)``. ``type`` is ``ready`` (the watch is armed;
    again after the sandbox woke from a hibernation, changes while it slept are not told),
    ``create``, ``modify``, ``delete``, ``rename`` (``from_path`` was renamed to ``path``) or
    ``overflow`` (changes were dropped under ``path``: list it again if that matters). Paths are
    absolute guest paths; a file written through the API lands by a ``rename`` of a temporary
    file."""

    type: str
    path: str
    dir: bool = False
    from_path: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "WatchEvent":
        return cls(
            type=str(d.get("type", "")),
            path=str(d.get("path", "")),
            dir=bool(d.get("dir", False)),
            from_path=d.get("from"),
            raw=dict(d),
        )


@dataclass
class FileUrl:
    """A signed URL for one file of a sandbox (``sandbox.files.url(...)``): anyone holding
    ``url`` can do ``method`` (``GET`` downloads, ``PUT`` uploads) to ``path`` without an API
    key until ``expires_at`` (RFC 3339)."""

    url: str
    method: str
    path: str
    expires_at: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any], base_url: str = "") -> "FileUrl":
        """``base_url``: the client's, which a relative ``url`` (as the server sends it) is
        made absolute with."""
        w = _cast("_wire.FileUrl", d)
        url = _or(w.get("url"), "")
        if url.startswith("/"):
            url = base_url.rstrip("/") + url
        return cls(
            url=url,
            method=_or(w.get("method"), "GET"),
            path=_or(w.get("path"), ""),
            expires_at=_or(w.get("expires_at"), ""),
            raw=dict(d),
        )


@dataclass
class Snapshot:
    """A sandbox snapshot; create new sandboxes from it with
    ``client.sandboxes.create(snapshot_id=snap.id)``."""

    id: str
    sandbox_id: str
    template: str = ""
    created_at: str = ""
    size_bytes: int = 0
    #: In a cluster, when its files became durable in the object store (RFC 3339); ``None``
    #: until then, and on a single-node server.
    durable_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Snapshot":
        w = _cast("_wire.Snapshot", d)
        return cls(
            id=w["id"],
            sandbox_id=_or(w.get("sandbox_id"), ""),
            template=_or(w.get("template"), ""),
            created_at=_or(w.get("created_at"), ""),
            size_bytes=int(_or(w.get("size_bytes"), 0)),
            durable_at=w.get("durable_at"),
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
        w = _cast("_wire.Template", d)
        return cls(
            name=w["name"],
            description=_or(w.get("description"), ""),
            cpu=_or(w.get("cpu"), 0),
            memory_mb=_or(w.get("memory_mb"), 0),
            disk_mb=_or(w.get("disk_mb"), 0),
            state=_or(w.get("state"), ""),
            bake_ms=w.get("bake_ms"),
            source=_or(w.get("source"), "catalog"),
            version=w.get("version"),
            ready_version=w.get("ready_version"),
            error=w.get("error"),
            build_ms=w.get("build_ms"),
            image_bytes=w.get("image_bytes"),
            created_at=w.get("created_at"),
            raw=dict(d),
        )


@dataclass
class MetricPoint:
    """One point of a resource's use over time: the readings within ``[t, t + step)`` of every
    VM it has (summed over an app's or a function's instances). ``t`` is the start of the step
    (RFC 3339, like every time of this SDK). ``cpu_pct`` is the CPU time the VM processes used in
    percent of their vCPUs' time (100: every vCPU busy all the step; QEMU's own threads count
    too, so it can pass 100 briefly); ``mem_bytes`` / ``pss_bytes`` the host memory they hold
    (RSS / proportional set size) at the step's last reading; ``mem_total_bytes`` /
    ``mem_available_bytes`` what the guests have and say is available, ``disk_bytes`` /
    ``disk_total_bytes`` their root filesystems' use and size (``None``: no guest answered);
    ``net_rx`` / ``net_tx`` bytes received and sent within the step (``None``: no NIC)."""

    t: str
    cpu_pct: float = 0.0
    vcpus: int = 0
    mem_bytes: int = 0
    pss_bytes: int = 0
    mem_total_bytes: Optional[int] = None
    mem_available_bytes: Optional[int] = None
    disk_bytes: Optional[int] = None
    disk_total_bytes: Optional[int] = None
    net_rx: Optional[int] = None
    net_tx: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "MetricPoint":
        w = _cast("_wire.MetricPoint", d)
        return cls(
            t=_or(w.get("t"), ""),
            cpu_pct=float(_or(w.get("cpu_pct"), 0.0)),
            vcpus=_or(w.get("vcpus"), 0),
            mem_bytes=_or(w.get("mem_bytes"), 0),
            pss_bytes=_or(w.get("pss_bytes"), 0),
            mem_total_bytes=w.get("mem_total_bytes"),
            mem_available_bytes=w.get("mem_available_bytes"),
            disk_bytes=w.get("disk_bytes"),
            disk_total_bytes=w.get("disk_total_bytes"),
            net_rx=w.get("net_rx"),
            net_tx=w.get("net_tx"),
            raw=dict(d),
        )


def _points(v: Any) -> List[MetricPoint]:
    return [MetricPoint.from_json(x) for x in (v or []) if isinstance(x, Mapping)]


@dataclass
class InstanceMetrics:
    """One VM's points, for a resource with several (an app's instances, a function's, a
    database's VM): ``sandbox_id``, its ``state`` now, and its ``samples``."""

    sandbox_id: str
    state: str = ""
    samples: List[MetricPoint] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "InstanceMetrics":
        w = _cast("_wire.InstanceMetrics", d)
        return cls(
            sandbox_id=_or(w.get("sandbox_id"), ""),
            state=_or(w.get("state"), ""),
            samples=_points(w.get("samples")),
            raw=dict(d),
        )


@dataclass
class Metrics:
    """Resource use over time (``GET /v1/{sandboxes,databases,apps,functions}/{id}/metrics``).

    ``samples`` are points ``step`` seconds apart, oldest first (see :class:`MetricPoint`); for
    a database, an app or a function they sum its VMs, listed one by one in ``instances``. For a
    sandbox, ``state`` and ``host_rss_bytes``, ``host_pss_bytes``, ``cpu_time_ms`` are its VM's
    now (``None`` when it does not run). Everything the server sent is in ``raw``."""

    state: str
    host_rss_bytes: Optional[int] = None
    host_pss_bytes: Optional[int] = None
    cpu_time_ms: Optional[int] = None
    step: int = 0
    samples: List[MetricPoint] = field(default_factory=list)
    instances: List[InstanceMetrics] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Metrics":
        w = _cast("_wire.Metrics", d)
        return cls(
            state=_or(w.get("state"), ""),
            host_rss_bytes=w.get("host_rss_bytes"),
            host_pss_bytes=w.get("host_pss_bytes"),
            cpu_time_ms=w.get("cpu_time_ms"),
            step=_or(w.get("step"), 0),
            samples=_points(w.get("samples")),
            instances=[InstanceMetrics.from_json(x) for x in (w.get("instances") or []) if isinstance(x, Mapping)],
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
        w = _cast("_wire.PortUrl", d)
        return cls(
            url=_or(w.get("url"), ""),
            port=int(_or(w.get("port"), 0)),
            public=bool(_or(w.get("public"), False)),
            token=_or(w.get("token"), ""),
        )


@dataclass
class APIKey:
    id: str
    name: str
    prefix: str
    created_at: str = ""
    revoked: bool = False
    #: An operator's key (``pandastack keys create --admin`` on the server): it may also call
    #: the operator routes (``/v1/hosts``).
    admin: bool = False
    #: What it may do: ``*`` or ``<kind>:<action>`` scopes (actions ``read``, ``write``,
    #: ``exec``; ``*`` for either part).
    scopes: List[str] = field(default_factory=lambda: ["*"])
    #: When it stops working (RFC 3339), if ever.
    expires_at: Optional[str] = None
    #: When it was last used (to within a minute), if ever.
    last_used_at: Optional[str] = None
    #: The member it belongs to (``None``: a workspace key, limited by its scopes only).
    member_id: Optional[str] = None
    #: That member's role (``None`` for a workspace key).
    role: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "APIKey":
        w = _cast("_wire.Key", d)
        return cls(
            id=w["id"],
            name=_or(w.get("name"), ""),
            prefix=_or(w.get("prefix"), ""),
            created_at=_or(w.get("created_at"), ""),
            revoked=bool(_or(w.get("revoked"), False)),
            admin=bool(_or(w.get("admin"), False)),
            scopes=list(_or(w.get("scopes"), ["*"])),
            expires_at=w.get("expires_at"),
            last_used_at=w.get("last_used_at"),
            member_id=w.get("member_id"),
            role=w.get("role"),
        )


@dataclass
class CreatedAPIKey(APIKey):
    """A key just created; ``secret`` is shown this once."""

    secret: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CreatedAPIKey":
        w = _cast("_wire.CreatedKey", d)
        k = APIKey.from_json(d)
        return cls(
            id=k.id, name=k.name, prefix=k.prefix, created_at=k.created_at, revoked=k.revoked,
            admin=k.admin, scopes=k.scopes, expires_at=k.expires_at, last_used_at=k.last_used_at,
            member_id=k.member_id, role=k.role, secret=_or(w.get("secret"), ""),
        )


@dataclass
class Member:
    """A member of the workspace (``client.members``): their keys (``client.keys.create(...,
    member_id=...)``) can do no more than ``role`` allows. ``id`` is ``mem-…``; ``email`` is
    unique in the workspace (compared case-insensitively); ``active_keys`` counts their keys
    not revoked."""

    id: str
    name: str = ""
    email: str = ""
    role: str = "viewer"
    created_at: str = ""
    active_keys: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Member":
        w = _cast("_wire.Member", d)
        return cls(
            id=_or(w.get("id"), ""),
            name=_or(w.get("name"), ""),
            email=_or(w.get("email"), ""),
            role=_or(w.get("role"), "viewer"),
            created_at=_or(w.get("created_at"), ""),
            active_keys=int(_or(w.get("active_keys"), 0)),
            raw=dict(d),
        )


@dataclass
class AuditEntry:
    """One audited call (``client.audit``): when (``at``, RFC 3339), the key that made it
    (``key_id``, ``key_name``) and its member if any, the operation (``action``, as the OpenAPI
    document names it: ``create_sandbox``, ``create_member``...), the ``method`` and ``route``
    template, the ``resource`` (``<kind>`` or ``<kind>/<id or name>``: ``members/mem-…``), the
    ``result`` (``ok``, or the error code of a refused or failed call) with the HTTP
    ``status``, the caller's address (``source``) and the call's ``request_id``."""

    id: str
    at: str = ""
    key_id: str = ""
    key_name: str = ""
    member_id: Optional[str] = None
    action: str = ""
    method: str = ""
    route: str = ""
    resource: str = ""
    result: str = ""
    status: int = 0
    source: str = ""
    request_id: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "AuditEntry":
        w = _cast("_wire.AuditEntry", d)
        return cls(
            id=_or(w.get("id"), ""),
            at=_or(w.get("at"), ""),
            key_id=_or(w.get("key_id"), ""),
            key_name=_or(w.get("key_name"), ""),
            member_id=w.get("member_id"),
            action=_or(w.get("action"), ""),
            method=_or(w.get("method"), ""),
            route=_or(w.get("route"), ""),
            resource=_or(w.get("resource"), ""),
            result=_or(w.get("result"), ""),
            status=int(_or(w.get("status"), 0)),
            source=_or(w.get("source"), ""),
            request_id=_or(w.get("request_id"), ""),
            raw=dict(d),
        )


@dataclass
class EventResource:
    """The resource an :class:`Event` is about: ``kind`` (``sandbox``, ``snapshot``,
    ``template``, ``app``, ``database``, ``function`` or ``schedule``) and ``id`` (a sandbox's
    ``sb-…``; for resources addressed by name, their name)."""

    kind: str = ""
    id: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "EventResource":
        w = _cast("_wire.EventResource", d)
        return cls(kind=_or(w.get("kind"), ""), id=_or(w.get("id"), ""))


@dataclass
class Event:
    """One lifecycle event of the workspace (``client.events``): ``type`` such as
    ``sandbox.created``, the ``resource`` it is about, ``at`` (RFC 3339) and a small ``data``
    object (by type: a deploy's ``phase``, a failure's ``error``...). ``id`` grows with time
    across the server: pass the last one seen as ``after``/``cursor`` to resume."""

    id: str
    type: str = ""
    resource: EventResource = field(default_factory=EventResource)
    at: str = ""
    data: Dict[str, Any] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Event":
        w = _cast("_wire.Event", d)
        return cls(
            id=_or(w.get("id"), ""),
            type=_or(w.get("type"), ""),
            resource=EventResource.from_json(_or(w.get("resource"), {})),  # type: ignore[arg-type]
            at=_or(w.get("at"), ""),
            data=dict(_or(w.get("data"), {})),
            raw=dict(d),
        )


@dataclass
class Webhook:
    """A webhook endpoint: events whose type matches one of ``events`` (exact types,
    ``<kind>.*`` or ``*``) are POSTed to ``url``, signed per Standard Webhooks. ``secret``
    (``whsec_…``) is set only on what ``client.webhooks.create`` returns."""

    id: str
    url: str = ""
    events: List[str] = field(default_factory=list)
    created_at: str = ""
    secret: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Webhook":
        w = _cast("_wire.Webhook", d)
        return cls(
            id=_or(w.get("id"), ""),
            url=_or(w.get("url"), ""),
            events=list(_or(w.get("events"), [])),
            created_at=_or(w.get("created_at"), ""),
            secret=w.get("secret"),
            raw=dict(d),
        )


@dataclass
class WebhookDelivery:
    """One event's delivery to one webhook. ``state`` is ``pending``, ``delivered`` or
    ``failed`` (its retries used up); ``attempts`` counts the POSTs made, ``last_status`` and
    ``last_error`` tell how the last one went, ``next_attempt_at`` when a pending one is due."""

    id: str
    webhook_id: str = ""
    event_id: str = ""
    event_type: str = ""
    state: str = "pending"
    attempts: int = 0
    created_at: str = ""
    delivered_at: Optional[str] = None
    last_attempt_at: Optional[str] = None
    last_error: Optional[str] = None
    last_status: Optional[int] = None
    next_attempt_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "WebhookDelivery":
        w = _cast("_wire.WebhookDelivery", d)
        return cls(
            id=_or(w.get("id"), ""),
            webhook_id=_or(w.get("webhook_id"), ""),
            event_id=_or(w.get("event_id"), ""),
            event_type=_or(w.get("event_type"), ""),
            state=_or(w.get("state"), "pending"),
            attempts=int(_or(w.get("attempts"), 0)),
            created_at=_or(w.get("created_at"), ""),
            delivered_at=w.get("delivered_at"),
            last_attempt_at=w.get("last_attempt_at"),
            last_error=w.get("last_error"),
            last_status=_opt_int(w.get("last_status")),
            next_attempt_at=w.get("next_attempt_at"),
            raw=dict(d),
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
        w = _cast("_wire.CodeOutput", d)
        return cls(
            text=_or(w.get("text"), ""),
            html=w.get("html"),
            png=w.get("png"),
            svg=w.get("svg"),
            markdown=w.get("markdown"),
            json=w.get("json"),
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
        w = _cast("_wire.CodeError", d)
        return cls(
            name=_or(w.get("name"), ""),
            value=_or(w.get("value"), ""),
            traceback=_or(w.get("traceback"), ""),
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
        w = _cast("_wire.CodeResult", d)
        err = w.get("error")
        return cls(
            stdout=_or(w.get("stdout"), ""),
            stderr=_or(w.get("stderr"), ""),
            results=[Result.from_json(r) for r in _or(w.get("results"), []) if isinstance(r, Mapping)],
            error=ExecutionError.from_json(err) if isinstance(err, Mapping) else None,
            truncated=bool(_or(w.get("truncated"), False)),
            duration_ms=int(_or(w.get("duration_ms"), 0)),
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
        w = _cast("_wire.CodeContext", d)
        return cls(id=w["id"], language=_or(w.get("language"), "python"))


@dataclass
class VolumeAttachment:
    """A sandbox that has a volume mounted (``read_only``: a copy of it as of the sandbox's
    create)."""

    sandbox_id: str
    path: str = ""
    read_only: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "VolumeAttachment":
        w = _cast("_wire.VolumeAttachment", d)
        return cls(
            sandbox_id=_or(w.get("sandbox_id"), ""),
            path=_or(w.get("path"), ""),
            read_only=bool(_or(w.get("read_only"), False)),
        )


@dataclass
class Volume:
    """A durable volume: an ext4 disk that outlives the sandboxes that mount it.

    ``attached_to`` is the sandbox that has it mounted read-write (at most one), ``attachments``
    every sandbox that has it (or a read-only copy of it) mounted; ``source`` the volume
    snapshot or backup it was restored from."""

    id: str
    name: str
    #: ``ready``, or ``unavailable`` while its host is dead (a cluster's host lost): make a new
    #: volume from one of its backups, or wait for the host.
    state: str = "ready"
    size_gb: int = 0
    attached_to: Optional[str] = None
    attachments: List[VolumeAttachment] = field(default_factory=list)
    source: Optional[str] = None
    host: str = ""
    created_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Volume":
        w = _cast("_wire.Volume", d)
        return cls(
            id=_or(w.get("id"), ""),
            name=_or(w.get("name"), ""),
            state=_or(w.get("state"), "ready"),
            size_gb=int(_or(w.get("size_gb"), 0)),
            attached_to=w.get("attached_to"),
            attachments=[
                VolumeAttachment.from_json(a) for a in _or(w.get("attachments"), []) if isinstance(a, Mapping)
            ],
            source=w.get("source"),
            host=_or(w.get("host"), ""),
            created_at=_or(w.get("created_at"), ""),
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
        w = _cast("_wire.VolumeSnapshot", d)
        return cls(
            id=_or(w.get("id"), ""),
            volume=_or(w.get("volume"), ""),
            size_gb=int(_or(w.get("size_gb"), 0)),
            frozen=bool(_or(w.get("frozen"), False)),
            created_at=_or(w.get("created_at"), ""),
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
        w = _cast("_wire.VolumeBackup", d)
        return cls(
            id=_or(w.get("id"), ""),
            volume=_or(w.get("volume"), ""),
            size_gb=int(_or(w.get("size_gb"), 0)),
            state=_or(w.get("state"), "uploading"),
            bytes_uploaded=w.get("bytes_uploaded"),
            chunks=w.get("chunks"),
            error=w.get("error"),
            created_at=_or(w.get("created_at"), ""),
            finished_at=w.get("finished_at"),
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
        w = _cast("_wire.Database", d)
        return cls(
            id=_or(w.get("id"), ""),
            name=_or(w.get("name"), ""),
            version=int(_or(w.get("version"), 0)),
            state=_or(w.get("state"), "creating"),
            user=_or(w.get("user"), ""),
            connection_uri=_or(w.get("connection_uri"), ""),
            pooled_uri=_or(w.get("pooled_uri"), ""),
            http_url=_or(w.get("http_url"), ""),
            size_gb=int(_or(w.get("size_gb"), 0)),
            memory_mb=int(_or(w.get("memory_mb"), 0)),
            idle_seconds=int(_or(w.get("idle_seconds"), 0)),
            parent=w.get("parent"),
            sandbox_id=w.get("sandbox_id"),
            volume=_or(w.get("volume"), ""),
            host=_or(w.get("host"), ""),
            created_at=_or(w.get("created_at"), ""),
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
        w = _cast("_wire.QueryField", d)
        return cls(name=_or(w.get("name"), ""), data_type_id=int(_or(w.get("data_type_id"), 0)))


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
        w = _cast("_wire.QueryResponse", d)
        rc = w.get("row_count")
        return cls(
            command=_or(w.get("command"), ""),
            row_count=int(rc) if rc is not None else None,
            fields=[QueryField.from_json(f) for f in _or(w.get("fields"), []) if isinstance(f, Mapping)],
            rows=[list(r) for r in _or(w.get("rows"), []) if isinstance(r, list)],
            raw=dict(d),
        )


@dataclass
class DatabaseExtension:
    """An extension ``CREATE EXTENSION`` can load (``vector``, ``pg_trgm``, ...)."""

    name: str
    default_version: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "DatabaseExtension":
        w = _cast("_wire.DatabaseExtension", d)
        return cls(name=_or(w.get("name"), ""), default_version=_or(w.get("default_version"), ""))


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
        w = _cast("_wire.DatabaseExtensions", d)
        versions = _or(w.get("versions"), {})
        return cls(
            versions={
                str(k): [DatabaseExtension.from_json(e) for e in v if isinstance(e, Mapping)]
                for k, v in (versions.items() if isinstance(versions, Mapping) else [])
                if isinstance(v, list)
            },
            preloaded=[str(x) for x in _or(w.get("preloaded"), []) if isinstance(x, str)],
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
        w = _cast("_wire.AppGit", d)
        return cls(url=_or(w.get("url"), ""), ref=w.get("ref"))

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
        w = _cast("_wire.AppBuild", d)
        return cls(command=w.get("command"), output_dir=w.get("output_dir"))

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
        w = _cast("_wire.AppStart", d)
        return cls(command=w.get("command"), port=w.get("port"))

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
        w = _cast("_wire.AppDomain", d)
        return cls(
            name=_or(w.get("name"), ""),
            tls=_or(w.get("tls"), "none"),
            tls_expires_at=w.get("tls_expires_at"),
            tls_error=w.get("tls_error"),
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
    root_dir: Optional[str] = None
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
        w = _cast("_wire.App", d)
        git, build, start = w.get("git"), w.get("build"), w.get("start")
        return cls(
            id=_or(w.get("id"), ""),
            name=_or(w.get("name"), ""),
            url=_or(w.get("url"), ""),
            git=AppGit.from_json(git) if isinstance(git, Mapping) else AppGit(""),
            env=dict(_or(w.get("env"), {})),
            secret_names=[str(x) for x in _or(w.get("secret_names"), [])],
            build=AppBuild.from_json(build) if isinstance(build, Mapping) else AppBuild(),
            start=AppStart.from_json(start) if isinstance(start, Mapping) else AppStart(),
            root_dir=w.get("root_dir"),
            memory_mb=int(_or(w.get("memory_mb"), 0)),
            min_instances=int(_or(w.get("min_instances"), 0)),
            idle_seconds=int(_or(w.get("idle_seconds"), 0)),
            health_path=_or(w.get("health_path"), "/"),
            webhook_secret=_or(w.get("webhook_secret"), ""),
            deploy_key=_or(w.get("deploy_key"), ""),
            domains=[AppDomain.from_json(x) for x in _or(w.get("domains"), []) if isinstance(x, Mapping)],
            live_deploy=w.get("live_deploy"),
            instance_state=w.get("instance_state"),
            created_at=_or(w.get("created_at"), ""),
            updated_at=_or(w.get("updated_at"), ""),
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
        w = _cast("_wire.Deploy", d)
        plan = w.get("plan")
        return cls(
            id=_or(w.get("id"), ""),
            app=_or(w.get("app"), ""),
            number=int(_or(w.get("number"), 0)),
            ref=_or(w.get("ref"), ""),
            state=_or(w.get("state"), "queued"),
            commit=w.get("commit"),
            error=w.get("error"),
            plan=dict(plan) if isinstance(plan, Mapping) else None,
            phases_ms=dict(_or(w.get("phases_ms"), {})),
            sandbox_id=w.get("sandbox_id"),
            created_at=_or(w.get("created_at"), ""),
            updated_at=_or(w.get("updated_at"), ""),
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
        w = _cast("_wire.Function", d)
        return cls(
            id=_or(w.get("id"), ""),
            name=_or(w.get("name"), ""),
            runtime=_or(w.get("runtime"), "python"),
            handler=_or(w.get("handler"), ""),
            url=_or(w.get("url"), ""),
            public=bool(w.get("public", False)),
            env=dict(_or(w.get("env"), {})),
            secret_names=[str(x) for x in _or(w.get("secret_names"), [])],
            memory_mb=int(_or(w.get("memory_mb"), 0)),
            timeout_seconds=int(_or(w.get("timeout_seconds"), 0)),
            concurrency=int(_or(w.get("concurrency"), 0)),
            max_instances=int(_or(w.get("max_instances"), 0)),
            idle_seconds=int(_or(w.get("idle_seconds"), 0)),
            live_version=_opt_int(w.get("live_version")),
            warm_instances=int(_or(w.get("warm_instances"), 0)),
            created_at=_or(w.get("created_at"), ""),
            updated_at=_or(w.get("updated_at"), ""),
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
        w = _cast("_wire.FunctionVersion", d)
        return cls(
            id=_or(w.get("id"), ""),
            function=_or(w.get("function"), ""),
            version=int(_or(w.get("version"), 0)),
            state=_or(w.get("state"), "queued"),
            error=w.get("error"),
            handler=w.get("handler"),
            phases_ms=dict(_or(w.get("phases_ms"), {})),
            created_at=_or(w.get("created_at"), ""),
            updated_at=_or(w.get("updated_at"), ""),
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
        w = _cast("_wire.InvocationError", d)
        return cls(
            type=_or(w.get("type"), ""), message=_or(w.get("message"), ""), traceback=_or(w.get("traceback"), "")
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
        w = _cast("_wire.Invocation", d)
        err = w.get("error")
        dur = w.get("duration_ms")
        return cls(
            function=_or(w.get("function"), ""),
            status=_or(w.get("status"), "ok"),
            result=w.get("result"),
            error=InvocationError.from_json(err) if isinstance(err, Mapping) else None,
            stdout=_or(w.get("stdout"), ""),
            stderr=_or(w.get("stderr"), ""),
            version=_opt_int(w.get("version")),
            duration_ms=None if dur is None else float(dur),
            cold=bool(w.get("cold", False)),
            attempts=int(_or(w.get("attempts"), 0)),
            id=w.get("id"),
            created_at=w.get("created_at"),
            finished_at=w.get("finished_at"),
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
        w = _cast("_wire.SandboxExecTarget", d)
        return cls(
            template=_or(w.get("template"), ""),
            command=_or(w.get("command"), ""),
            env=dict(_or(w.get("env"), {})),
            timeout_seconds=int(_or(w.get("timeout_seconds"), 300)),
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
        w = _cast("_wire.FunctionTarget", d)
        return cls(name=_or(w.get("name"), ""))

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
        w = _cast("_wire.Schedule", d)
        return cls(
            id=_or(w.get("id"), ""),
            name=_or(w.get("name"), ""),
            cron=_or(w.get("cron"), ""),
            timezone=_or(w.get("timezone"), "UTC"),
            target=_target(w.get("target")),
            payload=w.get("payload"),
            concurrency_policy=_or(w.get("concurrency_policy"), "allow"),
            starting_deadline_seconds=_opt_int(w.get("starting_deadline_seconds")),
            retries=int(_or(w.get("retries"), 0)),
            paused=bool(w.get("paused", False)),
            next_run_at=w.get("next_run_at"),
            created_at=_or(w.get("created_at"), ""),
            updated_at=_or(w.get("updated_at"), ""),
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
        w = _cast("_wire.ScheduleRun", d)
        return cls(
            id=_or(w.get("id"), ""),
            schedule=_or(w.get("schedule"), ""),
            due_at=_or(w.get("due_at"), ""),
            trigger=_or(w.get("trigger"), "scheduled"),
            state=_or(w.get("state"), "queued"),
            attempt=int(_or(w.get("attempt"), 0)),
            sandbox_id=w.get("sandbox_id"),
            started_at=w.get("started_at"),
            ended_at=w.get("ended_at"),
            exit_code=_opt_int(w.get("exit_code")),
            output=w.get("output"),
            error=w.get("error"),
            created_at=_or(w.get("created_at"), ""),
            raw=dict(d),
        )


@dataclass
class HostCapacity:
    """What a host offers, as its agent last reported it (all 0 until then; the single-node
    server's in-process host reports none). ``free_slots`` is how many more sandboxes it can
    start now, ``slots`` how many it can run in all (0: not limited by slots),
    ``creates_in_flight`` the creates (restores, forks) its agent has under way."""

    vcpus: int = 0
    memory_mib: int = 0
    disk_bytes: int = 0
    free_slots: int = 0
    creates_in_flight: int = 0
    slots: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "HostCapacity":
        w = _cast("_wire.HostCapacity", d)
        return cls(
            vcpus=int(_or(w.get("vcpus"), 0)),
            memory_mib=int(_or(w.get("memory_mib"), 0)),
            disk_bytes=int(_or(w.get("disk_bytes"), 0)),
            free_slots=int(_or(w.get("free_slots"), 0)),
            creates_in_flight=int(_or(w.get("creates_in_flight"), 0)),
            slots=int(_or(w.get("slots"), 0)),
        )


@dataclass
class Host:
    """A host: a machine that runs sandboxes (``client.hosts``, admin keys only).

    ``state`` is ``ready`` (takes work), ``draining`` (keeps what it runs, takes nothing new) or
    ``dead`` (its lease lapsed). ``address`` is where replicas reach its agent (``None`` for the
    single-node server's in-process host); ``epoch`` grows with every join and reap;
    ``sandboxes`` counts the sandboxes on it (every state, every workspace); ``templates`` are
    the templates it holds; ``compat_key`` names the QEMU, guest kernel and CPU features a
    snapshot needs to be restored on it (``None`` until its agent reports one).
    ``last_seen_at`` is when it last joined (or started), ``lease_expires_at`` when its lease
    runs out unless renewed (``None`` when it holds none). Times are RFC 3339."""

    id: str
    name: str = ""
    address: Optional[str] = None
    state: str = "ready"
    epoch: int = 0
    capacity: HostCapacity = field(default_factory=HostCapacity)
    compat_key: Optional[str] = None
    templates: List[str] = field(default_factory=list)
    sandboxes: int = 0
    created_at: str = ""
    last_seen_at: str = ""
    lease_expires_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Host":
        w = _cast("_wire.Host", d)
        cap = w.get("capacity")
        return cls(
            id=_or(w.get("id"), ""),
            name=_or(w.get("name"), ""),
            address=w.get("address"),
            state=_or(w.get("state"), "ready"),
            epoch=int(_or(w.get("epoch"), 0)),
            capacity=HostCapacity.from_json(cap) if isinstance(cap, Mapping) else HostCapacity(),
            compat_key=w.get("compat_key"),
            templates=[str(t) for t in _or(w.get("templates"), [])],
            sandboxes=int(_or(w.get("sandboxes"), 0)),
            created_at=_or(w.get("created_at"), ""),
            last_seen_at=_or(w.get("last_seen_at"), ""),
            lease_expires_at=w.get("lease_expires_at"),
            raw=dict(d),
        )


#: The two-letter ``XY`` codes of an unmerged path in ``git status`` (a conflict).
_GIT_UNMERGED = frozenset({"DD", "AU", "UD", "UA", "DU", "AA", "UU"})


@dataclass
class GitFileStatus:
    """A changed path of a git working tree (:attr:`GitStatus.files`).

    ``index`` and ``worktree`` are git's one-letter codes for the staged and the unstaged side
    (``git status --porcelain=v2``): ``"."`` unchanged, ``"M"`` modified, ``"A"`` added,
    ``"D"`` deleted, ``"R"`` renamed, ``"C"`` copied, ``"T"`` type changed, ``"U"`` unmerged;
    an untracked file is ``"?"`` on both sides. ``orig_path`` is the path a rename or copy came
    from."""

    path: str
    index: str
    worktree: str
    orig_path: Optional[str] = None

    @property
    def staged(self) -> bool:
        """The index holds a change of this path (what the next commit takes)."""
        return self.index not in (".", "?") and not self.conflicted

    @property
    def untracked(self) -> bool:
        return self.index == "?"

    @property
    def conflicted(self) -> bool:
        """The path is unmerged: a merge stopped on it."""
        return self.index + self.worktree in _GIT_UNMERGED


@dataclass
class GitStatus:
    """What ``sandbox.git.status(path)`` found (from ``git status --porcelain=v2 --branch``).

    ``branch`` is the current branch (``None`` when HEAD is detached; a branch without commits
    yet has its name and ``commit`` ``None``); ``upstream`` the branch it tracks
    (``"origin/main"``, ``None`` if none); ``ahead`` / ``behind`` the commits it has that the
    upstream lacks and the other way round, as of the last fetch (0 without an upstream)."""

    branch: Optional[str]
    commit: Optional[str] = None
    upstream: Optional[str] = None
    ahead: int = 0
    behind: int = 0
    files: List[GitFileStatus] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """No staged, unstaged or untracked change (ignored files aside)."""
        return not self.files

    @property
    def conflicts(self) -> List[str]:
        """The unmerged paths (a merge stopped on them)."""
        return [f.path for f in self.files if f.conflicted]


@dataclass
class GitBranches:
    """The branches of a repository (``sandbox.git.branches(path)``): ``local`` ones
    (``"main"``), the ``remote`` tracking ones as of the last fetch (``"origin/main"``), and the
    ``current`` branch (``None`` when HEAD is detached or its branch has no commit yet)."""

    current: Optional[str]
    local: List[str] = field(default_factory=list)
    remote: List[str] = field(default_factory=list)


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
