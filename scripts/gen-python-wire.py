#!/usr/bin/env python3
"""Generates the Python SDK's wire types, sdk/python/src/pandastack/_wire.py, from the server's
contract, crates/pandastack-api/openapi.json (OpenAPI 3.1): one ``TypedDict`` per object schema,
a ``Literal[...]`` alias per string enum, a ``Union`` alias per ``oneOf``.

    python3 scripts/gen-python-wire.py            # rewrite _wire.py
    python3 scripts/gen-python-wire.py --check    # exit 1 with a diff if _wire.py is stale

Standard library only (CI runs --check with the host's python3, before any venv exists), and
deterministic: schemas and fields in the document's order, which the server generates sorted.

- A field not in ``required`` is optional: its schema's fields are split into a total base
  (``_<Name>Required``) and a ``total=False`` class (``typing.NotRequired`` needs Python 3.11;
  the SDK supports 3.9).
- ``"type": [T, "null"]`` and ``oneOf: [{"type": "null"}, X]`` are ``Optional[...]``; ``$ref``
  is the referenced schema's name; an ``additionalProperties`` map is ``Dict[str, T]``; a
  schema-less value (``{}``) or an object without properties is ``Any`` / ``Dict[str, Any]``.
- ``allOf: [$ref, {object}]`` is a subclass of the referenced class with the object's fields;
  a tagged union (``oneOf`` of such ``allOf`` variants, or of inline objects) gets one class per
  variant, named after the union and the variant's ``type`` tag (``ScheduleTarget`` →
  ``ScheduleTargetSandboxExec``), and the union is their ``Union``.
"""

from __future__ import annotations

import argparse
import difflib
import json
import keyword
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "crates" / "pandastack-api" / "openapi.json"
TARGET = ROOT / "sdk" / "python" / "src" / "pandastack" / "_wire.py"
COMMAND = "python3 scripts/gen-python-wire.py"

HEADER = f'''# Generated from crates/pandastack-api/openapi.json by scripts/gen-python-wire.py: do not edit
# by hand. Run `{COMMAND}` after the contract changes (CI runs it with --check).
"""The server's wire types (its JSON objects as ``TypedDict`` classes, its string enums as
``Literal`` aliases), from its OpenAPI document. Internal: the public data objects are the dataclasses
of :mod:`pandastack.types`; their ``from_json`` read these, and the request bodies of the
resource modules are built as these. ``tests/test_wire_contract.py`` ties the two together."""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, TypedDict, Union
'''

PRIMITIVE = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}


def _pascal(tag: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in tag.replace("-", "_").split("_") if p)


def _ref_name(ref: str) -> str:
    prefix = "#/components/schemas/"
    if not ref.startswith(prefix):
        raise SystemExit(f"unsupported $ref {ref!r}")
    return ref[len(prefix):]


def _refs(s: Any) -> List[str]:
    """The schemas `s` refers to, in order."""
    if isinstance(s, dict):
        own = [_ref_name(s["$ref"])] if isinstance(s.get("$ref"), str) else []
        return own + [r for v in s.values() for r in _refs(v)]
    if isinstance(s, list):
        return [r for v in s for r in _refs(v)]
    return []


