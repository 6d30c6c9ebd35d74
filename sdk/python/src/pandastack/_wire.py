# Generated from crates/pandastack-api/openapi.json by scripts/gen-python-wire.py: do not edit
# by hand. Run `python3 scripts/gen-python-wire.py` after the contract changes (CI runs it with --check).
"""The server's wire types (its JSON objects as ``TypedDict`` classes, its string enums as
``Literal`` aliases), from its OpenAPI document. Internal: the public data objects are the dataclasses
of :mod:`pandastack.types`; their ``from_json`` read these, and the request bodies of the
resource modules are built as these. ``tests/test_wire_contract.py`` ties the two together."""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, TypedDict, Union


class _AppRequired(TypedDict):
    build: AppBuild
    created_at: str
    deploy_key: str
    domains: List[AppDomain]
    env: Dict[str, str]
    git: AppGit
    health_path: str
    id: str
    idle_seconds: int
    memory_mb: int
    min_instances: int
    name: str
    secret_names: List[str]
    start: AppStart
    updated_at: str
    url: str
    webhook_secret: str


class App(_AppRequired, total=False):
    """An app resource."""
    instance_state: Optional[SandboxState]
    live_deploy: Optional[str]
    root_dir: Optional[str]


class AppBuild(TypedDict, total=False):
    """How to build an app (overrides what detection chose)."""
    command: Optional[str]
    output_dir: Optional[str]


class _AppDomainRequired(TypedDict):
    name: str
    tls: DomainTls


class AppDomain(_AppDomainRequired, total=False):
    """A custom domain of an app."""
    tls_error: Optional[str]
    tls_expires_at: Optional[str]


class _AppGitRequired(TypedDict):
    url: str


class AppGit(_AppGitRequired, total=False):
    """Where an app's code comes from."""
    ref: Optional[str]


class AppStart(TypedDict, total=False):
    """How to start an app (overrides what detection chose)."""
    command: Optional[str]
    port: Optional[int]


class _AuditEntryRequired(TypedDict):
    action: str
    at: str
    id: str
    key_id: str
    key_name: str
    method: str
    request_id: str
    resource: str
    result: str
    route: str
    source: str
    status: int


class AuditEntry(_AuditEntryRequired, total=False):
    """One audited call: `{at, key_id, action, resource, result, source}` and what else tells it
    apart.
    """
    member_id: Optional[str]


#: Where a backup is.
BackupState = Literal["uploading", "done", "failed"]


class CodeContext(TypedDict):
    """A code context: one kernel with its own variables."""
    id: str
    language: str


class CodeContextRequest(TypedDict, total=False):
    """`POST /v1/sandboxes/{id}/code/contexts`."""
    env: Dict[str, str]
    language: Optional[str]


class CodeError(TypedDict):
    """The exception a run ended with."""
    name: str
    traceback: str
    value: str


class _CodeOutputRequired(TypedDict):
    text: str


class CodeOutput(_CodeOutputRequired, total=False):
    """One rich result: the value of a final expression, a `display(…)` call or a matplotlib figure.
    `text` is always there; the others when the object provides them.
    """
    html: Optional[str]
    json: Dict[str, Any]
    markdown: Optional[str]
    png: Optional[str]
    svg: Optional[str]


class _CodeRequestRequired(TypedDict):
    code: str


class CodeRequest(_CodeRequestRequired, total=False):
    """`POST /v1/sandboxes/{id}/code` (and `/code/stream`)."""
    context_id: Optional[str]
    env: Dict[str, str]
    language: Optional[str]
    timeout_seconds: Optional[int]


class _CodeResultRequired(TypedDict):
    duration_ms: int
    results: List[CodeOutput]
    stderr: str
    stdout: str
    truncated: bool


class CodeResult(_CodeResultRequired, total=False):
    """What a run produced. An exception in the code is data (`error`), not an HTTP error."""
    error: Optional[CodeError]


#: What a due time does while a previous run of the schedule is still queued or running.
ConcurrencyPolicy = Literal["allow", "forbid", "replace"]


class _CreateAppRequestRequired(TypedDict):
    git: AppGit
    name: str


class CreateAppRequest(_CreateAppRequestRequired, total=False):
    """`POST /v1/apps`."""
    build: Optional[AppBuild]
    deploy: Optional[bool]
    domains: List[str]
    env: Dict[str, str]
    health_path: Optional[str]
    idle_seconds: Optional[int]
    memory_mb: Optional[int]
    min_instances: Optional[int]
    root_dir: Optional[str]
    secrets: Dict[str, str]
    start: Optional[AppStart]


class CreateBranchRequest(TypedDict, total=False):
    """`POST /v1/databases/{id}/branches`: a new database with the data of this one as of now."""
    from_time: Optional[str]
    idle_seconds: Optional[int]
    name: Optional[str]


class _CreateDatabaseRequestRequired(TypedDict):
    name: str


class CreateDatabaseRequest(_CreateDatabaseRequestRequired, total=False):
    """`POST /v1/databases`."""
    idle_seconds: Optional[int]
    memory_mb: Optional[int]
    size_gb: Optional[int]
    version: Optional[int]


class CreateDeployRequest(TypedDict, total=False):
    """`POST /v1/apps/{name}/deploys`."""
    ref: Optional[str]


class _CreateFunctionRequestRequired(TypedDict):
    handler: str
    name: str
    runtime: FunctionRuntime


class CreateFunctionRequest(_CreateFunctionRequestRequired, total=False):
    """`POST /v1/functions`."""
    concurrency: Optional[int]
    dependencies: Optional[str]
    env: Dict[str, str]
    files: Dict[str, str]
    git: Optional[AppGit]
    idle_seconds: Optional[int]
    max_instances: Optional[int]
    memory_mb: Optional[int]
    public: bool
    secrets: Dict[str, str]
    timeout_seconds: Optional[int]


