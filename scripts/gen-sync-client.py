#!/usr/bin/env python3
"""Generates the Python SDK's synchronous client (the package sdk/python/src/pandastack/_sync/)
from the asynchronous one (_async/), so the two cannot drift apart: each module _async/X.py
becomes _sync/X.py.

    python3 scripts/gen-sync-client.py            # rewrite what is stale in _sync/
    python3 scripts/gen-sync-client.py --check    # exit 1 with a diff if any of _sync/ is stale

A module of _sync/ without a twin in _async/ is stale too (the script deletes it). The
transformation is mechanical (unasync-style), per module, on Python tokens, never on raw text:

- ``async def`` / ``async for`` / ``async with`` lose ``async``; ``await x`` becomes ``x``, and
  ``(await x).y`` becomes ``x.y``.
- Names: ``AsyncFoo`` / ``_AsyncFoo`` become ``Foo`` / ``_Foo``, and the table ``NAMES`` below
  maps the rest (``__aenter__``, ``aclose``, ``aiter_lines``, ``AsyncWebSocket``, ...).
  ``Awaitable[T]`` becomes ``T``, ``AsyncGenerator[Y, S]`` becomes ``Generator[Y, S, None]``,
  ``asyncio.sleep`` becomes ``time.sleep`` (and ``import asyncio`` ``import time``).
- Strings and comments (docstrings included) get the same renames plus ``async for/with`` ->
  ``for/with``, ``await x`` -> ``x`` and "asynchronous" -> "synchronous". A docstring paragraph
  that starts with ``Async:`` is about the async client only and is dropped.
- Lines marked with directives in _async/ (comments, so the modules stay plain Python):

      # unasync: async-only          (alone on a line) drop everything up to
      # unasync: end                 ... this line
      code  # unasync: async-only    drop this line
      # unasync: sync: CODE          (alone on a line) in the sync client, this line is CODE
      code  # unasync: sync: CODE    in the sync client, this line is CODE instead

- The ``from typing import`` list is deduplicated, pruned of unused names and sorted.

The output must compile and contain no ``async``, ``await``, ``asyncio`` or ``Async*`` name;
the script fails (exit 2) otherwise, naming the offending line of the output.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import keyword
import re
import sys
import tokenize
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "sdk" / "python" / "src" / "pandastack"
SOURCE = PKG / "_async"
TARGET = PKG / "_sync"
COMMAND = "python3 scripts/gen-sync-client.py"

HEADER = (
    "# Generated from {source} by scripts/gen-sync-client.py: do not edit by hand.\n"
    f"# Change {{source}}, then run `{COMMAND}` (CI runs it with --check).\n"
)
#: How every generated module starts (a module of the target without it is never deleted).
GENERATED = "# Generated from "

#: Names that do not follow the ``AsyncFoo`` -> ``Foo`` rule. Also applied, as whole words, in
#: strings and comments (``hasattr(body, "aclose")``).
NAMES: Dict[str, str] = {
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "StopAsyncIteration": "StopIteration",
    "aclose": "close",
    "aread": "read",
    "aiter_lines": "iter_lines",
    "aiter_bytes": "iter_bytes",
    # The WebSocket client (_ws.py) names its sync class explicitly.
    "AsyncWebSocket": "SyncWebSocket",
}

_ASYNC_NAME = re.compile(r"^(_?)Async([A-Z]\w*)$")
_DIRECTIVE = re.compile(r"#\s*unasync:\s*(.*?)\s*$")


class GenError(Exception):
    pass


def sync_name(name: str) -> str:
    if name in NAMES:
        return NAMES[name]
    m = _ASYNC_NAME.match(name)
    return m.group(1) + m.group(2) if m else name


# ---------------------------------------------------------------- directives (line pass)


def apply_directives(src: str, name: str) -> str:
    lines = src.splitlines(keepends=True)
    # line number (1-based) -> (directive text, comment column, alone on its line)
    found: Dict[int, Tuple[str, int, bool]] = {}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type != tokenize.COMMENT:
            continue
        m = _DIRECTIVE.search(tok.string)
        if not m:
            continue
        row, col = tok.start
        # A directive after other comment text (`#: doc  # unasync: ...`) is a trailing one.
        alone = lines[row - 1][:col].strip() == "" and m.start() == 0
        found[row] = (m.group(1), col, alone)

    out: List[str] = []
    block_start: Optional[int] = None
    for i, line in enumerate(lines, start=1):
        d = found.get(i)
        where = f"{name}:{i}"
        if block_start is not None:
            if d is None:
                continue
            if d[0] == "end" and d[2]:
                block_start = None
                continue
            raise GenError(f"{where}: directive {d[0]!r} inside an async-only block")
        if d is None:
            out.append(line)
            continue
        text, col, alone = d
        if text == "async-only":
            if alone:
                block_start = i
            continue  # a trailing marker drops just this line
        if text.startswith("sync:"):
            code = text[len("sync:") :].strip()
            if not code:
                raise GenError(f"{where}: `# unasync: sync:` needs the sync line's code")
            indent = col if alone else len(line) - len(line.lstrip())
            out.append(" " * indent + code + "\n")
            continue
        if text == "end":
            raise GenError(f"{where}: `# unasync: end` without `# unasync: async-only`")
        raise GenError(f"{where}: unknown directive {text!r}")
    if block_start is not None:
        raise GenError(f"{name}:{block_start}: async-only block without `# unasync: end`")
    return "".join(out)


# ---------------------------------------------------------------- strings and comments

_AWAIT_GROUP = re.compile(r"(?<![\w)\]])\(await ((?:[^()]|\([^()]*\))*)\)")
_ASYNC_PARAGRAPH = re.compile(r"\n[ \t]*\n[ \t]*Async: .*?(?=\n[ \t]*\n|\s*\Z)", re.S)


def _open_bracket_column(line: str) -> Optional[int]:
    """The column just after the last bracket ``line`` leaves open, if any."""
    stack: List[int] = []
    for i, c in enumerate(line):
        if c in "([{":
            stack.append(i)
        elif c in ")]}" and stack:
            stack.pop()
    return stack[-1] + 1 if stack else None


def _drop_await(text: str) -> str:
    """``await x`` -> ``x`` in prose, line by line. Lines aligned under a bracket that a removed
    ``await`` moved left (a code example's continued call) move left with it."""
    out = []
    align = shift = 0
    for line in text.split("\n"):
        if align and line.startswith(" " * align) and not line[align:].startswith(" "):
            out.append(line[shift:])
            continue
        new = re.sub(r"\bawait ", "", _AWAIT_GROUP.sub(r"\1", line))
        col = _open_bracket_column(line)
        align, shift = (col, len(line) - len(new)) if col is not None and new != line else (0, 0)
        out.append(new)
    return "\n".join(out)


def sync_text(text: str) -> str:
    """The rules for prose: docstrings, other strings and comments."""
    text = re.sub(r"\b(_?)Async([A-Z]\w*)", lambda m: sync_name(m.group(0)), text)
    for a, s in NAMES.items():
        text = re.sub(rf"(?<![\w.]){re.escape(a)}\b", s, text)
    text = re.sub(r"\basync (for|with|def)\b", r"\1", text)
    text = _drop_await(text)
    text = re.sub(r"\bAsynchronous\b", "Synchronous", text)
    text = re.sub(r"\basynchronous\b", "synchronous", text)
    return text


def sync_string(tok: str) -> str:
    m = re.match(r"([rRbBuUfF]*)('''|\"\"\"|'|\")", tok)
    if not m:
        return tok
    prefix, quote = m.group(1), m.group(2)
    body = tok[len(prefix) + len(quote) : len(tok) - len(quote)]
    if len(quote) == 3:
        body = _ASYNC_PARAGRAPH.sub("", body)
    return prefix + quote + sync_text(body) + quote


# ---------------------------------------------------------------- code (token pass)

Edit = Tuple[int, int, str]  # [start, end) offsets into the text, replacement


def _matching(toks: List[tokenize.TokenInfo], i: int) -> int:
    """Index of the bracket closing the one at ``toks[i]``."""
    depth = 0
    for j in range(i, len(toks)):
        s = toks[j].string
        if toks[j].type == tokenize.OP and s in "([{":
            depth += 1
        elif toks[j].type == tokenize.OP and s in ")]}":
            depth -= 1
            if depth == 0:
                return j
    raise GenError(f"unbalanced bracket at line {toks[i].start[0]}")


def _is_primary(toks: List[tokenize.TokenInfo], i: int, end: int) -> bool:
    """Whether ``toks[i:end]`` is a single primary (names, attributes, calls, subscripts)."""
    j = i
    while j < end:
        t = toks[j]
        if t.type == tokenize.NAME and not keyword.iskeyword(t.string):
            j += 1
        elif t.type in (tokenize.STRING, tokenize.NUMBER) or (t.type == tokenize.OP and t.string == "."):
            j += 1
        elif t.type == tokenize.OP and t.string in "([":
            j = _matching(toks, j) + 1
        elif t.type in (tokenize.NL, tokenize.COMMENT):
            j += 1
        else:
            return False
    return True


def transform_code(src: str) -> str:
    starts = [0]
    for line in src.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def off(pos: Tuple[int, int]) -> int:
        return starts[pos[0] - 1] + pos[1]

    toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    code = [i for i, t in enumerate(toks) if t.type not in (tokenize.NL, tokenize.COMMENT)]
    nxt = {a: b for a, b in zip(code, code[1:])}
    prev = {b: a for a, b in zip(code, code[1:])}
    fstring_middle = getattr(tokenize, "FSTRING_MIDDLE", None)
    edits: List[Edit] = []

    def next_tok(i: int) -> tokenize.TokenInfo:
        return toks[nxt[i]]

    for i, t in enumerate(toks):
        if t.type == tokenize.COMMENT:
            new = sync_text(t.string)
            if new != t.string:
                edits.append((off(t.start), off(t.end), new))
        elif t.type == tokenize.STRING:
            new = sync_string(t.string)
            if new != t.string:
                edits.append((off(t.start), off(t.end), new))
        elif fstring_middle is not None and t.type == fstring_middle:
            new = sync_text(t.string)
            if new != t.string:
                edits.append((off(t.start), off(t.end), new))
        elif t.type == tokenize.NAME:
            s = t.string
            if s == "async":
                if next_tok(i).string not in ("def", "for", "with"):
                    raise GenError(f"line {t.start[0]}: `async` before {next_tok(i).string!r}")
                edits.append((off(t.start), off(next_tok(i).start), ""))
            elif s == "await":
                edits.append((off(t.start), off(next_tok(i).start), ""))
                p = prev.get(i)
                if p is not None and toks[p].string == "(":
                    before = toks[prev[p]] if p in prev else None
                    grouping = before is None or not (
                        (before.type == tokenize.NAME and not keyword.iskeyword(before.string))
                        or before.string in (")", "]")
                        or before.type == tokenize.STRING
                    )
                    close = _matching(toks, p)
                    if grouping and _is_primary(toks, nxt[i], close):
                        edits.append((off(toks[p].start), off(toks[p].end), ""))
                        edits.append((off(toks[close].start), off(toks[close].end), ""))
            elif s == "Awaitable" and next_tok(i).string == "[":
                open_ = nxt[i]
                edits.append((off(t.start), off(toks[open_].end), ""))
                close = _matching(toks, open_)
                edits.append((off(toks[close].start), off(toks[close].end), ""))
            elif s == "AsyncGenerator" and next_tok(i).string == "[":
                edits.append((off(t.start), off(t.end), "Generator"))
                close = _matching(toks, nxt[i])
                edits.append((off(toks[close].start), off(toks[close].start), ", None"))
            elif s == "asyncio":
                p = prev.get(i)
                after_import = p is not None and toks[p].string == "import"
                is_sleep = next_tok(i).string == "." and toks[nxt[nxt[i]]].string == "sleep"
                if not (after_import or is_sleep):
                    raise GenError(
                        f"line {t.start[0]}: asyncio.{toks[nxt[nxt[i]]].string} outside an "
                        "async-only block (only asyncio.sleep has a sync counterpart)"
                    )
                edits.append((off(t.start), off(t.end), "time"))
            else:
                new = sync_name(s)
                if new != s:
                    edits.append((off(t.start), off(t.end), new))

    out = []
    pos = 0
    for a, b, r in sorted(edits, key=lambda e: (e[0], e[1])):
        if a < pos:
            raise GenError(f"overlapping rewrites at offset {a}")
        out.append(src[pos:a])
        out.append(r)
        pos = b
    out.append(src[pos:])
    return "".join(out)


# ---------------------------------------------------------------- imports


def _typing_order(name: str) -> Tuple[int, str]:
    # isort's default (force_sort_within_sections off, order_by_type on): CONSTANTS, Classes,
    # functions.
    if name.isupper() and len(name) > 1:
        return 0, name
    return (1, name) if name[:1].isupper() else (2, name)


def fix_imports(src: str) -> str:
    tree = ast.parse(src)
    lines = src.splitlines(keepends=True)
    replace: Dict[int, Tuple[int, str]] = {}  # first line (0-based) -> (last line, new text)

    run: List[ast.Import] = []

    def flush_run() -> None:
        if len(run) > 1:
            ordered = sorted(run, key=lambda n: n.names[0].name)
            text = "".join(lines[n.lineno - 1] for n in ordered)
            replace[run[0].lineno - 1] = (run[-1].end_lineno or run[-1].lineno, text)
        run.clear()

    for node in tree.body:
        if isinstance(node, ast.Import) and len(node.names) == 1 and (
            not run or node.lineno == (run[-1].end_lineno or 0) + 1
        ):
            run.append(node)
            continue
        flush_run()
        if isinstance(node, ast.Import):
            run.append(node)
        if isinstance(node, ast.ImportFrom) and node.module == "typing":
            end = node.end_lineno or node.lineno
            rest = "".join(lines[: node.lineno - 1] + lines[end:])
            names = []
            for a in node.names:
                if a.asname is not None:
                    raise GenError("`from typing import x as y` is not supported")
                if a.name not in names and re.search(rf"\b{a.name}\b", rest):
                    names.append(a.name)
            names.sort(key=_typing_order)
            if end > node.lineno:
                text = "from typing import (\n" + "".join(f"    {n},\n" for n in names) + ")\n"
            else:
                text = f"from typing import {', '.join(names)}\n"
            replace[node.lineno - 1] = (end, text)
    flush_run()

    out: List[str] = []
    i = 0
    while i < len(lines):
        if i in replace:
            last, text = replace[i]
            out.append(text)
            i = last
        else:
            out.append(lines[i])
            i += 1
    return "".join(out)


# ---------------------------------------------------------------- checks and driver


def validate(out: str, name: str) -> None:
    try:
        compile(out, f"<sync twin of {name}>", "exec", dont_inherit=True)
    except SyntaxError as e:
        raise GenError(f"generated code does not compile: {e}") from e
    for t in tokenize.generate_tokens(io.StringIO(out).readline):
        bad = None
        if t.type == tokenize.NAME and (
            t.string in ("async", "await", "asyncio") or _ASYNC_NAME.match(t.string)
        ):
            bad = t.string
        elif t.type == tokenize.STRING and re.search(r"\bAsync[A-Z]|^\s*Async:", t.string, re.M):
            bad = "an async name or `Async:` paragraph in a string"
        if bad:
            line = out.splitlines()[t.start[0] - 1]
            raise GenError(f"generated line {t.start[0]} still has {bad}: {line.strip()}")


def generate(src: str, name: str = "_async.py") -> str:
    """The sync twin of the async module ``src``; ``name`` (``_async/apps.py``) is what its
    header and the errors call the async module."""
    text = apply_directives(src, name)  # its errors name the module's line already
    try:
        out = fix_imports(transform_code(text))
        out = HEADER.format(source=name) + out
        validate(out, name)
    except GenError as e:
        raise GenError(f"{name}: {e}") from None
    return out


def modules(source: Path, target: Path) -> Tuple[List[Tuple[Path, Path, str]], List[Path]]:
    """(async module, its sync twin, the async module's name in headers) for each module of
    the package ``source``, and the modules of ``target`` that have no twin in ``source``.
    ``source`` and ``target`` may also be one module and its twin."""
    if not source.is_dir():
        return [(source, target, source.name)], []
    mods = sorted(source.glob("*.py"))
    if not mods:
        raise GenError(f"{source}: no modules")
    names = {m.name for m in mods}
    stale = sorted(p for p in target.glob("*.py") if p.name not in names)
    return [(m, target / m.name, f"{source.name}/{m.name}") for m in mods], stale


def _rel(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--check", action="store_true", help="do not write; exit 1 with a diff if _sync/ is stale"
    )
    ap.add_argument(
        "--source", type=Path, default=SOURCE, help="the async client's package (default: the SDK's)"
    )
    ap.add_argument(
        "--target", type=Path, default=TARGET, help="the sync client's package (default: the SDK's)"
    )
    args = ap.parse_args(argv)
    # (sync module, what it holds, what it should hold: None for a module to delete, its source)
    stale: List[Tuple[Path, str, Optional[str], str]] = []
    try:
        mods, extra = modules(args.source, args.target)
        for src, dst, name in mods:
            out = generate(src.read_text(encoding="utf-8"), name)
            current = dst.read_text(encoding="utf-8") if dst.exists() else ""
            if current != out:
                stale.append((dst, current, out, name))
        for dst in extra:
            current = dst.read_text(encoding="utf-8")
            if not current.startswith(GENERATED):
                raise GenError(
                    f"{_rel(dst)} has no twin in {_rel(args.source)} and was not generated: "
                    "move it to the async client, or delete it"
                )
            stale.append((dst, current, None, f"no {args.source.name}/{dst.name}"))
    except GenError as e:
        print(f"gen-sync-client: {e}", file=sys.stderr)
        return 2
    if args.check:
        if not stale:
            return 0
        for dst, current, out, name in stale:
            rel = _rel(dst)
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    (out or "").splitlines(keepends=True),
                    f"a/{rel} (committed)",
                    f"b/{rel} (generated from {name})" if out is not None else f"b/{rel} ({name})",
                )
            )
        rels = ", ".join(_rel(dst) for dst, *_ in stale)
        print(f"gen-sync-client: out of date: {rels}; run `{COMMAND}`", file=sys.stderr)
        return 1
    for dst, _, out, _ in stale:
        if out is None:
            dst.unlink()
            print(f"gen-sync-client: deleted {_rel(dst)}", file=sys.stderr)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(out, encoding="utf-8")
            print(f"gen-sync-client: wrote {_rel(dst)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
