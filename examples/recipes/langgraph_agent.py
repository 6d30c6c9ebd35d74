"""LangChain + LangGraph: a tool-calling agent whose tool runs Python in a PandaStack sandbox.

The agent is the usual two-node graph: the chat model, and LangGraph's ToolNode that runs the
tool calls the model makes, looping back to the model until it answers without one. Its one tool,
`run_python`, runs code in the sandbox's persistent Python interpreter (a microVM of its own).
The script exits 1 unless the answer has the number the sandbox computed.

Without OPENAI_API_KEY the chat model is scripted (a langchain_core chat model, below): it asks
for `run_python` first, then answers from the tool's output, so the recipe runs with no key.
With a real model:

    pip install ./sdk/python -r examples/recipes/requirements.txt
    export PANDASTACK_BASE_URL=http://127.0.0.1:8080 PANDASTACK_API_KEY=pds_…
    OPENAI_API_KEY=sk-… [OPENAI_MODEL=gpt-5-mini] python3 examples/recipes/langgraph_agent.py
"""

import os
import sys
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pandastack import PandaStack, Sandbox

QUESTION = "What is the sum of the squares of all prime numbers below 1000?"
EXPECTED = "49345379"


class ScriptedChatModel(BaseChatModel):
    """Stands in for the LLM: calls run_python, then answers from what the tool returned.
    (langchain_core's fake models replay fixed replies; this one reads the tool's output.)"""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ScriptedChatModel":
        return self  # the script knows its one tool

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        last = messages[-1]  # the conversation so far: the tool's output last, once it ran
        if isinstance(last, ToolMessage):
            reply = AIMessage(f"The sum of the squares of the primes below 1000 is {last.text.strip()}.")
        else:
            code = (
                "primes = [n for n in range(2, 1000) if all(n % d for d in range(2, int(n ** 0.5) + 1))]\n"
                "print(sum(p * p for p in primes))"
            )
            reply = AIMessage("", tool_calls=[{"name": "run_python", "args": {"code": code}, "id": "call-1"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def chat_model() -> BaseChatModel:
    if os.environ.get("OPENAI_API_KEY"):
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model=os.environ.get("OPENAI_MODEL", "gpt-5-mini"))
    return ScriptedChatModel()


def build_agent(sandbox: Sandbox) -> Any:
    @tool
    def run_python(code: str) -> str:
        """Run Python code in a sandbox; returns what it printed and the value of a final
        expression. Variables and imports persist between calls."""
        execution = sandbox.run_code(code)
        output = execution.stdout + (execution.text or "")
        if execution.error:
            output += f"{execution.error.name}: {execution.error.value}"
        print(f"[{sandbox.id}] run_python:\n{code}\n-> {output.strip()}")
        return output

    model = chat_model().bind_tools([run_python])

    def call_model(state: MessagesState) -> dict:
        system = ("system", "Compute with the run_python tool, never from memory; answer with the number.")
        return {"messages": [model.invoke([system, *state["messages"]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([run_python]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)  # tool calls → "tools", none → the end
    graph.add_edge("tools", "model")
    return graph.compile()


def main() -> int:
    client = PandaStack()
    template = os.environ.get("PANDASTACK_TEMPLATE", "base")
    metadata = {"example": "langgraph"}
    # The sandbox is killed when the block ends.
    with client.sandboxes.create(template=template, ttl_seconds=600, metadata=metadata) as sandbox:
        state = build_agent(sandbox).invoke({"messages": [("user", QUESTION)]})
    answer = state["messages"][-1].content
    print(f"answer: {answer}")
    if EXPECTED not in answer:
        print(f"expected the answer to contain {EXPECTED}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
