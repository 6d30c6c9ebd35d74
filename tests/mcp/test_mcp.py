"""PandaStack's MCP server driven by the official MCP Python SDK (PyPI ``mcp``) against a real
server with real guests, over both transports: stdio (``$PANDASTACK_BIN mcp``, as a desktop agent
starts it) and streamable HTTP (``$PANDASTACK_BASE_URL/mcp`` with a bearer key).

Needs PANDASTACK_BASE_URL, PANDASTACK_API_KEY, PANDASTACK_BIN and PANDASTACK_TEST_TEMPLATE
(``minimal``); scripts/test-clients.sh sets them. Every sandbox made here is killed at the end of
its test, and the module ends by killing any left with its run tag.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Dict

import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

REQUIRED = ("PANDASTACK_BASE_URL", "PANDASTACK_API_KEY", "PANDASTACK_BIN", "PANDASTACK_TEST_TEMPLATE")
RUN = uuid.uuid4().hex[:12]
TAGS = {"suite": "mcp", "run": RUN}
TIMEOUT = 300


def env() -> Dict[str, str]:
    missing = [k for k in REQUIRED if not os.environ.get(k)]
    if missing:
        pytest.exit("MCP tests need a real server: set " + ", ".join(missing), returncode=2)
    return {k: os.environ[k] for k in REQUIRED}


def server_for(transport: str) -> Any:
    """What the SDK connects to for `transport` (``stdio`` or ``http``): server parameters, or
    the streamable-HTTP transport with the bearer key."""
    e = env()
    if transport == "stdio":
        params = StdioServerParameters(
            command=e["PANDASTACK_BIN"],
            args=["mcp"],
            env={
                "PANDASTACK_API_KEY": e["PANDASTACK_API_KEY"],
                "PANDASTACK_BASE_URL": e["PANDASTACK_BASE_URL"],
                "PANDASTACK_LOG": "warn",
            },
        )
        return params
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {e['PANDASTACK_API_KEY']}"})
    return streamable_http_client(e["PANDASTACK_BASE_URL"].rstrip("/") + "/mcp", http_client=http)


@asynccontextmanager
async def connect(transport: str) -> AsyncIterator[ClientSession]:
    """An MCP session with PandaStack over `transport` (``stdio`` or ``http``), started with the
    initialize handshake (revision 2025-11-25, what most clients in use speak)."""
    server = server_for(transport)
    streams = stdio_client(server) if transport == "stdio" else server
    async with streams as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=TIMEOUT) as session:
            info = await session.initialize()
            assert info.server_info.name == "pandastack"
            yield session


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


async def call(session: ClientSession, tool: str, **args: Any) -> Dict[str, Any]:
    """Calls `tool`, expecting success; its structured result."""
    r = await session.call_tool(tool, args)
    assert not r.is_error, f"{tool}: {text(r)}"
    assert r.structured_content is not None
    # The text a model reads is the same JSON.
    assert json.loads(r.content[0].text) == r.structured_content
    return r.structured_content


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT * 2))


TRANSPORTS = ["stdio", "http"]


@pytest.fixture(scope="module", autouse=True)
def cleanup() -> Any:
    yield

    async def sweep() -> None:
        async with connect("http") as s:
            listed = await call(s, "list_sandboxes", limit=200)
            for sb in listed["sandboxes"]:
                if sb["metadata"].get("run") == RUN:
                    await s.call_tool("kill_sandbox", {"sandbox_id": sb["id"]})

    run(sweep())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_tools_are_listed_with_schemas(transport: str) -> None:
    async def go() -> None:
        async with connect(transport) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            for name in [
                "create_sandbox", "list_sandboxes", "kill_sandbox", "run_command", "run_code",
                "create_code_context", "write_file", "read_file", "list_files", "get_file_url", "get_preview_url",
                "snapshot_sandbox", "fork_sandbox", "create_database", "query_database",
                "deploy_app", "get_app", "invoke_function",
            ]:
                assert name in tools, name
                assert tools[name].description
                assert tools[name].input_schema["type"] == "object"
                assert tools[name].input_schema.get("additionalProperties") is False, name
            rc = tools["run_command"].input_schema
            assert rc["required"] == ["sandbox_id", "command"]
            assert {"timeout_seconds", "max_output_bytes"} <= set(rc["properties"])
            lang = json.dumps(tools["run_code"].input_schema)
            assert '"python"' in lang

    run(go())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_current_revision(transport: str) -> None:
    """The SDK's high-level client negotiates the current revision (2026-07-28: discovery, no
    handshake; stateless over HTTP, so each request carries the key on its own)."""

    async def go() -> None:
        async with Client(server_for(transport), read_timeout_seconds=TIMEOUT) as c:
            assert c.protocol_version == "2026-07-28"
            assert c.server_info is not None and c.server_info.name == "pandastack"
            tools = (await c.list_tools()).tools
            assert "run_code" in {t.name for t in tools}
            r = await c.call_tool("kill_sandbox", {"sandbox_id": "sb-doesnotexist"})
            assert r.is_error and r.structured_content["error"]["code"] == "sandbox_not_found"
            listed = await c.call_tool("list_sandboxes", {"limit": 1})
            assert not listed.is_error, text(listed)

    run(go())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_errors_are_tool_errors_with_the_api_message(transport: str) -> None:
    async def go() -> None:
        async with connect(transport) as s:
            r = await s.call_tool("kill_sandbox", {"sandbox_id": "sb_doesnotexist"})
            assert r.is_error
            assert text(r).startswith("error sandbox_not_found: ")
            assert r.structured_content["error"]["code"] == "sandbox_not_found"
            assert r.structured_content["error"]["status"] == 404
            r = await s.call_tool("create_sandbox", {"template": "minimal", "ttl_seconds": "soon"})
            assert r.is_error and text(r).startswith("error invalid_argument:"), text(r)
            r = await s.call_tool("create_sandbox", {"template": "no-such-template-x"})
            assert r.is_error and "no-such-template-x" in text(r), text(r)

    run(go())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_multi_step_session(transport: str) -> None:
    """create → write a file → run code that reads it → fork → the child sees it → kill."""

    async def go() -> None:
        async with connect(transport) as s:
            sb = await call(s, "create_sandbox", template=env()["PANDASTACK_TEST_TEMPLATE"],
                            ttl_seconds=900, metadata=TAGS)
            sid = sb["id"]
            try:
                w = await call(s, "write_file", sandbox_id=sid, path="/tmp/mcp.txt",
                               content=f"hello from {transport}\n")
                assert w["bytes_written"] == len(f"hello from {transport}\n")
                listed = await call(s, "list_files", sandbox_id=sid, path="/tmp")
                assert any(e["path"] == "/tmp/mcp.txt" for e in listed["entries"]), listed

                r = await call(s, "run_code", sandbox_id=sid,
                               code="data = open('/tmp/mcp.txt').read()\nprint(data.upper(), end='')\nlen(data)")
                assert r["error"] is None, r
                assert r["stdout"] == f"HELLO FROM {transport.upper()}\n"
                assert r["results"][0]["text"] == str(len(f"hello from {transport}\n"))
                # The context persists: `data` is still there.
                r = await call(s, "run_code", sandbox_id=sid, code="data.split()[-1]")
                assert r["results"][0]["text"] == repr(transport)
                r = await call(s, "run_code", sandbox_id=sid, code="1/0")
                assert r["error"]["name"] == "ZeroDivisionError"

                out = await call(s, "run_command", sandbox_id=sid,
                                 command="head -c 200000 /dev/zero | tr '\\0' x; echo; echo done >&2; exit 4",
                                 max_output_bytes=1000, timeout_seconds=60)
                assert out["exit_code"] == 4 and out["truncated"] is True
                assert len(out["stdout"]) < 1100 and "bytes omitted" in out["stdout"]
                assert out["stderr"] == "done\n"

                fork = await call(s, "fork_sandbox", sandbox_id=sid, metadata=TAGS)
                child = fork["children"][0]["id"]
                try:
                    r = await call(s, "read_file", sandbox_id=child, path="/tmp/mcp.txt")
                    assert r["content"] == f"hello from {transport}\n"
                    r = await call(s, "run_code", sandbox_id=child, code="open('/tmp/mcp.txt').read()")
                    assert transport in r["results"][0]["text"], r
                finally:
                    await call(s, "kill_sandbox", sandbox_id=child)
            finally:
                await call(s, "kill_sandbox", sandbox_id=sid)
            gone = await s.call_tool("run_command", {"sandbox_id": sid, "command": "true"})
            assert gone.is_error and "sandbox_not_found" in text(gone)

    run(go())


def test_http_endpoint_refuses_requests_without_a_valid_key() -> None:
    e = env()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}}).encode()
    for auth in [None, "Bearer pds_wrong"]:
        req = urllib.request.Request(e["PANDASTACK_BASE_URL"].rstrip("/") + "/mcp", data=body, method="POST")
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json, text/event-stream")
        if auth:
            req.add_header("Authorization", auth)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=30)
        assert err.value.code == 401
        assert json.loads(err.value.read())["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_platform_tools_reach_the_api(transport: str) -> None:
    """Databases, apps and functions: each tool's call reaches its API route and comes back with
    the API's answer (here its refusals, which need no database VM or app build)."""

    async def go() -> None:
        async with connect(transport) as s:
            cases = [
                ("query_database", {"database": "nodb_mcp", "sql": "select 1"}, "database_not_found"),
                ("create_database", {"name": "Bad-Name"}, "invalid_argument"),
                ("get_app", {"name": "no-app-mcp"}, "app_not_found"),
                ("deploy_app", {"name": "mcp-app", "git_url": "file:///etc"}, "invalid_argument"),
                # A function is an app of kind function: the API answers `app_not_found`.
                ("invoke_function", {"name": "no-fn-mcp", "event": {"x": 1}}, "app_not_found"),
                ("get_preview_url", {"sandbox_id": "sb_nope", "port": 8000}, "sandbox_not_found"),
            ]
            for tool, args, code in cases:
                r = await s.call_tool(tool, args)
                assert r.is_error, f"{tool}: {text(r)}"
                assert r.structured_content["error"]["code"] == code, f"{tool}: {text(r)}"
                assert text(r).startswith(f"error {code}: "), text(r)

    run(go())


def test_database_created_and_queried() -> None:
    """A managed PostgreSQL database made with create_database answers SQL through
    query_database; a PostgreSQL error is a tool error with its SQLSTATE. (The first database of
    a server bakes the `postgres` template: minutes under TCG; scripts/test-clients.sh runs this
    after the SDK's database tests have baked it.)"""
    from pandastack import NotFoundError, PandaStack

    name = f"mcp_{RUN}"

    async def go() -> None:
        async with connect("http") as s:
            db = await call(s, "create_database", name=name)
            assert db["name"] == name and db["connection_uri"].startswith("postgres://")
            r = await call(s, "query_database", database=name, sql="select $1::int + 1 as n", params=[41])
            assert r["rows"] == [[42]] and r["fields"][0]["name"] == "n"
            bad = await s.call_tool("query_database", {"database": name, "sql": "select * from nope"})
            assert bad.is_error and text(bad).startswith("error query_failed: ERROR 42P01"), text(bad)

    e = env()
    try:
        run(go())
    finally:
        with PandaStack(api_key=e["PANDASTACK_API_KEY"], base_url=e["PANDASTACK_BASE_URL"]) as sdk:
            try:
                sdk.databases.delete(name)
            except NotFoundError:  # not made: nothing to delete
                pass