class Gen:
    def __init__(self, schemas: Dict[str, Any]) -> None:
        self.schemas = schemas
        self.out: List[str] = []

    # -- types of fields -------------------------------------------------------------------
    def ann(self, s: Dict[str, Any]) -> str:
        """The annotation of a (property) schema."""
        if "$ref" in s:
            return _ref_name(s["$ref"])
        for key in ("oneOf", "anyOf"):
            if key in s:
                alts = s[key]
                nullable = any(a.get("type") == "null" for a in alts)
                rest = [self.ann(a) for a in alts if a.get("type") != "null"]
                inner = rest[0] if len(rest) == 1 else f"Union[{', '.join(rest)}]"
                return f"Optional[{inner}]" if nullable else inner
        if "allOf" in s and len(s["allOf"]) == 1:
            return self.ann(s["allOf"][0])
        t = s.get("type")
        nullable = False
        if isinstance(t, list):
            nullable = "null" in t
            rest = [x for x in t if x != "null"]
            if len(rest) != 1:
                raise SystemExit(f"unsupported type list {t!r}")
            t = rest[0]
        if t is None and not (set(s) & {"enum", "properties", "additionalProperties", "items"}):
            return "Any"  # any JSON value
        if "enum" in s:
            base = "Literal[" + ", ".join(json.dumps(v) for v in s["enum"]) + "]"
        elif t in PRIMITIVE:
            base = PRIMITIVE[t]
        elif t == "array":
            base = f"List[{self.ann(s.get('items', {}))}]"
        elif t == "object":
            extra = s.get("additionalProperties")
            if s.get("properties"):
                # An inlined copy of a named schema (a `List_X`'s items are an `X`).
                same = [n for n, v in self.schemas.items() if v == s]
                if len(same) != 1:
                    raise SystemExit(f"an inline object that is no named schema: {json.dumps(s)[:200]}")
                return same[0]
            base = f"Dict[str, {self.ann(extra)}]" if isinstance(extra, dict) else "Dict[str, Any]"
        else:
            raise SystemExit(f"unsupported schema {json.dumps(s)[:200]}")
        return f"Optional[{base}]" if nullable else base

    # -- declarations ----------------------------------------------------------------------
    def doc(self, s: Dict[str, Any], indent: str) -> List[str]:
        text = (s.get("description") or "").strip()
        if not text:
            return []
        text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
        lines = text.splitlines()
        if len(lines) == 1:
            return [f'{indent}"""{lines[0]}"""']
        return [f'{indent}"""{lines[0]}'] + [f"{indent}{ln}" if ln else "" for ln in lines[1:]] + [f'{indent}"""']

    def typed_dict(self, name: str, bases: List[str], s: Dict[str, Any]) -> None:
        """Class `name` with the fields of object schema `s` (on top of `bases`)."""
        props: Dict[str, Any] = s.get("properties", {})
        required = set(s.get("required", []))
        req = [p for p in props if p in required]
        opt = [p for p in props if p not in required]
        base = ", ".join(bases) if bases else "TypedDict"
        if any(not p.isidentifier() or keyword.iskeyword(p) for p in req):
            # A field named like a keyword (`from`): the required ones in the functional syntax.
            if bases or any(not p.isidentifier() or keyword.iskeyword(p) for p in opt):
                raise SystemExit(f"{name}: a keyword-named field is supported only among the required ones")
            # Each annotation as a string literal: it may hold quotes of its own (`Literal["x"]`).
            fields = ", ".join(f'"{p}": {self.ann(props[p])!r}' for p in req)
            self.out += ["", "", f'_{name}Required = TypedDict("_{name}Required", {{{fields}}})']
            if not opt:
                self.out += ["", "", f"class {name}(_{name}Required):"]
                self.out += self.doc(s, "    ") or ["    pass"]
                return
        elif req and opt:
            self.out += ["", "", f"class _{name}Required({base}):"]
            self.out += [f"    {p}: {self.ann(props[p])}" for p in req]
        if req and opt:
            self.out += ["", "", f"class {name}(_{name}Required, total=False):"]
            self.out += self.doc(s, "    ")
            self.out += [f"    {p}: {self.ann(props[p])}" for p in opt]
            return
        total = "" if req or not props else ", total=False"
        self.out += ["", "", f"class {name}({base}{total}):"]
        body = self.doc(s, "    ") + [f"    {p}: {self.ann(props[p])}" for p in req + opt]
        self.out += body or ["    pass"]

    def alias(self, name: str, value: str, s: Dict[str, Any]) -> None:
        self.out += ["", ""]
        text = (s.get("description") or "").strip()
        if text:
            self.out += ["#: " + ln if ln else "#:" for ln in text.splitlines()]
        self.out += [f"{name} = {value}"]

    def variant(self, union: str, v: Dict[str, Any]) -> str:
        """A variant of a tagged union as a class of its own; its name."""
        if "allOf" in v:
            parts = v["allOf"]
            refs = [p for p in parts if "$ref" in p]
            objs = [p for p in parts if "$ref" not in p]
            if len(refs) != 1 or len(objs) != 1:
                raise SystemExit(f"{union}: unsupported allOf variant")
            tag = objs[0]["properties"]["type"]["enum"][0]
            name = union + _pascal(tag)
            self.typed_dict(name, [_ref_name(refs[0]["$ref"])], {**objs[0], "description": v.get("description")})
            return name
        if v.get("type") == "object":
            tag = v["properties"]["type"]["enum"][0]
            name = union + _pascal(tag)
            self.typed_dict(name, [], v)
            return name
        if "$ref" in v:
            return _ref_name(v["$ref"])
        raise SystemExit(f"{union}: unsupported variant {json.dumps(v)[:200]}")

    def schema(self, name: str, s: Dict[str, Any]) -> None:
        if "oneOf" in s:
            names = [self.variant(name, v) for v in s["oneOf"]]
            value = names[0] if len(names) == 1 else f"Union[{', '.join(names)}]"
            self.alias(name, value, s)
        elif "allOf" in s:
            refs = [p for p in s["allOf"] if "$ref" in p]
            objs = [p for p in s["allOf"] if "$ref" not in p]
            if len(refs) != 1 or len(objs) > 1:
                raise SystemExit(f"{name}: unsupported allOf")
            self.typed_dict(name, [_ref_name(refs[0]["$ref"])], {**(objs[0] if objs else {}), "description": s.get("description")})
        elif s.get("type") == "object" and "properties" in s:
            self.typed_dict(name, [], s)
        else:
            self.alias(name, self.ann({k: v for k, v in s.items() if k != "description"}), s)

    def run(self) -> str:
        self.out = [HEADER.rstrip("\n")]
        done: set = set()

        def emit(name: str) -> None:
            # A class's bases and an alias's members are evaluated at import: those first.
            if name in done:
                return
            done.add(name)
            s = self.schemas[name]
            if not (s.get("type") == "object" and "properties" in s):
                for dep in _refs(s):
                    emit(dep)
            self.schema(name, s)

        for name in self.schemas:
            emit(name)
        self.out += ["", "", "#: Every schema of the document, by name.", "SCHEMAS = {"]
        self.out += [f'    "{n}": {n},' for n in self.schemas]
        self.out += ["}", ""]
        return "\n".join(self.out)


def generate() -> str:
    with open(SPEC, encoding="utf-8") as f:
        doc = json.load(f)
    return Gen(doc["components"]["schemas"]).run()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail (exit 1, with a diff) when _wire.py is stale")
    args = ap.parse_args()
    fresh = generate()
    compile(fresh, str(TARGET), "exec")
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
    rel = TARGET.relative_to(ROOT)
    if args.check:
        if current != fresh:
            sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), fresh.splitlines(True), str(rel), f"{rel} (fresh)"))
            print(f"{rel} is stale: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    if current != fresh:
        TARGET.write_text(fresh, encoding="utf-8")
        print(f"wrote {rel}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
