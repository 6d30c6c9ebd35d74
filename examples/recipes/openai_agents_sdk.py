"""OpenAI Agents SDK: an agent whose code-execution tool runs Python in a PandaStack sandbox.

The agent has one function tool, `run_python`, that runs code in the sandbox's persistent Python
interpreter (a microVM of its own) and hands back what it printed. The SDK's runner makes the tool
call, sends the output back to the model and loops until the model answers; the script exits 1
unless the answer has the number the sandbox computed.

Without OPENAI_API_KEY the model is scripted (the SDK's own `agents.testing.ScriptedModel`): it
asks for `run_python` first, then answers from the tool's output, so the recipe runs with no key.
With a real model:

    pip install ./sdk/python -r examples/recipes/requirements.txt
    export PANDASTACK_BASE_URL=http://127.0.0.1:8080 PANDASTACK_API_KEY=pds_…
    OPENAI_API_KEY=sk-… [OPENAI_MODEL=gpt-5-mini] python3 examples/recipes/openai_agents_sdk.py
"""

import asyncio
import os
import sys

from agents import Agent, RunConfig, RunContextWrapper, Runner, function_tool
from agents.items import TResponseOutputItem
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from pandastack import AsyncPandaStack, AsyncSandbox

QUESTION = "What is the sum of the squares of all prime numbers below 1000?"
EXPECTED = "49345379"


@function_tool
async def run_python(ctx: RunContextWrapper[AsyncSandbox], code: str) -> str:
    """Run Python code in a sandbox; returns what it printed and the value of a final expression.

    Args:
        code: Python source. Variables and imports persist between calls.
    """
    execution = await ctx.context.run_code(code)
    output = execution.stdout + (execution.text or "")
    if execution.error:
        output += f"{execution.error.name}: {execution.error.value}"
    print(f"[{ctx.context.id}] run_python:\n{code}\n-> {output.strip()}")
    return output


def scripted_model() -> ScriptedModel:
    """Stands in for the LLM: calls run_python, then answers from what the tool returned."""
    code = (
        "primes = [n for n in range(2, 1000) if all(n % d for d in range(2, int(n ** 0.5) + 1))]\n"
        "print(sum(p * p for p in primes))"
    )

    def answer(call: ModelCall) -> list[TResponseOutputItem]:
        # The model's input is the conversation so far: the tool's output is its last item.
        items = reversed(call.input)
        output = next(i["output"] for i in items if i.get("type") == "function_call_output")
        return [assistant_message(f"The sum of the squares of the primes below 1000 is {output.strip()}.")]

    return ScriptedModel([
        [function_call("run_python", {"code": code}, call_id="call-1")],  # 1st call: use the tool
        ModelStep.respond(answer),  # 2nd call: answer from its output
    ])


async def main() -> int:
    real = bool(os.environ.get("OPENAI_API_KEY"))
    agent = Agent[AsyncSandbox](
        name="analyst",
        instructions="Compute with the run_python tool, never from memory; answer with the number.",
        tools=[run_python],
        model=os.environ.get("OPENAI_MODEL", "gpt-5-mini") if real else scripted_model(),
    )
    template = os.environ.get("PANDASTACK_TEMPLATE", "base")
    async with AsyncPandaStack() as client, client.sandboxes.create(
        template=template, ttl_seconds=600, metadata={"example": "openai-agents"}
    ) as sandbox:  # killed when the block ends
        # The sandbox is the run's context: every tool call gets it.
        run_config = RunConfig(tracing_disabled=not real)  # traces go to OpenAI: only with its key
        result = await Runner.run(agent, QUESTION, context=sandbox, run_config=run_config)
    print(f"answer: {result.final_output}")
    if EXPECTED not in result.final_output:
        print(f"expected the answer to contain {EXPECTED}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