class CreateKeyRequest(TypedDict, total=False):
    """`POST /v1/keys`."""
    expires_at: Optional[str]
    member_id: Optional[str]
    name: str
    scopes: Optional[List[str]]


class CreateMemberRequest(TypedDict):
    """`POST /v1/members`."""
    email: str
    name: str
    role: Role


class CreateSandboxRequest(TypedDict, total=False):
    """`POST /v1/sandboxes`."""
    disk_iops: Optional[int]
    disk_mbps: Optional[int]
    env: Dict[str, str]
    idle_timeout_seconds: Optional[int]
    metadata: Dict[str, str]
    on_host_loss: OnHostLoss
    on_timeout: OnTimeout
    snapshot_id: Optional[str]
    template: str
    ttl_seconds: Optional[int]
    volumes: List[SandboxVolume]


class _CreateScheduleRequestRequired(TypedDict):
    cron: str
    name: str
    target: ScheduleTarget


class CreateScheduleRequest(_CreateScheduleRequestRequired, total=False):
    """`POST /v1/schedules`."""
    concurrency_policy: Optional[ConcurrencyPolicy]
    paused: Optional[bool]
    payload: Any
    retries: Optional[int]
    starting_deadline_seconds: Optional[int]
    timezone: Optional[str]


class _CreateTemplateRequestRequired(TypedDict):
    spec: str


class CreateTemplateRequest(_CreateTemplateRequestRequired, total=False):
    """`POST /v1/templates` with a JSON body: build from a spec (the catalog's TOML format, see
    templates/README.md). An OCI image tarball is sent as the body instead, with
    `Content-Type: application/x-tar` and the fields below as query parameters.
    """
    name: Optional[str]


class CreateVersionRequest(TypedDict, total=False):
    """`POST /v1/functions/{name}/versions`: a new version (the fields given replace the
    function's; the others stay). It goes live once built and its handler imports.
    """
    dependencies: Optional[str]
    env: Optional[Dict[str, str]]
    files: Dict[str, str]
    git: Optional[AppGit]
    handler: Optional[str]
    secrets: Optional[Dict[str, str]]


class _CreateVolumeRequestRequired(TypedDict):
    name: str


class CreateVolumeRequest(_CreateVolumeRequestRequired, total=False):
    """`POST /v1/volumes`: a new empty volume (`size_gb`), or one restored from a volume snapshot
    (`from_snapshot`) or a backup (`from_backup`), grown to `size_gb` when that is given and
    larger.
    """
    from_backup: Optional[str]
    from_snapshot: Optional[str]
    size_gb: Optional[int]


class _CreateWebhookRequestRequired(TypedDict):
    events: List[str]
    url: str


class CreateWebhookRequest(_CreateWebhookRequestRequired, total=False):
    """`POST /v1/webhooks`."""
    secret: Optional[str]


class _KeyRequired(TypedDict):
    admin: bool
    created_at: str
    id: str
    name: str
    prefix: str
    revoked: bool
    scopes: List[str]


class Key(_KeyRequired, total=False):
    """An API key as listed (never with its secret)."""
    expires_at: Optional[str]
    last_used_at: Optional[str]
    member_id: Optional[str]
    role: Optional[Role]


class CreatedKey(Key):
    """A key just created: the secret is shown this once."""
    secret: str


class _DatabaseRequired(TypedDict):
    connection_uri: str
    created_at: str
    host: str
    http_url: str
    id: str
    idle_seconds: int
    memory_mb: int
    name: str
    pooled_uri: str
    size_gb: int
    state: DatabaseState
    user: str
    version: int
    volume: str


class Database(_DatabaseRequired, total=False):
    """A database resource."""
    parent: Optional[str]
    sandbox_id: Optional[str]


class DatabaseExtension(TypedDict):
    """One extension the `postgres` template has."""
    default_version: str
    name: str


class DatabaseExtensions(TypedDict):
    """`GET /v1/databases/extensions`: per PostgreSQL major, what `CREATE EXTENSION` can load."""
    preloaded: List[str]
    versions: Dict[str, List[DatabaseExtension]]


#: Where a database is in its life.
DatabaseState = Literal["creating", "ready", "hibernated", "stopped"]


#: Where a delivery stands.
DeliveryState = Literal["pending", "delivered", "failed"]


class _DeployRequired(TypedDict):
    app: str
    created_at: str
    id: str
    number: int
    phases_ms: Dict[str, int]
    ref: str
    state: DeployState
    updated_at: str


class Deploy(_DeployRequired, total=False):
    """A deploy resource."""
    commit: Optional[str]
    error: Optional[str]
    plan: Optional[Dict[str, Any]]
    sandbox_id: Optional[str]


#: Where a deploy is: `queued → cloning → building → baking → checking → live`, or `failed`
#: at any step. A live deploy that a newer one replaced is `standby` (hibernated, ready for a
#: rollback); `superseded` is a queued deploy a newer one replaced before it ran.
DeployState = Literal["queued", "cloning", "building", "baking", "checking", "live", "standby", "failed", "superseded"]


#: Where a custom domain's TLS certificate comes from, or why it has none.
DomainTls = Literal["none", "files", "pending", "issued", "failed"]


class ErrorBody(TypedDict):
    """The body of [`ErrorEnvelope`]."""
    code: ErrorCode
    message: str
    request_id: str


#: Machine-readable error codes (`error.code`).
ErrorCode = Literal["sandbox_not_found", "template_not_found", "snapshot_not_found", "volume_not_found", "database_not_found", "app_not_found", "key_not_found", "host_not_found", "not_found", "invalid_argument", "invalid_json", "unauthorized", "forbidden", "rate_limited", "conflict", "payload_too_large", "upgrade_required", "sandbox_state", "insufficient_storage", "internal", "unavailable", "port_not_listening", "method_not_allowed", "volume_busy", "quota_exceeded", "limit_reached", "query_failed"]


