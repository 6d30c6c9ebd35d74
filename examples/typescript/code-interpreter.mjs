// The code interpreter: run Python in a kernel that keeps its variables between calls, get rich
// results back (an object's PNG), see exceptions as data, stream output, and use a second
// context.
//
//   PANDASTACK_API_KEY=pds_… node examples/typescript/code-interpreter.mjs
import { PandaStack } from "../../sdk/typescript/dist/index.js";

const client = new PandaStack();
const template = process.env.PANDASTACK_TEMPLATE ?? "base";

// A real chart library returns a whole image from _repr_png_ (matplotlib figures come back too).
const chart = "class Chart:\n    def _repr_png_(self):\n        return b'\\x89PNG\\r\\n\\x1a\\n'\nChart()";

const sandbox = await client.sandboxes.create({ template, ttlSeconds: 300, metadata: { example: "code" } });
try {
  // 1. State survives between calls; the value of the final expression is a result.
  await sandbox.runCode("data = [3, 1, 4, 1, 5, 9, 2, 6]");
  let execution = await sandbox.runCode("print('sorting', len(data), 'numbers')\nsorted(data)");
  console.log(`stdout: ${execution.stdout.trim()} | result: ${execution.text}`);

  // 2. Rich results: PNG (base64, or bytes with pngBytes()), HTML, SVG, … next to the text.
  const bytes = (await sandbox.runCode(chart)).results[0].pngBytes();
  const signatureOk = bytes[0] === 0x89 && String.fromCharCode(...bytes.subarray(1, 4)) === "PNG";
  console.log(`png: ${bytes.length} bytes, signature ok: ${signatureOk}`);

  // 3. An exception is data, not a thrown error.
  execution = await sandbox.runCode("total = sum(data)\ntotal / 0");
  console.log(`error: ${execution.error.name}: ${execution.error.value}`);

  // 4. Streaming: the callbacks get output and results as they arrive.
  await sandbox.runCode("import time\nfor i in range(3):\n    print('step', i, flush=True)\n    time.sleep(0.2)\ntotal", {
    onStdout: (text) => process.stdout.write(`  live: ${text}`),
    onResult: (result) => console.log(`  live result: ${result.text}`),
  });

  // 5. A separate context is a kernel of its own: it does not see `data`.
  const context = await sandbox.createCodeContext();
  execution = await sandbox.runCode("'data' in dir()", { context });
  console.log(`context ${context.id} sees data: ${execution.text}`);
  await sandbox.deleteCodeContext(context);
  console.log("done");
} finally {
  await sandbox.kill();
}
