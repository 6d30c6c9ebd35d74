// Stream a command's output as it happens, two ways: an async iterator of typed events, and
// callbacks on a blocking exec.
//
//   PANDASTACK_API_KEY=pds_… node examples/typescript/streaming.mjs
import { PandaStack } from "../../sdk/typescript/dist/index.js";

const client = new PandaStack();
const template = process.env.PANDASTACK_TEMPLATE ?? "base";

const sandbox = await client.sandboxes.create({ template, ttlSeconds: 300, metadata: { example: "streaming" } });
try {
  const script = "for i in 1 2 3 4 5; do echo step $i; sleep 0.3; done; echo 'a warning' >&2; exit 2";

  for await (const ev of sandbox.execStream(script)) {
    switch (ev.type) {
      case "stdout":
        process.stdout.write(`[out] ${ev.data}`);
        break;
      case "stderr":
        process.stdout.write(`[err] ${ev.data}`);
        break;
      case "exit":
        console.log(`[exit] code ${ev.exitCode} after ${ev.durationMs} ms`);
        break;
    }
  }

  // Callbacks get chunks as they arrive (not necessarily whole lines).
  const result = await sandbox.exec(["python3", "-u", "-c", "import sys, time\nfor i in range(3):\n    sys.stdout.write(f'tick {i}\\n'); time.sleep(0.2)"], {
    onStdout: (data) => process.stdout.write(`[callback] ${data}`),
    onStderr: (data) => process.stderr.write(data),
  });
  console.log(`collected ${JSON.stringify(result.stdout)}, exit ${result.exitCode}`);
} finally {
  await sandbox.kill();
}
