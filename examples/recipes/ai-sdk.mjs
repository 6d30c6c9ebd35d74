// Vercel AI SDK: generateText with a tool that runs Python in a PandaStack sandbox.
//
// The model gets one tool, `runPython`, that runs code in the sandbox's persistent Python
// interpreter (a microVM of its own) and returns what it printed. generateText makes the tool
// call, sends the output back to the model and loops (up to 5 steps) until the model answers;
// the script exits 1 unless the answer has the number the sandbox computed.
//
// Without OPENAI_API_KEY the model is scripted (the AI SDK's MockLanguageModelV3 from `ai/test`):
// it asks for `runPython` first, then answers from the tool's output, so the recipe runs with no
// key. With a real model:
//
//   (cd sdk/typescript && npm ci && npm run build) && (cd examples/recipes && npm ci)
//   export PANDASTACK_BASE_URL=http://127.0.0.1:8080 PANDASTACK_API_KEY=pds_…
//   OPENAI_API_KEY=sk-… [OPENAI_MODEL=gpt-5-mini] node examples/recipes/ai-sdk.mjs
import { openai } from "@ai-sdk/openai";
import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

import { PandaStack } from "../../sdk/typescript/dist/index.js";

const QUESTION = "What is the sum of the squares of all prime numbers below 1000?";
const EXPECTED = "49345379";

// Stands in for the LLM: calls runPython, then answers from what the tool returned.
function scriptedModel() {
  const code =
    "primes = [n for n in range(2, 1000) if all(n % d for d in range(2, int(n ** 0.5) + 1))]\n" +
    "print(sum(p * p for p in primes))";
  const usage = { inputTokens: { total: 0 }, outputTokens: { total: 0 } };
  return new MockLanguageModelV3({
    doGenerate: async ({ prompt }) => {
      const last = prompt.at(-1); // the conversation so far: the tool's result comes last
      if (last.role === "tool") {
        const output = last.content.find((part) => part.type === "tool-result").output.value;
        const text = `The sum of the squares of the primes below 1000 is ${output.trim()}.`;
        return { content: [{ type: "text", text }], finishReason: { unified: "stop" }, usage, warnings: [] };
      }
      // A tool call, which generateText runs (its input is JSON, as a provider's would be).
      const input = JSON.stringify({ code });
      const call = { type: "tool-call", toolCallId: "call-1", toolName: "runPython", input };
      return { content: [call], finishReason: { unified: "tool-calls" }, usage, warnings: [] };
    },
  });
}

const client = new PandaStack();
const template = process.env.PANDASTACK_TEMPLATE ?? "base";
const sandbox = await client.sandboxes.create({ template, ttlSeconds: 600, metadata: { example: "ai-sdk" } });
let text;
try {
  const runPython = tool({
    description:
      "Run Python code in a sandbox; returns what it printed and the value of a final expression. " +
      "Variables and imports persist between calls.",
    inputSchema: z.object({ code: z.string().describe("Python source") }),
    execute: async ({ code }) => {
      const execution = await sandbox.runCode(code);
      let output = execution.stdout + (execution.text ?? "");
      if (execution.error) output += `${execution.error.name}: ${execution.error.value}`;
      console.log(`[${sandbox.id}] runPython:\n${code}\n-> ${output.trim()}`);
      return output;
    },
  });
  ({ text } = await generateText({
    model: process.env.OPENAI_API_KEY ? openai(process.env.OPENAI_MODEL ?? "gpt-5-mini") : scriptedModel(),
    system: "Compute with the runPython tool, never from memory; answer with the number.",
    prompt: QUESTION,
    tools: { runPython },
    stopWhen: stepCountIs(5),
  }));
} finally {
  await sandbox.kill();
}
console.log(`answer: ${text}`);
if (!text.includes(EXPECTED)) {
  console.error(`expected the answer to contain ${EXPECTED}`);
  process.exit(1);
}
