"""The SDK's public data objects against the generated wire types (``pandastack._wire``, from
``crates/pandastack-api/openapi.json`` by ``scripts/gen-python-wire.py``), offline.

- ``_wire.py`` is what the generator makes of the committed document (CI also runs
  ``scripts/gen-python-wire.py --check``).
- Every dataclass of :mod:`pandastack.types` with a ``from_json`` reads a wire type: its
  ``from_json`` starts with ``w = _cast("_wire.<Schema>", d)`` (which a type checker uses to
  check the keys read) or the class is in ``NOT_WIRE`` with the reason.
- Its fields (``raw`` aside) are the schema's properties, name for name, except the ones in
  ``FIELD_EXCEPTIONS`` (with the reason); ``from_json`` reads no key the schema lacks.
- Every string-enum ``Literal`` alias of :mod:`pandastack.types` (``SandboxState``...) has the
  values of the schema of the same name, in the same order.
- The request bodies the SDK builds (``_base``'s builders, all arguments given) carry only
  fields of their request schema.

``tests/test_contract.py`` checks more about the response types (field types, optionality,
from_json reading each field from the right key); this one ties them to ``_wire``.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
import json
import os
import typing
from typing import Any, Dict, List, Set, Tuple

import pytest

from pandastack import _base as b
from pandastack import _wire
from pandastack import types as t

pytestmark = pytest.mark.offline

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
OPENAPI = os.path.join(ROOT, "crates", "pandastack-api", "openapi.json")
GENERATOR = os.path.join(ROOT, "scripts", "gen-python-wire.py")

#: Dataclasses of pandastack.types with a from_json that read no schema, and why.
NOT_WIRE: Dict[str, str] = {
    "WriteInfo": "built from the file-write answer, which the document does not name as a schema",
    "WatchEvent": "one class for the variants of the WatchFrame union (its `type` says which); "
    "the error variant is raised as StreamError, never built",
}

#: (class, field) pairs allowed to differ from the schema (a field only the SDK has, or a
#: schema property the SDK leaves in ``raw``), and why. Empty: every type mirrors its schema.
FIELD_EXCEPTIONS: Dict[Tuple[str, str], str] = {}

#: Literal aliases of pandastack.types that are not a schema's enum, and why.
LITERAL_EXCEPTIONS: Dict[str, str] = {}


def _schemas() -> Dict[str, Any]:
    with open(OPENAPI, encoding="utf-8") as f:
        return json.load(f)["components"]["schemas"]


def _keys(td: Any) -> Set[str]:
    """The keys of a TypedDict of _wire (its bases' included)."""
    return set(typing.get_type_hints(td))


def _from_json_reads() -> Dict[str, Tuple[str, Set[str]]]:
    """For each class of types.py whose from_json casts its argument to a _wire type: that
    type's name and the keys from_json reads from it (``w.get("k")``, ``w["k"]``)."""
    tree = ast.parse(inspect.getsource(t))
    out: Dict[str, Tuple[str, Set[str]]] = {}
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for fn in cls.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name == "from_json"):
                continue
            schema = None
            keys: Set[str] = set()
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "_cast"
                    and isinstance(node.args[0], ast.Constant)
                    and str(node.args[0].value).startswith("_wire.")
                ):
                    schema = str(node.args[0].value)[len("_wire."):]
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "get"
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "w"
                ):
                    keys.add(node.args[0].value)  # type: ignore[attr-defined]
                if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "w":
                    keys.add(node.slice.value)  # type: ignore[attr-defined]
            if schema is not None:
                out[cls.name] = (schema, keys)
    return out


READS = _from_json_reads()


def _dataclasses_with_from_json() -> List[str]:
    return sorted(
        n
        for n, o in vars(t).items()
        if inspect.isclass(o) and o.__module__ == t.__name__ and dataclasses.is_dataclass(o) and "from_json" in vars(o)
    )


def test_wire_module_is_fresh() -> None:
    spec = importlib.util.spec_from_file_location("gen_python_wire", GENERATOR)
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    with open(_wire.__file__, encoding="utf-8") as f:
        committed = f.read()
    assert committed == gen.generate(), "_wire.py is stale: run `python3 scripts/gen-python-wire.py`"
    assert list(_wire.SCHEMAS) == list(_schemas())


def test_every_data_object_reads_a_wire_type_or_says_why() -> None:
    classes = _dataclasses_with_from_json()
    unaccounted = [n for n in classes if n not in READS and n not in NOT_WIRE]
    assert not unaccounted, f"from_json without `w = _cast(\"_wire.<Schema>\", d)` nor a NOT_WIRE entry: {unaccounted}"
    stale = sorted((set(NOT_WIRE) & set(READS)) | (set(NOT_WIRE) - set(classes)))
    assert not stale, f"stale NOT_WIRE entries: {stale}"
    unknown = {n: s for n, (s, _) in READS.items() if s not in _wire.SCHEMAS}
    assert not unknown, f"from_json casts to types _wire does not have: {unknown}"


@pytest.mark.parametrize("cls_name", sorted(READS))
def test_fields_are_the_schema_properties(cls_name: str) -> None:
    schema, read = READS[cls_name]
    cls = getattr(t, cls_name)
    props = _keys(_wire.SCHEMAS[schema])
    fields = {f.name for f in dataclasses.fields(cls)} - {"raw"}
    allowed = {f for (c, f) in FIELD_EXCEPTIONS if c == cls_name}
    problems = []
    for name in sorted((props - fields) - allowed):
        problems.append(f"{cls_name} ({schema}): the server sends `{name}`, the dataclass has no such field")
    for name in sorted((fields - props) - allowed):
        problems.append(f"{cls_name} ({schema}): the field `{name}` is not in the schema")
    for name in sorted(read - props):
        problems.append(f"{cls_name}.from_json reads `{name}`, which {schema} does not have")
    assert not problems, "\n".join(problems)


