"""The MCP route: an agent loop on PandaStack's MCP server, where the model picks the tools.

The agent connects to the server's MCP endpoint (streamable HTTP at `<base URL>/mcp`, the API key
as a bearer token) with the official MCP Python SDK, lists its tools and offers all of them to
the model. Each turn the model either calls tools — the loop runs them over MCP and hands back
their results — or answers. Here it creates a sandbox, runs Python in it, kills it and answers;
the script exits 1 unless the answer has the number the sandbox computed. Any sandbox the model
created is killed at the end, whatever happened.

Without OPENAI_API_KEY the model is a scripted policy (below) that chooses those tools from the
listed ones, reading each result, so the recipe runs with no key. With a real model (the MCP
tools passed to OpenAI's chat completions API as functions):

    pip install ./sdk/python -r examples/recipes/requirements.txt
    export PANDASTACK_BASE_URL=http://127.0.0.1:8080 PANDASTACK_API_KEY=pds_…
    OPENAI_API_KEY=sk-… [OPENAI_MODEL=gpt-5-mini] python3 examples/recipes/mcp_agent.py

A desktop agent talks to the same tools over stdio instead: `pandastack mcp` (docs/mcp.md).
"""

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Tool

QUESTION = "What is the sum of the squares of all prime numbers below 1000?"
EXPECTED = "49345379"
TEMPLATE = os.environ.get("PANDASTACK_TEMPLATE", "base")
SYSTEM = (
    f"You have PandaStack sandboxes as tools. Create a sandbox (template {TEMPLATE!r}), compute with "
    "run_code, never from memory, kill the sandbox, then answer with the number."
)

Message = dict[str, Any]  # OpenAI chat format: the conversation both models read and extend
Model = Callable[[list[Message]], Awaitable[Message]]


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def scripted_model(tools: list[Tool]) -> Model:
    """Stands in for the LLM: picks create_sandbox, run_code and kill_sandbox from the listed
    tools in turn, reading each one's result, then answers from what run_code printed."""
    listed = {t.name for t in tools}
    assert {"create_sandbox", "run_code", "kill_sandbox"} <= listed, f"tools: {sorted(listed)}"
    code = (
        "primes = [n for n in range(2, 1000) if all(n % d for d in range(2, int(n ** 0.5) + 1))]\n"
        "print(sum(p * p for p in primes))"
    )

    def call(name: str, **arguments: Any) -> Message:
        calls = [tool_call(f"call-{name}", name, json.dumps(arguments))]
        return {"role": "assistant", "content": None, "tool_calls": calls}

    async def reply(messages: list[Message]) -> Message:
        try:
            results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
        except json.JSONDecodeError:  # a tool error is text, not JSON: give up, saying it
            return {"role": "assistant", "content": f"A tool failed: {messages[-1]['content']}"}
        if not results:
            return call("create_sandbox", template=TEMPLATE, ttl_seconds=600, metadata={"example": "mcp"})
        sandbox_id = results[0]["id"]
        if len(results) == 1:
            return call("run_code", sandbox_id=sandbox_id, code=code)
        if len(results) == 2:
            return call("kill_sandbox", sandbox_id=sandbox_id)
        answer = f"The sum of the squares of the primes below 1000 is {results[1]['stdout'].strip()}."
        return {"role": "assistant", "content": answer}

    return reply


def openai_model(tools: list[Tool]) -> Model:
    from openai import AsyncOpenAI

    openai = AsyncOpenAI()
    functions = []
    for t in tools:  # each MCP tool as an OpenAI function: the same name, description and JSON schema
        schema = {k: v for k, v in t.input_schema.items() if k != "$schema"}
        function = {"name": t.name, "description": t.description or "", "parameters": schema}
        functions.append({"type": "function", "function": function})

    async def reply(messages: list[Message]) -> Message:
        response = await openai.chat.completions.create(
            model=os.environ.get("OPENAI_MODEL", "gpt-5-mini"),
            messages=[{"role": "system", "content": SYSTEM}, *messages],
            tools=functions,
        )
        message = response.choices[0].message
        reply: Message = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            calls = message.tool_calls
            reply["tool_calls"] = [tool_call(c.id, c.function.name, c.function.arguments) for c in calls]
        return reply

    return reply


async def main() -> int:
    url = os.environ["PANDASTACK_BASE_URL"].rstrip("/") + "/mcp"
    headers = {"Authorization": f"Bearer {os.environ['PANDASTACK_API_KEY']}"}
    created: list[str] = []  # sandboxes the model made
    async with httpx2.AsyncClient(headers=headers, timeout=300) as http, Client(
        streamable_http_client(url, http_client=http), read_timeout_seconds=300
    ) as server:
        tools = (await server.list_tools()).tools
        model = openai_model(tools) if os.environ.get("OPENAI_API_KEY") else scripted_model(tools)
        messages: list[Message] = [{"role": "user", "content": QUESTION}]
        try:
            for _ in range(12):  # turns: enough for a real model's retries, not a runaway loop
                reply = await model(messages)
                messages.append(reply)
                if not reply.get("tool_calls"):
                    break
                for call in reply["tool_calls"]:
                    name = call["function"]["name"]
                    arguments = json.loads(call["function"]["arguments"] or "{}")
                    result = await server.call_tool(name, arguments)
                    text = "\n".join(c.text for c in result.content if c.type == "text")
                    print(f"{name}({json.dumps(arguments)}) -> {text[:200]}")
                    if name == "create_sandbox" and not result.is_error:
                        created.append(result.structured_content["id"])
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
        finally:
            for sandbox_id in created:  # what the model left running (killing a dead one: a tool error)
                await server.call_tool("kill_sandbox", {"sandbox_id": sandbox_id})
    answer = messages[-1].get("content") or ""
    print(f"answer: {answer}")
    if EXPECTED not in answer:
        print(f"expected the answer to contain {EXPECTED}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
