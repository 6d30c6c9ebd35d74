"""The Python SDK's wire types against the server's committed OpenAPI document
(``crates/pandastack-api/openapi.json``), offline.

For each response schema the SDK models (``PAIRS``): the dataclass has exactly the schema's
fields (plus ``raw``), each of a compatible type; a field the server may send as ``null`` is
``Optional``; a field the server may leave out has a default; and ``from_json`` of a sample
built from the schema reads every field from the right key. A field whose schema is another
modelled schema (``App.git`` is an ``AppGit``; ``Schedule.target``, a tagged union, is its
first variant, a ``SandboxExecTarget``) is that schema's SDK type, read with its
``from_json``. Every other schema of the document must be named in ``NOT_MODELLED`` with the
reason, so a new schema is a decision, not a gap.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from typing import Any, Dict, Tuple

import pytest

from pandastack.types import (
    APIKey,
    AuditEntry,
    App,
    AppBuild,
    AppDomain,
    AppGit,
    AppStart,
    CodeContext,
    Database,
    DatabaseExtension,
    DatabaseExtensions,
    Deploy,
    Event,
    EventResource,
    ExecResult,
    FileInfo,
    FileUrl,
    Function,
    FunctionTarget,
    FunctionVersion,
    Host,
    HostCapacity,
    Member,
    InstanceMetrics,
    Invocation,
    InvocationError,
    MetricPoint,
    Metrics,
    PortUrl,
    QueryField,
    QueryResult,
    SandboxExecTarget,
    SandboxInfo,
    Schedule,
    ScheduleRun,
    Snapshot,
    Template,
    Volume,
    VolumeAttachment,
    VolumeBackup,
    VolumeMount,
    VolumeSnapshot,
    Webhook,
    WebhookDelivery,
)

pytestmark = pytest.mark.offline

OPENAPI = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "crates", "pandastack-api", "openapi.json"
)

#: Response schema -> the SDK type that models it.
PAIRS: Dict[str, type] = {
    "Sandbox": SandboxInfo,
    "ExecResult": ExecResult,
    "FileInfo": FileInfo,
    "FileUrl": FileUrl,
    "Snapshot": Snapshot,
    "Template": Template,
    "Key": APIKey,
    "Member": Member,
    "AuditEntry": AuditEntry,
    "CodeContext": CodeContext,
    "PortUrl": PortUrl,
    "Volume": Volume,
    "VolumeAttachment": VolumeAttachment,
    "VolumeSnapshot": VolumeSnapshot,
    "VolumeBackup": VolumeBackup,
    # Also the `volumes` entries of a create request (VolumeMount.to_json).
    "SandboxVolume": VolumeMount,
    "Database": Database,
    "QueryField": QueryField,
    "QueryResponse": QueryResult,
    "DatabaseExtension": DatabaseExtension,
    "DatabaseExtensions": DatabaseExtensions,
    "App": App,
    # Also the `git`, `build` and `start` of create and update requests (to_json).
    "AppGit": AppGit,
    "AppBuild": AppBuild,
    "AppStart": AppStart,
    "AppDomain": AppDomain,
    "Deploy": Deploy,
    "Function": Function,
    "FunctionVersion": FunctionVersion,
    "Invocation": Invocation,
    "InvocationError": InvocationError,
    "Schedule": Schedule,
    "ScheduleRun": ScheduleRun,
    # Also the `target` of schedule requests (their to_json adds the `type`).
    "SandboxExecTarget": SandboxExecTarget,
    "FunctionTarget": FunctionTarget,
    # The operator routes (/v1/hosts, admin keys).
    "Host": Host,
    "HostCapacity": HostCapacity,
    # GET /v1/{sandboxes,databases,apps,functions}/{id}/metrics.
    "Metrics": Metrics,
    "MetricPoint": MetricPoint,
    "InstanceMetrics": InstanceMetrics,
    # client.events and client.webhooks.
    "Event": Event,
    "EventResource": EventResource,
    # Also what webhooks.create returns (with `secret`, which listings leave out).
    "Webhook": Webhook,
    "WebhookDelivery": WebhookDelivery,
}

#: Schemas the SDK does not model as a type, and why.
NOT_MODELLED: Dict[str, str] = {
    # Request bodies: the SDK builds them as dicts from keyword arguments.
    "CodeContextRequest": "request body",
    "CodeRequest": "request body",
    "CreateKeyRequest": "request body",
    "CreateSandboxRequest": "request body",
    "CreateTemplateRequest": "request body",
    "ExecRequest": "request body",
    "ForkRequest": "request body",
    "MigrateRequest": "request body",
    "MkdirRequest": "request body",
    "FileUrlRequest": "request body",
    "FileUrlMethod": "a string enum (the `method` of FileUrl and FileUrlRequest)",
    "PatchSandboxRequest": "request body",
    "RenameRequest": "request body",
    "PortUpdate": "request body",
    "CreateVolumeRequest": "request body",
    "PatchVolumeRequest": "request body",
    "CreateDatabaseRequest": "request body",
    "CreateBranchRequest": "request body",
    "RestoreDatabaseRequest": "request body",
    "QueryRequest": "request body",
    # The Neon-compatible `POST /v1/databases/{id}/sql` is for Neon's drivers, not this SDK.
    "SqlRequest": "request body of the Neon-compatible /sql endpoint (Neon's drivers)",
    "SqlQuery": "request body of the Neon-compatible /sql endpoint (Neon's drivers)",
    "WebhookResult": "answer to git hosts' webhooks, not to SDK calls",
    "CreateAppRequest": "request body",
    "UpdateAppRequest": "request body",
    "CreateDeployRequest": "request body",
    "RollbackRequest": "request body",
    "CreateFunctionRequest": "request body",
    "CreateVersionRequest": "request body",
    "UpdateFunctionRequest": "request body",
    "FunctionRollbackRequest": "request body",
    "CreateScheduleRequest": "request body",
    "UpdateScheduleRequest": "request body",
    "CreateWebhookRequest": "request body (webhooks.create's arguments)",
    "CreateMemberRequest": "request body (members.create's arguments)",
    "UpdateMemberRequest": "request body (members.update's arguments)",
    # Envelopes the SDK unwraps.
    "ErrorBody": "raised as PandaStackError subclasses",
    "ErrorEnvelope": "raised as PandaStackError subclasses",
    "ErrorCode": "PandaStackError.code is the string",
    "List_FileInfo": "unwrapped into lists / Page",
    "List_Key": "unwrapped into lists / Page",
    "List_Sandbox": "unwrapped into lists / Page",
    "List_Snapshot": "unwrapped into lists / Page",
    "List_Template": "unwrapped into lists / Page",
    "List_Volume": "unwrapped into lists / Page",
    "List_VolumeSnapshot": "unwrapped into lists / Page",
    "List_VolumeBackup": "unwrapped into lists / Page",
    "List_Database": "unwrapped into lists / Page",
    "List_App": "unwrapped into lists / Page",
    "List_Deploy": "unwrapped into lists / Page",
    "List_Function": "unwrapped into lists / Page",
    "List_FunctionVersion": "unwrapped into lists / Page",
    "List_Schedule": "unwrapped into lists / Page",
    "List_ScheduleRun": "unwrapped into lists / Page",
    "List_Host": "unwrapped into lists",
    "List_Event": "unwrapped into lists / Page",
    "List_Webhook": "unwrapped into lists / Page",
    "List_WebhookDelivery": "unwrapped into lists / Page",
    "List_Member": "unwrapped into lists",
    "List_AuditEntry": "unwrapped into lists / Page",
    "ForkResponse": "unwrapped into Sandbox objects",
    # GET /v1/usage: client.usage() returns the answer as the server sends it (a dict typed by
    # _wire.Usage), not a model of its own.
    "Usage": "client.usage() returns the wire dict (_wire.Usage)",
    "SandboxUsage": "part of the wire dict client.usage() returns",
    "VolumeUsage": "part of the wire dict client.usage() returns",
    "SnapshotUsage": "part of the wire dict client.usage() returns",
    "TemplateUsage": "part of the wire dict client.usage() returns",
    "StorageUsage": "part of the wire dict client.usage() returns",
    "MeteredUsage": "part of the wire dict client.usage() returns",
    "UsageFigures": "part of the wire dict client.usage() returns",
    "UsageGroup": "part of the wire dict client.usage() returns",
    # A tagged union: Schedule.target is the SDK type of its `type` (SandboxExecTarget, ...).
    "ScheduleTarget": "Schedule.target is a SandboxExecTarget or a FunctionTarget, by its `type`",
    "CreatedKey": "CreatedAPIKey = Key + secret (allOf)",
    # Streams: decoded into events, not returned as these objects.
    "CodeResult": "decoded into Execution (results, logs, error)",
    "CodeOutput": "decoded into Result",
    "CodeError": "decoded into ExecutionError",
    "ExecClientFrame": "WebSocket frame",
    "ExecServerFrame": "WebSocket frame",
    "ExecExitFrame": "WebSocket frame",
    "ExecIdFrame": "WebSocket frame",
    "ExecOutputFrame": "WebSocket frame",
    "ExecStartFrame": "WebSocket frame",
    "ExecStdinFrame": "WebSocket frame",
    "PtyClientFrame": "WebSocket frame",
    "PtyServerFrame": "WebSocket frame",
    "StreamErrorFrame": "WebSocket frame",
    "LogChunk": "SSE event of logs_stream",
    "LogEnd": "SSE event of logs_stream",
    "WatchFrame": "SSE event of files.watch, decoded into WatchEvent (an error raised)",
    # Enums the SDK keeps as strings.
    "OnTimeout": "a str field",
    "OnHostLoss": "a str field",
    "VolumeState": "a str field",
    "SandboxState": "a str field",
    "BackupState": "a str field (VolumeBackup.state)",
    "DatabaseState": "a str field (Database.state)",
    "DeployState": "a str field (Deploy.state)",
    "DomainTls": "AppDomain.tls is the string",
    "FunctionRuntime": "a str field (Function.runtime)",
    "InvocationStatus": "a str field (Invocation.status)",
    "ConcurrencyPolicy": "a str field (Schedule.concurrency_policy)",
    "RunState": "a str field (ScheduleRun.state)",
    "RunTrigger": "a str field (ScheduleRun.trigger)",
    "HostState": "a str field (Host.state)",
    "DeliveryState": "a str field (WebhookDelivery.state; the DeliveryState Literal)",
    "Role": "a str field (Member.role, APIKey.role; the Role Literal)",
}


def _doc() -> Dict[str, Any]:
    with open(OPENAPI, encoding="utf-8") as f:
        return json.load(f)


def _schemas() -> Dict[str, Any]:
    return _doc()["components"]["schemas"]


def _resolve(s: Dict[str, Any]) -> Dict[str, Any]:
    ref = s.get("$ref")
    if ref:
        return _schemas()[ref.rsplit("/", 1)[1]]
    return s


def _ref(prop: Dict[str, Any]) -> Any:
    """The name of the schema a property is (``$ref``, also as the one non-null alternative of
    ``oneOf``/``anyOf`` or the first of ``allOf``), else ``None``. A reference to a union that is
    not modelled itself (a tagged enum: ``ScheduleTarget``) is the schema of its first variant."""
    for key in ("oneOf", "anyOf", "allOf"):
        alts = [a for a in prop.get(key, []) if a.get("type") != "null"]
        if alts:
            prop = alts[0]
    ref = prop.get("$ref")
    if not ref:
        return None
    name = ref.rsplit("/", 1)[1]
    target = _schemas()[name]
    if name not in PAIRS and any(k in target for k in ("oneOf", "anyOf", "allOf")):
        return _ref(target) or name
    return name


def _modelled(prop: Dict[str, Any]) -> Any:
    """The modelled schema (in ``PAIRS``) an object property is, else ``None``."""
    name = _ref(prop)
    return name if name in PAIRS and _kind(prop)[0] == "object" else None


def _kind(prop: Dict[str, Any]) -> Tuple[str, bool]:
    """The JSON type of a property and whether it may be null."""
    prop = _resolve(dict(prop))
    nullable = False
    while True:  # through references to unions (a tagged enum is a oneOf of allOfs)
        for key in ("oneOf", "anyOf"):
            if key in prop:
                alts = [a for a in prop[key] if a.get("type") != "null"]
                nullable = nullable or len(alts) < len(prop[key])
                prop = _resolve(alts[0]) if alts else {"type": "null"}
        if "allOf" not in prop:
            break
        prop = _resolve(prop["allOf"][0])
    t = prop.get("type", "object" if "properties" in prop or "additionalProperties" in prop else "string")
    if isinstance(t, list):
        nullable = nullable or "null" in t
        t = [x for x in t if x != "null"][0]
    if "enum" in prop:
        t = "string"
    return t, nullable


def _sample(name: str, t: str, i: int) -> Any:
    return {
        "string": f"{name}-value",
        "integer": 1000 + i,
        "number": 1000.5 + i,
        "boolean": True,
        "array": [],
        "object": {"k": f"{name}-v"},
    }[t]


def sample_of(schema_name: str) -> Dict[str, Any]:
    """A wire object of the schema with every property set, each to a value of its own: a
    modelled schema's property to a sample of that schema, a map's to ``{"k": <a value of the
    map's value type>}``."""
    props = _resolve(_schemas()[schema_name]).get("properties", {})
    out: Dict[str, Any] = {}
    for i, (name, prop) in enumerate(sorted(props.items())):
        t, _ = _kind(prop)
        nested = _modelled(prop)
        extra = _resolve(prop).get("additionalProperties")
        if nested is not None:
            out[name] = sample_of(nested)
        elif t == "object" and isinstance(extra, dict) and extra:
            out[name] = {"k": _sample(name, _kind(extra)[0], i)}
        else:
            out[name] = _sample(name, t, i)
    return out


PY_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


def _base(annotation: Any) -> Tuple[Any, bool]:
    """The annotation without Optional, and whether it allowed None."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Union and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return annotation, False


def check(schema_name: str, cls: type) -> list:
    """Every mismatch between `schema_name` and `cls`, as readable lines."""
    schema = _resolve(_schemas()[schema_name])
    props: Dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "raw"}
    where = f"{schema_name} / {cls.__name__}"
    problems = []
    for missing in sorted(set(props) - set(fields)):
        problems.append(f"{where}: the server sends `{missing}`, the SDK type has no such field")
    for extra in sorted(set(fields) - set(props)):
        problems.append(f"{where}: the SDK field `{extra}` is not in the server's schema")
    sample = sample_of(schema_name)
    expected = dict(sample)
    for name, prop in sorted(props.items()):
        t, nullable = _kind(prop)
        if name not in fields:
            continue
        ann, optional = _base(hints[name])
        origin = typing.get_origin(ann) or ann
        want = PY_TYPES[t]
        ok = origin is want or (want is float and origin in (int, float)) or ann is Any
        nested = _modelled(prop)
        if nested is not None and ann is PAIRS[nested]:
            ok = True
            expected[name] = PAIRS[nested].from_json(sample[name])
        if not ok:
            problems.append(f"{where}: `{name}` is {t} on the wire but {ann!r} in the SDK")
        if nullable and not optional:
            problems.append(f"{where}: `{name}` may be null on the wire but is not Optional in the SDK")
        f = fields[name]
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if name not in required and not has_default:
            problems.append(f"{where}: `{name}` may be absent on the wire but has no default in the SDK")
    if not problems:
        parsed = cls.from_json(sample)
        for name, value in expected.items():
            got = getattr(parsed, name)
            if got != value:
                problems.append(f"{where}: from_json read `{name}` as {got!r}, the wire had {value!r}")
    return problems


@pytest.mark.parametrize("schema_name", sorted(PAIRS))
def test_sdk_type_matches_the_schema(schema_name: str) -> None:
    problems = check(schema_name, PAIRS[schema_name])
    assert not problems, "\n".join(problems)


def test_every_schema_is_modelled_or_explained() -> None:
    names = set(_schemas())
    unaccounted = sorted(names - set(PAIRS) - set(NOT_MODELLED))
    stale = sorted((set(PAIRS) | set(NOT_MODELLED)) - names)
    assert not unaccounted, f"schemas the SDK neither models nor explains: {unaccounted}"
    assert not stale, f"names in PAIRS/NOT_MODELLED the document no longer has: {stale}"


def test_the_check_sees_drift() -> None:
    """A field added on either side is reported (the check can fail)."""

    @dataclasses.dataclass
    class Short:
        url: str
        port: int
        public: bool

        @classmethod
        def from_json(cls, d: Any) -> "Short":
            return cls(url=d["url"], port=d["port"], public=d["public"])

    assert any("`token`" in p for p in check("PortUrl", Short))

    @dataclasses.dataclass
    class Long(PortUrl):
        extra: str = ""

    assert any("`extra`" in p for p in check("PortUrl", Long))

    @dataclasses.dataclass
    class Swapped:
        url: str
        port: int
        public: bool
        token: str

        @classmethod
        def from_json(cls, d: Any) -> "Swapped":
            return cls(url=d["token"], port=d["port"], public=d["public"], token=d["url"])

    assert any("read `url`" in p for p in check("PortUrl", Swapped))

    @dataclasses.dataclass
    class Crossed(App):
        @classmethod
        def from_json(cls, d: Any) -> "Crossed":
            a = App.from_json({**d, "build": d["start"], "start": d["build"]})
            return cls(**{f.name: getattr(a, f.name) for f in dataclasses.fields(App)})

    assert any("read `build`" in p for p in check("App", Crossed)), "a nested object from the wrong key"

    @dataclasses.dataclass
    class Untyped(App):
        git: str = ""  # type: ignore[assignment]

    assert any("`git` is object" in p for p in check("App", Untyped))