class ErrorEnvelope(TypedDict):
    """The error envelope of every failed call: `{"error":{"code","message","request_id"}}`."""
    error: ErrorBody


class Event(TypedDict):
    """One event."""
    at: str
    data: Dict[str, Any]
    id: str
    resource: EventResource
    type: str


class EventResource(TypedDict):
    """The resource an event is about."""
    id: str
    kind: str


class _ExecStartFrameRequired(TypedDict):
    id: str


class ExecStartFrame(_ExecStartFrameRequired, total=False):
    """`{"type":"start","id":"c1","cmd":"…"}`: the fields of `POST …/exec` less `stdin`, plus `id`.
    Standard input stays open until `stdin_close`. Without `timeout_seconds` the command runs
    until it exits, is killed, or the socket closes.
    """
    argv: Optional[List[str]]
    cmd: Optional[str]
    cwd: Optional[str]
    env: Dict[str, str]
    timeout_seconds: Optional[int]
    user: Optional[str]


class ExecStdinFrame(TypedDict):
    """`{"type":"stdin","id":"c1","data":"<base64>"}`."""
    data: str
    id: str


class ExecIdFrame(TypedDict):
    """A frame that names only a command: `stdin_close`, `kill`."""
    id: str


class ExecClientFrameStart(ExecStartFrame):
    """Start a command under a client-chosen id (unique among the socket's running commands)."""
    type: Literal["start"]


class ExecClientFrameStdin(ExecStdinFrame):
    """Bytes for the command's standard input."""
    type: Literal["stdin"]


class ExecClientFrameStdinClose(ExecIdFrame):
    """Close the command's standard input (end of file)."""
    type: Literal["stdin_close"]


class ExecClientFrameKill(ExecIdFrame):
    """Kill the command's whole process group (SIGKILL); its `exit` frame follows."""
    type: Literal["kill"]


#: A client → server text frame on `GET …/exec/ws` (JSON).
ExecClientFrame = Union[ExecClientFrameStart, ExecClientFrameStdin, ExecClientFrameStdinClose, ExecClientFrameKill]


class ExecExitFrame(TypedDict):
    """`{"type":"exit","id":"c1","exit_code":0,"timed_out":false,"duration_ms":12}`."""
    duration_ms: int
    exit_code: int
    id: str
    timed_out: bool


class ExecOutputFrame(TypedDict):
    """`{"type":"stdout"|"stderr","id":"c1","data":"<base64>"}`."""
    data: str
    id: str


class ExecRequest(TypedDict, total=False):
    """`POST /v1/sandboxes/{id}/exec` (and `/exec/stream`)."""
    argv: Optional[List[str]]
    cmd: Optional[str]
    cwd: Optional[str]
    env: Dict[str, str]
    stdin: Optional[str]
    timeout_seconds: Optional[int]
    user: Optional[str]


class ExecResult(TypedDict):
    """Result of a blocking exec. A non-zero exit is data, not an error."""
    duration_ms: int
    exit_code: int
    stderr: str
    stdout: str
    timed_out: bool
    truncated: bool


class _StreamErrorFrameRequired(TypedDict):
    code: ErrorCode
    message: str


class StreamErrorFrame(_StreamErrorFrameRequired, total=False):
    """`{"type":"error","id":"c1","code":"invalid_argument","message":"…"}`."""
    id: Optional[str]


class ExecServerFrameStdout(ExecOutputFrame):
    """Output on the command's standard output."""
    type: Literal["stdout"]


class ExecServerFrameStderr(ExecOutputFrame):
    """Output on the command's standard error."""
    type: Literal["stderr"]


class ExecServerFrameExit(ExecExitFrame):
    """The command ended; the last frame for its id (the id may be reused afterwards)."""
    type: Literal["exit"]


class ExecServerFrameError(StreamErrorFrame):
    """A frame could not be honoured (`id` names the command when there is one), or a command
    failed without an exit status (then no `exit` frame follows for it).
    """
    type: Literal["error"]


#: A server → client text frame on `GET …/exec/ws` (JSON).
ExecServerFrame = Union[ExecServerFrameStdout, ExecServerFrameStderr, ExecServerFrameExit, ExecServerFrameError]


class _FileInfoRequired(TypedDict):
    mode: int
    mtime_ms: int
    name: str
    path: str
    size: int
    type: str


class FileInfo(_FileInfoRequired, total=False):
    """A guest file's metadata."""
    symlink_target: Optional[str]


class FileUrl(TypedDict):
    """A signed file URL."""
    expires_at: str
    method: FileUrlMethod
    path: str
    url: str


#: What a signed file URL does: `GET` downloads the file, `PUT` uploads it (replacing it).
FileUrlMethod = Literal["GET", "PUT"]


class _FileUrlRequestRequired(TypedDict):
    path: str


class FileUrlRequest(_FileUrlRequestRequired, total=False):
    """`POST /v1/sandboxes/{id}/files/url`: a URL that downloads or uploads one file of the
    sandbox without an API key, until it expires.
    """
    expires_in: int
    method: FileUrlMethod


class ForkRequest(TypedDict, total=False):
    """`POST /v1/sandboxes/{id}/fork`."""
    count: int
    keep_snapshot: bool
    metadata: Dict[str, str]
    spread: bool


class ForkResponse(TypedDict):
    children: List[Sandbox]
    keep_snapshot: bool
    parent_id: str
    snapshot_id: str


class _FunctionRequired(TypedDict):
    concurrency: int
    created_at: str
    env: Dict[str, str]
    handler: str
    id: str
    idle_seconds: int
    max_instances: int
    memory_mb: int
    name: str
    public: bool
    runtime: FunctionRuntime
    secret_names: List[str]
    timeout_seconds: int
    updated_at: str
    url: str
    warm_instances: int