def _literal_aliases() -> Dict[str, Tuple[Any, ...]]:
    return {
        n: typing.get_args(o)
        for n, o in vars(t).items()
        if not n.startswith("_") and typing.get_origin(o) is typing.Literal
    }


def test_there_are_enum_literals() -> None:
    assert "SandboxState" in _literal_aliases()


@pytest.mark.parametrize("alias", sorted(_literal_aliases()))
def test_enum_literal_is_the_schema_enum(alias: str) -> None:
    if alias in LITERAL_EXCEPTIONS:
        return
    schemas = _schemas()
    assert alias in schemas, f"types.{alias} is a Literal but the document has no schema {alias}"
    values = _literal_aliases()[alias]
    assert list(values) == schemas[alias].get("enum"), f"types.{alias} {values} != the schema's enum"
    assert values == typing.get_args(_wire.SCHEMAS[alias])


#: Every request-body builder of _base with all its arguments given, and its schema.
BODIES: List[Tuple[str, Any]] = [
    (
        "CreateSandboxRequest",
        lambda: b.create_body(
            "minimal", "snap", 60, 30, "kill", {"a": "b"}, {"K": "V"}, [t.VolumeMount("v", "/data")], 10, 100
        ),
    ),
    ("CreateVolumeRequest", lambda: b.volume_body("v", 1, "s", None)),
    ("CreateVolumeRequest", lambda: b.volume_body("v", 1, None, "bk")),
    ("CreateDatabaseRequest", lambda: b.database_body("db", 17, 1, 60, 256)),
    ("CreateBranchRequest", lambda: b.branch_body("br", 60, "2026-01-01T00:00:00Z")),
    ("RestoreDatabaseRequest", lambda: b.restore_body("2026-01-01T00:00:00Z")),
    ("QueryRequest", lambda: b.query_body("select $1", [1], 1000)),
    ("ExecRequest", lambda: b.exec_body("true", None, 5, {"K": "V"}, "/", "root", "in")),
    ("CodeRequest", lambda: b.code_body("1", "python", "ctx", {"K": "V"}, 5)),
    ("CodeContextRequest", lambda: b.code_context_body("python", {"K": "V"})),
    ("CreateDeployRequest", lambda: b.deploy_body("main")),
    (
        "CreateAppRequest",
        lambda: b.app_body(
            "app",
            "https://example.com/r.git",
            "main",
            True,
            b.app_config({"K": "V"}, {"S": "s"}, {"command": "c"}, {"port": 8080}, 256, 1, 60, "/", ["a.example"]),
        ),
    ),
    (
        "UpdateAppRequest",
        lambda: b.app_update_body(
            "https://example.com/r.git",
            "main",
            b.app_config({"K": "V"}, {"S": "s"}, {"command": "c"}, {"port": 8080}, 256, 1, 60, "/", ["a.example"]),
        ),
    ),
    (
        "CreateFunctionRequest",
        lambda: b.function_body(
            "f",
            "python",
            "main.handler",
            b.function_source({"main.py": "x"}, None, None, "requests"),
            {"K": "V"},
            {"S": "s"},
            b.function_limits(256, 5, 1, 2, 60),
            True,
        ),
    ),
    (
        "CreateFunctionRequest",
        lambda: b.function_body(
            "f", "python", "main.handler", b.function_source(None, "https://example.com/r.git", "main", None),
            None, None, {}, None,
        ),
    ),
    ("UpdateFunctionRequest", lambda: b.function_limits(None, 5, 1, 2, 60)),
    (
        "CreateVersionRequest",
        lambda: b.version_body("main.handler", b.function_source({"main.py": "x"}, None, None, "r"), {"K": "V"}, {}),
    ),
    (
        "CreateScheduleRequest",
        lambda: b.schedule_body(
            "s", "* * * * *", b.schedule_fields("UTC", t.FunctionTarget("f"), {"p": 1}, "allow", 60, 2), True
        ),
    ),
    ("CreateWebhookRequest", lambda: b.webhook_body("https://example.com/h", ["sandbox.*"], "whsec_x")),
    ("UpdateScheduleRequest", lambda: b.schedule_fields("UTC", t.SandboxExecTarget("minimal", "true"), 1, "forbid", 60, 2)),
    ("CreateMemberRequest", lambda: b.member_body("Ada", "ada@example.org", "developer")),
    ("UpdateMemberRequest", lambda: b.member_update_body("Ada L.", "viewer")),
]


@pytest.mark.parametrize("schema,build", BODIES, ids=[f"{s}-{i}" for i, (s, _) in enumerate(BODIES)])
def test_request_body_has_only_schema_fields(schema: str, build: Any) -> None:
    body = build()
    extra = sorted(set(body) - _keys(_wire.SCHEMAS[schema]))
    assert not extra, f"the SDK sends {extra}, which {schema} does not have"
    missing = sorted(getattr(_wire.SCHEMAS[schema], "__required_keys__", set()) - set(body))
    assert not missing, f"{schema} requires {missing}, the SDK's body lacks them"
