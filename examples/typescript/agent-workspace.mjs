// An agent workspace that survives its sandbox: a durable volume holds the work, sandboxes come
// and go. Sandbox 1 sets up a project in /workspace (on the volume) and does the first step; it
// is deleted. Sandbox 2 mounts the same volume, finds the work where sandbox 1 left it and
// carries on. Finally the volume is backed up to the server's object store (restorable on any
// host with `client.volumes.create({ name, fromBackup: backup.id })`).
//
//   (cd sdk/typescript && npm ci && npm run build)
//   PANDASTACK_API_KEY=pds_… PANDASTACK_BASE_URL=http://127.0.0.1:8080 node examples/typescript/agent-workspace.mjs
import { randomUUID } from "node:crypto";

import { PandaStack } from "../../sdk/typescript/dist/index.js";

const client = new PandaStack(); // PANDASTACK_API_KEY, PANDASTACK_BASE_URL
const template = process.env.PANDASTACK_TEMPLATE ?? "base";
const name = `agent-ws-${randomUUID().slice(0, 8)}`;

const volume = await client.volumes.create({ name, sizeGb: 1 });
console.log(`volume ${volume.name}: ${volume.sizeGb} GiB on ${volume.host}`);
const workspace = [{ name, path: "/workspace" }];
const create = () => client.sandboxes.create({ template, ttlSeconds: 600, volumes: workspace, metadata: { example: "agent-workspace" } });
try {
  // Sandbox 1: set up the project and do the first step of the work.
  const first = await create();
  try {
    await first.files.write(
      "/workspace/project/fib.py",
      "import sys\na, b = 0, 1\nfor _ in range(int(sys.argv[1])):\n    a, b = b, a + b\nprint(a)\n",
    );
    const out = (await first.exec("cd /workspace/project && python3 fib.py 10", { check: true })).stdout.trim();
    await first.exec(`echo 'step 1 done: fib(10) = ${out}' >> /workspace/project/PROGRESS && sync`, { check: true });
    console.log(`sandbox 1 (${first.id}) wrote the project; fib(10) = ${out}`);
  } finally {
    await first.kill();
  }
  console.log(`sandbox 1 deleted; volume attached to: ${(await client.volumes.get(name)).attachedTo}`);

  // Sandbox 2: a fresh sandbox, the same workspace.
  const second = await create();
  try {
    const progress = (await second.files.read("/workspace/project/PROGRESS")).trim();
    console.log(`sandbox 2 (${second.id}) found: ${progress}`);
    const out = (await second.exec("cd /workspace/project && python3 fib.py 20", { check: true })).stdout.trim();
    await second.exec(`echo 'step 2 done: fib(20) = ${out}' >> /workspace/project/PROGRESS && sync`, { check: true });
    console.log(`progress now: ${(await second.files.read("/workspace/project/PROGRESS")).trim().split("\n").join(" | ")}`);
  } finally {
    await second.kill();
  }

  // Back the workspace up to the object store and wait for the upload.
  const backup = await client.volumes.backup(name, { wait: true, timeoutSeconds: 600 });
  console.log(`backup ${backup.id}: ${backup.state}, ${backup.bytesUploaded} bytes uploaded`);
} finally {
  await client.volumes.delete(name); // its backups stay in the object store
}
console.log("done");