class Function(_FunctionRequired, total=False):
    """A function resource."""
    live_version: Optional[int]


class FunctionRollbackRequest(TypedDict, total=False):
    """`POST /v1/functions/{name}/rollback`."""
    version: Optional[int]


#: The language a function's handler is written in.
FunctionRuntime = Literal["python", "node"]


class FunctionTarget(TypedDict):
    """`{"type": "function", "name": …}`."""
    name: str


class _FunctionVersionRequired(TypedDict):
    created_at: str
    function: str
    id: str
    phases_ms: Dict[str, int]
    state: DeployState
    updated_at: str
    version: int


class FunctionVersion(_FunctionVersionRequired, total=False):
    """A version of a function: one build. Its `state` is a deploy's (`queued → cloning →
    building → baking → checking → live | failed`, `standby` once replaced).
    """
    error: Optional[str]
    handler: Optional[str]


class _HostRequired(TypedDict):
    capacity: HostCapacity
    created_at: str
    epoch: int
    id: str
    last_seen_at: str
    name: str
    sandboxes: int
    state: HostState
    templates: List[str]


class Host(_HostRequired, total=False):
    """A host: a machine that runs sandboxes."""
    address: Optional[str]
    compat_key: Optional[str]
    lease_expires_at: Optional[str]


class HostCapacity(TypedDict):
    """What a host offers, as its agent last reported it (all 0 until then; the single-node
    server's in-process host reports none).
    """
    creates_in_flight: int
    disk_bytes: int
    free_slots: int
    memory_mib: int
    slots: int
    vcpus: int


#: Whether a host takes work.
HostState = Literal["ready", "draining", "dead"]


class InstanceMetrics(TypedDict):
    """One VM's points, for a resource with several (an app's instances, a function's)."""
    samples: List[MetricPoint]
    sandbox_id: str
    state: str


class _InvocationRequired(TypedDict):
    attempts: int
    cold: bool
    function: str
    status: InvocationStatus
    stderr: str
    stdout: str


class Invocation(_InvocationRequired, total=False):
    """The outcome of a call (`POST …/invoke`, or an asynchronous invocation once finished)."""
    created_at: Optional[str]
    duration_ms: Optional[float]
    error: Optional[InvocationError]
    finished_at: Optional[str]
    id: Optional[str]
    result: Optional[Dict[str, Any]]
    version: Optional[int]


class InvocationError(TypedDict):
    """An exception the handler raised, as data."""
    message: str
    traceback: str
    type: str


#: How a call ended.
InvocationStatus = Literal["queued", "running", "ok", "error", "timeout"]


class _List_AppRequired(TypedDict):
    data: List[App]


