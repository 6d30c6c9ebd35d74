"""The code interpreter (``run_code``, code contexts) against a real sandbox: one sandbox for the
whole module, shared by the sync and the async client."""

from __future__ import annotations

import asyncio
import base64

import pytest

from pandastack import (
    AsyncPandaStack,
    CodeContext,
    Execution,
    ExecutionError,
    InvalidArgumentError,
    NotFoundError,
    Result,
)

PNG_OBJECT = """
class Chart:
    def _repr_png_(self):
        return b'\\x89PNG\\r\\n\\x1a\\nfake'
    def _repr_html_(self):
        return '<b>chart</b>'
Chart()
"""


def test_state_persists_between_calls(shared_sandbox):
    r = shared_sandbox.run_code("x = 21")
    assert isinstance(r, Execution)
    assert r.results == [] and r.error is None and r.text is None
    r = shared_sandbox.run_code("x * 2")
    assert r.results[0].text == "42" and r.text == "42"
    assert isinstance(r.results[0], Result) and r.results[0].png is None
    assert r.duration_ms >= 0 and r.truncated is False
    # A new import stays too.
    shared_sandbox.run_code("import json")
    assert shared_sandbox.run_code("json.dumps({'a': x})").text == "'{\"a\": 21}'"


def test_stdout_and_stderr_are_captured(shared_sandbox):
    r = shared_sandbox.run_code("import sys\nprint('hi')\nprint('oops', file=sys.stderr)\n6 * 7")
    assert (r.stdout, r.stderr, r.text, r.error) == ("hi\n", "oops\n", "42", None)
    r = shared_sandbox.run_code("import os\nos.system('echo from-shell')")
    assert "from-shell\n" in r.stdout


def test_an_exception_is_data(shared_sandbox):
    r = shared_sandbox.run_code("def f():\n    return 1/0\nprint('before')\nf()")
    assert isinstance(r.error, ExecutionError)
    assert r.error.name == "ZeroDivisionError"
    assert "division" in r.error.value
    assert "return 1/0" in r.error.traceback
    assert r.stdout == "before\n" and r.results == []
    assert shared_sandbox.run_code("def broken(:").error.name == "SyntaxError"


def test_timeout_interrupts_and_keeps_the_kernel(shared_sandbox):
    shared_sandbox.run_code("kept = 'still here'")
    r = shared_sandbox.run_code("while True:\n    pass", timeout_seconds=2)
    assert r.error is not None and r.error.name == "TimeoutError", r
    assert shared_sandbox.run_code("kept").text == "'still here'"


def test_rich_results_png_and_html(shared_sandbox):
    r = shared_sandbox.run_code(PNG_OBJECT)
    res = r.results[0]
    assert res.html == "<b>chart</b>"
    assert res.png is not None and base64.b64decode(res.png) == res.png_bytes()
    assert res.png_bytes().startswith(b"\x89PNG")
    r = shared_sandbox.run_code("display('a', 2)")
    assert [x.text for x in r.results] == ["'a'", "2"] and r.text == "2"
    assert shared_sandbox.run_code("1").results[0].png_bytes() is None


def test_contexts_are_separate_kernels(shared_sandbox):
    shared_sandbox.run_code("only_default = 1")
    ctx = shared_sandbox.create_code_context()
    assert isinstance(ctx, CodeContext) and ctx.id and ctx.language == "python"
    r = shared_sandbox.run_code("only_default", context=ctx)
    assert r.error is not None and r.error.name == "NameError"
    shared_sandbox.run_code("mine = 'ctx'", context=ctx)
    assert shared_sandbox.run_code("mine", context=ctx.id).text == "'ctx'"
    assert shared_sandbox.run_code("'mine' in dir()").text == "False"
    assert shared_sandbox.run_code("only_default").text == "1"

    shared_sandbox.delete_code_context(ctx)
    with pytest.raises(NotFoundError):
        shared_sandbox.run_code("1", context=ctx)
    with pytest.raises(NotFoundError):  # the same over the stream
        shared_sandbox.run_code("1", context=ctx, on_stdout=print)
    with pytest.raises(NotFoundError):  # already gone
        shared_sandbox.delete_code_context(ctx.id)

    # A context's env reaches its kernel.
    ctx = shared_sandbox.create_code_context(env={"CODE_CTX_VAR": "v1"})
    try:
        assert shared_sandbox.run_code("import os; os.environ['CODE_CTX_VAR']", context=ctx).text == "'v1'"
    finally:
        shared_sandbox.delete_code_context(ctx)


def test_streaming_callbacks_in_order(shared_sandbox):
    seen = []
    r = shared_sandbox.run_code(
        "import sys\nprint('streamed')\nsys.stdout.flush()\nprint('warn', file=sys.stderr)\n6 * 7",
        on_stdout=lambda s: seen.append(("stdout", s)),
        on_stderr=lambda s: seen.append(("stderr", s)),
        on_result=lambda res: seen.append(("result", res.text)),
        on_error=lambda e: seen.append(("error", e.name)),
    )
    kinds = [k for k, _ in seen]
    assert kinds.index("stdout") < kinds.index("result")
    assert "".join(v for k, v in seen if k == "stdout") == "streamed\n"
    assert "".join(v for k, v in seen if k == "stderr") == "warn\n"
    assert seen[-1] == ("result", "42") and "error" not in kinds
    assert (r.stdout, r.stderr, r.text, r.error) == ("streamed\n", "warn\n", "42", None)

    # Only an error callback: still streamed, the error arrives and is also in the result.
    errors = []
    r = shared_sandbox.run_code("print('x')\nraise ValueError('bad')", on_error=errors.append)
    assert [e.name for e in errors] == ["ValueError"] and r.error == errors[0] and r.stdout == "x\n"


def test_bad_arguments_name_the_field(shared_sandbox):
    with pytest.raises(InvalidArgumentError, match="language"):
        shared_sandbox.run_code("1", language="cobol")
    with pytest.raises(InvalidArgumentError, match="context_id"):
        shared_sandbox.run_code("1", context="../x")
    with pytest.raises(InvalidArgumentError, match="timeout_seconds"):
        shared_sandbox.run_code("1", timeout_seconds=100000)


def test_async_client(shared_sandbox, server_env):
    async def main():
        async with AsyncPandaStack(
            api_key=server_env["PANDASTACK_API_KEY"], base_url=server_env["PANDASTACK_BASE_URL"]
        ) as c:
            sb = await c.sandboxes.get(shared_sandbox.id)
            await sb.run_code("a_val = 20")
            r = await sb.run_code("a_val + 1")
            chunks = []

            async def on_out(s):
                chunks.append(s)

            streamed = await sb.run_code("print('async')\na_val * 2", on_stdout=on_out)
            ctx = await sb.create_code_context()
            in_ctx = await sb.run_code("'a_val' in dir()", context=ctx)
            await sb.delete_code_context(ctx)
            with pytest.raises(NotFoundError):
                await sb.run_code("1", context=ctx)
            return r, chunks, streamed, in_ctx

    r, chunks, streamed, in_ctx = asyncio.run(main())
    assert r.text == "21"
    assert "".join(chunks) == "async\n" and streamed.text == "40"
    assert in_ctx.text == "False"
