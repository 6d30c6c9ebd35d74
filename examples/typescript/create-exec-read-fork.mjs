// Create a sandbox, run code, write and read a file, then fork it and show that the fork has
// its own copy of everything.
//
//   (cd sdk/typescript && npm ci && npm run build)
//   PANDASTACK_API_KEY=pds_… PANDASTACK_BASE_URL=http://127.0.0.1:8080 node examples/typescript/create-exec-read-fork.mjs
import { PandaStack } from "../../sdk/typescript/dist/index.js";

const client = new PandaStack(); // PANDASTACK_API_KEY, PANDASTACK_BASE_URL
const template = process.env.PANDASTACK_TEMPLATE ?? "base";

const sandbox = await client.sandboxes.create({ template, ttlSeconds: 600, metadata: { example: "create-exec-read-fork" } });
const children = [];
try {
  console.log(`sandbox ${sandbox.id} ready in ${sandbox.data.bootMs} ms (${sandbox.data.bootMode})`);

  const r = await sandbox.exec("python3 -c 'print(2 ** 10)'", { timeoutSeconds: 30 });
  console.log(`python says ${r.stdout.trim()} (exit ${r.exitCode}, ${r.durationMs} ms)`);

  await sandbox.filesystem.write("/tmp/notes.txt", "hello from the parent\n");
  console.log(`read back: ${(await sandbox.filesystem.read("/tmp/notes.txt")).trim()}`);

  const branch = await sandbox.fork();
  children.push(branch);
  await branch.filesystem.write("/tmp/notes.txt", "hello from the fork\n");
  console.log(`fork ${branch.id}: ${(await branch.filesystem.read("/tmp/notes.txt")).trim()}`);
  console.log(`parent still: ${(await sandbox.filesystem.read("/tmp/notes.txt")).trim()}`);
} finally {
  await Promise.all([sandbox, ...children].map((s) => s.kill()));
}