class List_App(_List_AppRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_AuditEntryRequired(TypedDict):
    data: List[AuditEntry]


class List_AuditEntry(_List_AuditEntryRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_DatabaseRequired(TypedDict):
    data: List[Database]


class List_Database(_List_DatabaseRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_DeployRequired(TypedDict):
    data: List[Deploy]


class List_Deploy(_List_DeployRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_EventRequired(TypedDict):
    data: List[Event]


class List_Event(_List_EventRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_FileInfoRequired(TypedDict):
    data: List[FileInfo]


class List_FileInfo(_List_FileInfoRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_FunctionRequired(TypedDict):
    data: List[Function]


class List_Function(_List_FunctionRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_FunctionVersionRequired(TypedDict):
    data: List[FunctionVersion]


class List_FunctionVersion(_List_FunctionVersionRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_HostRequired(TypedDict):
    data: List[Host]


class List_Host(_List_HostRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_KeyRequired(TypedDict):
    data: List[Key]


class List_Key(_List_KeyRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_MemberRequired(TypedDict):
    data: List[Member]


class List_Member(_List_MemberRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_SandboxRequired(TypedDict):
    data: List[Sandbox]


class List_Sandbox(_List_SandboxRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_ScheduleRequired(TypedDict):
    data: List[Schedule]


class List_Schedule(_List_ScheduleRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_ScheduleRunRequired(TypedDict):
    data: List[ScheduleRun]


class List_ScheduleRun(_List_ScheduleRunRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_SnapshotRequired(TypedDict):
    data: List[Snapshot]


class List_Snapshot(_List_SnapshotRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_TemplateRequired(TypedDict):
    data: List[Template]


class List_Template(_List_TemplateRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_VolumeRequired(TypedDict):
    data: List[Volume]


class List_Volume(_List_VolumeRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_VolumeBackupRequired(TypedDict):
    data: List[VolumeBackup]


class List_VolumeBackup(_List_VolumeBackupRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_VolumeSnapshotRequired(TypedDict):
    data: List[VolumeSnapshot]


class List_VolumeSnapshot(_List_VolumeSnapshotRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_WebhookRequired(TypedDict):
    data: List[Webhook]


class List_Webhook(_List_WebhookRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class _List_WebhookDeliveryRequired(TypedDict):
    data: List[WebhookDelivery]


class List_WebhookDelivery(_List_WebhookDeliveryRequired, total=False):
    """A page of a list: `{"data":[…],"next_cursor":null|"…"}`."""
    next_cursor: Optional[str]


class LogChunk(TypedDict):
    """`data` of the `log` event of `GET …/logs?follow=1`."""
    data: str


class LogEnd(TypedDict):
    """`data` of the `end` event of `GET …/logs?follow=1`, the last event of the stream."""
    reason: str


class Member(TypedDict):
    """A member of the workspace."""
    active_keys: int
    created_at: str
    email: str
    id: str
    name: str
    role: Role


_MeteredUsageRequired = TypedDict("_MeteredUsageRequired", {"from": 'str', "group_by": 'List[str]', "to": 'str', "totals": 'UsageFigures'})


class MeteredUsage(_MeteredUsageRequired, total=False):
    """Metered usage of the caller's workspace over `[from, to)` (hours are the resolution: `from`
    is rounded down to its hour).
    """
    groups: List[UsageGroup]


class _MetricPointRequired(TypedDict):
    cpu_pct: float
    mem_bytes: int
    pss_bytes: int
    t: str
    vcpus: int


class MetricPoint(_MetricPointRequired, total=False):
    """One point of a resource's use: the readings within `[t, t + step)` of every VM it has."""
    disk_bytes: Optional[int]
    disk_total_bytes: Optional[int]
    mem_available_bytes: Optional[int]
    mem_total_bytes: Optional[int]
    net_rx: Optional[int]
    net_tx: Optional[int]


class _MetricsRequired(TypedDict):
    samples: List[MetricPoint]
    state: str
    step: int


class Metrics(_MetricsRequired, total=False):
    """A resource's use over time. For a sandbox, `state` and the `host_*`/`cpu_time_ms` figures
    are its VM's now (as before this history existed); for an app, a function or a database,
    `samples` sums its VMs, listed one by one in `instances`.
    """
    cpu_time_ms: Optional[int]
    host_pss_bytes: Optional[int]
    host_rss_bytes: Optional[int]
    instances: List[InstanceMetrics]


class MigrateRequest(TypedDict, total=False):
    """`POST /v1/sandboxes/{id}/migrate`."""
    host: Optional[str]


class _MkdirRequestRequired(TypedDict):
    path: str


class MkdirRequest(_MkdirRequestRequired, total=False):
    """`POST …/fs/mkdir`."""
    parents: bool


#: What becomes of a running sandbox when its host is lost (declared dead in a cluster).
OnHostLoss = Literal["lost", "restore"]


#: What happens when a sandbox's TTL or idle timeout expires.
OnTimeout = Literal["kill", "hibernate"]


class PatchSandboxRequest(TypedDict, total=False):
    """`PATCH /v1/sandboxes/{id}`."""
    idle_timeout_seconds: Optional[int]
    metadata: Optional[Dict[str, str]]
    ttl_seconds: Optional[int]


class PatchVolumeRequest(TypedDict):
    """`PATCH /v1/volumes/{name}`: grow (never shrink) a volume no sandbox has mounted."""
    size_gb: int


class PortUpdate(TypedDict):
    """`PATCH /v1/sandboxes/{id}/ports/{port}`."""
    public: bool


class PortUrl(TypedDict):
    """A port's preview URL."""
    port: int
    public: bool
    token: str
    url: str


class PtyClientFrameResize(TypedDict):
    """`{"type":"resize","cols":120,"rows":40}`: new terminal size."""
    cols: int
    rows: int
    type: Literal["resize"]


#: A client → server text frame on `GET …/pty` (binary frames are terminal input).
PtyClientFrame = PtyClientFrameResize


class PtyServerFrameExit(TypedDict):
    """`{"type":"exit","exit_code":0}`: the program ended; the server closes the socket next."""
    exit_code: int
    type: Literal["exit"]


class PtyServerFrameError(StreamErrorFrame):
    """A control frame could not be honoured, or the session failed."""
    type: Literal["error"]


#: A server → client text frame on `GET …/pty` (binary frames are terminal output).
PtyServerFrame = Union[PtyServerFrameExit, PtyServerFrameError]


class QueryField(TypedDict):
    """A result column."""
    data_type_id: int
    name: str


class _QueryRequestRequired(TypedDict):
    sql: str


class QueryRequest(_QueryRequestRequired, total=False):
    """`POST /v1/databases/{id}/query`: one statement, parameters as `$1…` (sent as text; JSON
    numbers and booleans are written as PostgreSQL reads them).
    """
    params: List[Any]
    timeout_ms: Optional[int]


class _QueryResponseRequired(TypedDict):
    command: str
    fields: List[QueryField]
    rows: List[List[Dict[str, Any]]]


class QueryResponse(_QueryResponseRequired, total=False):
    """`POST /v1/databases/{id}/query`'s answer: rows as arrays in field order, values converted
    to JSON (booleans, small integers and floats as numbers, JSON as JSON, arrays as arrays,
    everything else — int8 and numeric included — as PostgreSQL's text).
    """
    row_count: Optional[int]


_RenameRequestRequired = TypedDict("_RenameRequestRequired", {"from": 'str', "to": 'str'})


class RenameRequest(_RenameRequestRequired, total=False):
    """`POST …/fs/rename`."""
    overwrite: bool


class RestoreDatabaseRequest(TypedDict):
    """`POST /v1/databases/{id}/restore`: the database's data as of a past time, in place."""
    to_time: str


#: What a member may do in the workspace.
Role = Literal["owner", "admin", "developer", "viewer"]


class RollbackRequest(TypedDict, total=False):
    """`POST /v1/apps/{name}/rollback`."""
    deploy_id: Optional[str]


#: Where a run stands.
RunState = Literal["queued", "running", "succeeded", "failed", "skipped", "missed", "cancelled"]


#: How a run came about.
RunTrigger = Literal["scheduled", "manual"]


class _SandboxRequired(TypedDict):
    boot_mode: str
    boot_ms: int
    cpu: int
    created_at: str
    host: str
    id: str
    memory_mb: int
    metadata: Dict[str, str]
    on_timeout: OnTimeout
    state: SandboxState
    template: str


class Sandbox(_SandboxRequired, total=False):
    """A sandbox resource."""
    disk_iops: int
    disk_mbps: int
    expires_at: Optional[str]
    idle_timeout_seconds: Optional[int]
    on_host_loss: OnHostLoss
    snapshot_id: Optional[str]
    ttl_seconds: Optional[int]
    volumes: List[SandboxVolume]


class _SandboxExecTargetRequired(TypedDict):
    command: str
    template: str


class SandboxExecTarget(_SandboxExecTargetRequired, total=False):
    """`{"type": "sandbox_exec", …}`."""
    env: Dict[str, str]
    timeout_seconds: int


#: Sandbox lifecycle states on the wire.
SandboxState = Literal["starting", "running", "paused", "hibernated", "stopped", "failed", "lost"]


class SandboxUsage(TypedDict):
    """Sandboxes of a workspace: those not hibernated count against `limit`."""
    creates_per_minute: int
    hibernated: int
    hibernated_limit: int
    limit: int
    running: int


class _SandboxVolumeRequired(TypedDict):
    name: str
    path: str


class SandboxVolume(_SandboxVolumeRequired, total=False):
    """One volume to mount in a new sandbox (`POST /v1/sandboxes` `volumes`)."""
    read_only: bool


class _ScheduleRequired(TypedDict):
    concurrency_policy: ConcurrencyPolicy
    created_at: str
    cron: str
    id: str
    name: str
    paused: bool
    payload: Any
    retries: int
    target: ScheduleTarget
    timezone: str
    updated_at: str


class Schedule(_ScheduleRequired, total=False):
    """A schedule."""
    next_run_at: Optional[str]
    starting_deadline_seconds: Optional[int]


class _ScheduleRunRequired(TypedDict):
    attempt: int
    created_at: str
    due_at: str
    id: str
    schedule: str
    state: RunState
    trigger: RunTrigger


class ScheduleRun(_ScheduleRunRequired, total=False):
    """One run of a schedule."""
    ended_at: Optional[str]
    error: Optional[str]
    exit_code: Optional[int]
    output: Optional[str]
    sandbox_id: Optional[str]
    started_at: Optional[str]


class ScheduleTargetSandboxExec(SandboxExecTarget):
    """A command in a new sandbox of `template`, deleted when the command ends. The schedule's
    `payload` is the environment variable `PANDASTACK_PAYLOAD` (JSON).
    """
    type: Literal["sandbox_exec"]


class ScheduleTargetFunction(FunctionTarget):
    """A call of function `name` of the schedule's workspace; the schedule's `payload` is the
    event. A run succeeds when the handler returns, fails when it raises or times out.
    """
    type: Literal["function"]


#: What a schedule runs at each due time.
ScheduleTarget = Union[ScheduleTargetSandboxExec, ScheduleTargetFunction]


class _SnapshotRequired(TypedDict):
    created_at: str
    id: str
    sandbox_id: str
    size_bytes: int
    template: str


class Snapshot(_SnapshotRequired, total=False):
    """A snapshot resource."""
    durable_at: Optional[str]


class SnapshotUsage(TypedDict):
    """Sandbox snapshots of a workspace."""
    bytes: int
    count: int
    limit: int


class _SqlQueryRequired(TypedDict):
    query: str


class SqlQuery(_SqlQueryRequired, total=False):
    params: List[Dict[str, Any]]


class SqlRequest(TypedDict, total=False):
    """Body of the Neon-compatible `/sql` endpoint: one query, or `queries` run as a transaction."""
    params: List[Dict[str, Any]]
    queries: Optional[List[SqlQuery]]
    query: Optional[str]


class StorageUsage(TypedDict):
    """Host disk a workspace's snapshots, hibernated sandboxes and template builds take together,
    against `quota_gb` (`quota_exceeded`, 507, once it is reached: the size of what a snapshot,
    hibernation or build adds is known only after it exists).
    """
    bytes: int
    hibernated_bytes: int
    quota_gb: int
    snapshot_bytes: int
    template_bytes: int


class _TemplateRequired(TypedDict):
    cpu: int
    description: str
    disk_mb: int
    memory_mb: int
    name: str
    state: str


class Template(_TemplateRequired, total=False):
    """A template this server can create sandboxes from: from the catalog (a spec on the server,
    shared by every workspace) or built by this workspace (`POST /v1/templates`).
    """
    bake_ms: Optional[int]
    build_ms: Optional[int]
    created_at: Optional[str]
    error: Optional[str]
    image_bytes: Optional[int]
    ready_version: Optional[int]
    source: str
    version: Optional[int]


class TemplateUsage(TypedDict):
    """Template builds of a workspace (every version kept, failed ones aside)."""
    builds: int
    bytes: int
    limit: int


class UpdateAppRequest(TypedDict, total=False):
    """`PATCH /v1/apps/{name}`: the fields given replace the app's; the next deploy uses them."""
    build: Optional[AppBuild]
    domains: Optional[List[str]]
    env: Optional[Dict[str, str]]
    git: Optional[AppGit]
    health_path: Optional[str]
    idle_seconds: Optional[int]
    memory_mb: Optional[int]
    min_instances: Optional[int]
    root_dir: Optional[str]
    secrets: Optional[Dict[str, str]]
    start: Optional[AppStart]


class UpdateFunctionRequest(TypedDict, total=False):
    """`PATCH /v1/functions/{name}`: limits and visibility (they apply to the next instance and
    call; no rebuild).
    """
    concurrency: Optional[int]
    idle_seconds: Optional[int]
    max_instances: Optional[int]
    public: Optional[bool]
    timeout_seconds: Optional[int]


class UpdateMemberRequest(TypedDict, total=False):
    """`PATCH /v1/members/{id}`."""
    name: Optional[str]
    role: Optional[Role]


class UpdateScheduleRequest(TypedDict, total=False):
    """`PATCH /v1/schedules/{name}`: the fields given replace the schedule's."""
    concurrency_policy: Optional[ConcurrencyPolicy]
    cron: Optional[str]
    payload: Any
    retries: Optional[int]
    starting_deadline_seconds: Optional[int]
    target: Optional[ScheduleTarget]
    timezone: Optional[str]


class Usage(TypedDict):
    """What a workspace uses against its limits, and what it used over a window (`GET /v1/usage`)."""
    metered: MeteredUsage
    sandboxes: SandboxUsage
    snapshots: SnapshotUsage
    storage: StorageUsage
    templates: TemplateUsage
    volumes: VolumeUsage


class UsageFigures(TypedDict):
    """What was used. Times are of running VMs (from their readings), storage of what was kept."""
    database_seconds: float
    egress_bytes: int
    ingress_bytes: int
    invocation_seconds: float
    invocations: int
    memory_gib_seconds: float
    storage_gib_hours: float
    vcpu_seconds: float


class _UsageGroupRequired(TypedDict):
    usage: UsageFigures


class UsageGroup(_UsageGroupRequired, total=False):
    """The usage of one group: its key (the dimensions grouped by) and figures."""
    kind: Optional[str]
    resource_id: Optional[str]
    start: Optional[str]


class _VolumeRequired(TypedDict):
    attachments: List[VolumeAttachment]
    created_at: str
    host: str
    id: str
    name: str
    size_gb: int


class Volume(_VolumeRequired, total=False):
    """A volume resource."""
    attached_to: Optional[str]
    source: Optional[str]
    state: VolumeState


class VolumeAttachment(TypedDict):
    """A sandbox that has a volume mounted."""
    path: str
    read_only: bool
    sandbox_id: str


class _VolumeBackupRequired(TypedDict):
    created_at: str
    id: str
    size_gb: int
    state: BackupState
    volume: str


class VolumeBackup(_VolumeBackupRequired, total=False):
    """A volume backup: a snapshot of the volume uploaded to the object store (only the chunks
    not stored already).
    """
    bytes_uploaded: Optional[int]
    chunks: Optional[int]
    error: Optional[str]
    finished_at: Optional[str]


class VolumeSnapshot(TypedDict):
    """A volume snapshot: the volume's content as of one instant, on the volume's host."""
    created_at: str
    frozen: bool
    id: str
    size_gb: int
    volume: str


#: Whether a volume can be used.
VolumeState = Literal["ready", "unavailable"]


class VolumeUsage(TypedDict):
    """Volumes of a workspace: their total size counts against `quota_gb`."""
    count: int
    quota_gb: int
    size_gb: int
    snapshots: int


class WatchFrameReady(TypedDict):
    """The watch is armed: every change after this is told. Sent again after the sandbox woke
    from a hibernation (the watch re-armed): changes while it slept are not told.
    """
    path: str
    recursive: bool
    type: Literal["ready"]


class WatchFrameCreate(TypedDict):
    """A file or directory appeared (made, or moved in from outside the watched tree)."""
    dir: bool
    path: str
    type: Literal["create"]


class WatchFrameModify(TypedDict):
    """A file's contents changed (repeated writes close together are told once)."""
    dir: bool
    path: str
    type: Literal["modify"]


class WatchFrameDelete(TypedDict):
    """A file or directory went away (deleted, or moved out of the watched tree)."""
    dir: bool
    path: str
    type: Literal["delete"]


_WatchFrameRenameRequired = TypedDict("_WatchFrameRenameRequired", {"dir": 'bool', "from": 'str', "path": 'str', "type": 'Literal["rename"]'})


class WatchFrameRename(_WatchFrameRenameRequired):
    """`from` was renamed to `path`, both in the watched tree."""


class WatchFrameOverflow(TypedDict):
    """Changes were dropped (too many at once for the watcher or its reader): what is under
    `path` may have changed in ways not told; list it again if that matters.
    """
    path: str
    type: Literal["overflow"]


class WatchFrameError(StreamErrorFrame):
    """The watch ended with an error (the directory went away, the sandbox was deleted); the
    last message.
    """
    type: Literal["error"]


#: One message of `GET …/files/watch` (an SSE event named by its `type`, or a WebSocket text
#: frame). Paths are absolute guest paths.
WatchFrame = Union[WatchFrameReady, WatchFrameCreate, WatchFrameModify, WatchFrameDelete, WatchFrameRename, WatchFrameOverflow, WatchFrameError]


class _WebhookRequired(TypedDict):
    created_at: str
    events: List[str]
    id: str
    url: str


class Webhook(_WebhookRequired, total=False):
    """A webhook endpoint."""
    secret: Optional[str]


class _WebhookDeliveryRequired(TypedDict):
    attempts: int
    created_at: str
    event_id: str
    event_type: str
    id: str
    state: DeliveryState
    webhook_id: str


class WebhookDelivery(_WebhookDeliveryRequired, total=False):
    """One event's delivery to one webhook."""
    delivered_at: Optional[str]
    last_attempt_at: Optional[str]
    last_error: Optional[str]
    last_status: Optional[int]
    next_attempt_at: Optional[str]


class _WebhookResultRequired(TypedDict):
    status: str


class WebhookResult(_WebhookResultRequired, total=False):
    """Answer of a webhook delivery."""
    deploy_id: Optional[str]
    reason: Optional[str]


#: Every schema of the document, by name.
SCHEMAS = {
    "App": App,
    "AppBuild": AppBuild,
    "AppDomain": AppDomain,
    "AppGit": AppGit,
    "AppStart": AppStart,
    "AuditEntry": AuditEntry,
    "BackupState": BackupState,
    "CodeContext": CodeContext,
    "CodeContextRequest": CodeContextRequest,
    "CodeError": CodeError,
    "CodeOutput": CodeOutput,
    "CodeRequest": CodeRequest,
    "CodeResult": CodeResult,
    "ConcurrencyPolicy": ConcurrencyPolicy,
    "CreateAppRequest": CreateAppRequest,
    "CreateBranchRequest": CreateBranchRequest,
    "CreateDatabaseRequest": CreateDatabaseRequest,
    "CreateDeployRequest": CreateDeployRequest,
    "CreateFunctionRequest": CreateFunctionRequest,
    "CreateKeyRequest": CreateKeyRequest,
    "CreateMemberRequest": CreateMemberRequest,
    "CreateSandboxRequest": CreateSandboxRequest,
    "CreateScheduleRequest": CreateScheduleRequest,
    "CreateTemplateRequest": CreateTemplateRequest,
    "CreateVersionRequest": CreateVersionRequest,
    "CreateVolumeRequest": CreateVolumeRequest,
    "CreateWebhookRequest": CreateWebhookRequest,
    "CreatedKey": CreatedKey,
    "Database": Database,
    "DatabaseExtension": DatabaseExtension,
    "DatabaseExtensions": DatabaseExtensions,
    "DatabaseState": DatabaseState,
    "DeliveryState": DeliveryState,
    "Deploy": Deploy,
    "DeployState": DeployState,
    "DomainTls": DomainTls,
    "ErrorBody": ErrorBody,
    "ErrorCode": ErrorCode,
    "ErrorEnvelope": ErrorEnvelope,
    "Event": Event,
    "EventResource": EventResource,
    "ExecClientFrame": ExecClientFrame,
    "ExecExitFrame": ExecExitFrame,
    "ExecIdFrame": ExecIdFrame,
    "ExecOutputFrame": ExecOutputFrame,
    "ExecRequest": ExecRequest,
    "ExecResult": ExecResult,
    "ExecServerFrame": ExecServerFrame,
    "ExecStartFrame": ExecStartFrame,
    "ExecStdinFrame": ExecStdinFrame,
    "FileInfo": FileInfo,
    "FileUrl": FileUrl,
    "FileUrlMethod": FileUrlMethod,
    "FileUrlRequest": FileUrlRequest,
    "ForkRequest": ForkRequest,
    "ForkResponse": ForkResponse,
    "Function": Function,
    "FunctionRollbackRequest": FunctionRollbackRequest,
    "FunctionRuntime": FunctionRuntime,
    "FunctionTarget": FunctionTarget,
    "FunctionVersion": FunctionVersion,
    "Host": Host,
    "HostCapacity": HostCapacity,
    "HostState": HostState,
    "InstanceMetrics": InstanceMetrics,
    "Invocation": Invocation,
    "InvocationError": InvocationError,
    "InvocationStatus": InvocationStatus,
    "Key": Key,
    "List_App": List_App,
    "List_AuditEntry": List_AuditEntry,
    "List_Database": List_Database,
    "List_Deploy": List_Deploy,
    "List_Event": List_Event,
    "List_FileInfo": List_FileInfo,
    "List_Function": List_Function,
    "List_FunctionVersion": List_FunctionVersion,
    "List_Host": List_Host,
    "List_Key": List_Key,
    "List_Member": List_Member,
    "List_Sandbox": List_Sandbox,
    "List_Schedule": List_Schedule,
    "List_ScheduleRun": List_ScheduleRun,
    "List_Snapshot": List_Snapshot,
    "List_Template": List_Template,
    "List_Volume": List_Volume,
    "List_VolumeBackup": List_VolumeBackup,
    "List_VolumeSnapshot": List_VolumeSnapshot,
    "List_Webhook": List_Webhook,
    "List_WebhookDelivery": List_WebhookDelivery,
    "LogChunk": LogChunk,
    "LogEnd": LogEnd,
    "Member": Member,
    "MeteredUsage": MeteredUsage,
    "MetricPoint": MetricPoint,
    "Metrics": Metrics,
    "MigrateRequest": MigrateRequest,
    "MkdirRequest": MkdirRequest,
    "OnHostLoss": OnHostLoss,
    "OnTimeout": OnTimeout,
    "PatchSandboxRequest": PatchSandboxRequest,
    "PatchVolumeRequest": PatchVolumeRequest,
    "PortUpdate": PortUpdate,
    "PortUrl": PortUrl,
    "PtyClientFrame": PtyClientFrame,
    "PtyServerFrame": PtyServerFrame,
    "QueryField": QueryField,
    "QueryRequest": QueryRequest,
    "QueryResponse": QueryResponse,
    "RenameRequest": RenameRequest,
    "RestoreDatabaseRequest": RestoreDatabaseRequest,
    "Role": Role,
    "RollbackRequest": RollbackRequest,
    "RunState": RunState,
    "RunTrigger": RunTrigger,
    "Sandbox": Sandbox,
    "SandboxExecTarget": SandboxExecTarget,
    "SandboxState": SandboxState,
    "SandboxUsage": SandboxUsage,
    "SandboxVolume": SandboxVolume,
    "Schedule": Schedule,
    "ScheduleRun": ScheduleRun,
    "ScheduleTarget": ScheduleTarget,
    "Snapshot": Snapshot,
    "SnapshotUsage": SnapshotUsage,
    "SqlQuery": SqlQuery,
    "SqlRequest": SqlRequest,
    "StorageUsage": StorageUsage,
    "StreamErrorFrame": StreamErrorFrame,
    "Template": Template,
    "TemplateUsage": TemplateUsage,
    "UpdateAppRequest": UpdateAppRequest,
    "UpdateFunctionRequest": UpdateFunctionRequest,
    "UpdateMemberRequest": UpdateMemberRequest,
    "UpdateScheduleRequest": UpdateScheduleRequest,
    "Usage": Usage,
    "UsageFigures": UsageFigures,
    "UsageGroup": UsageGroup,
    "Volume": Volume,
    "VolumeAttachment": VolumeAttachment,
    "VolumeBackup": VolumeBackup,
    "VolumeSnapshot": VolumeSnapshot,
    "VolumeState": VolumeState,
    "VolumeUsage": VolumeUsage,
    "WatchFrame": WatchFrame,
    "Webhook": Webhook,
    "WebhookDelivery": WebhookDelivery,
    "WebhookResult": WebhookResult,
}
