// Shared setup of the tests that talk to a real PandaStack server with real VMs.
//
//   PANDASTACK_BASE_URL       e.g. http://127.0.0.1:18282 (from scripts/dev-server.sh)
//   PANDASTACK_API_KEY        pds_…
//   PANDASTACK_TEST_TEMPLATE  a template with python3, e.g. `minimal`
//
// Every sandbox a test creates goes through `SandboxGuard`, which kills them all (and deletes
// their snapshots) in an `after` hook; each has a TTL, so a crashed run still cleans up.
import { after } from "node:test";
import { randomUUID } from "node:crypto";

import { NotFoundError, PandaStack } from "../dist/index.js";

const missing = ["PANDASTACK_BASE_URL", "PANDASTACK_API_KEY", "PANDASTACK_TEST_TEMPLATE"].filter((k) => !process.env[k]);
if (missing.length > 0) {
  throw new Error(
    `these tests need a real PandaStack server; set ${missing.join(", ")} ` +
      `(e.g. eval "$(scripts/dev-server.sh start tssdk 18282)"; export PANDASTACK_TEST_TEMPLATE=minimal)`,
  );
}

export const BASE_URL = process.env.PANDASTACK_BASE_URL;
export const API_KEY = process.env.PANDASTACK_API_KEY;
export const TEMPLATE = process.env.PANDASTACK_TEST_TEMPLATE;
/** Marks this run's sandboxes (metadata `ts-sdk-run`). */
export const RUN_ID = randomUUID().slice(0, 8);
/** TTL of test sandboxes: long enough for a slow TCG run, short enough to clean up leftovers. */
export const TEST_TTL_SECONDS = 900;

export function client(opts = {}) {
  return new PandaStack({ apiKey: API_KEY, baseUrl: BASE_URL, ...opts });
}

/** Kills every sandbox it tracked when the test file ends. */
export class SandboxGuard {
  constructor(c = client()) {
    this.client = c;
    this.sandboxes = [];
    after(() => this.killAll());
  }

  track(sb) {
    this.sandboxes.push(sb);
    return sb;
  }

  async create(opts = {}) {
    const sb = await this.client.sandboxes.create({
      template: TEMPLATE,
      ttlSeconds: TEST_TTL_SECONDS,
      ...opts,
      metadata: { "ts-sdk-run": RUN_ID, ...(opts.metadata ?? {}) },
    });
    return this.track(sb);
  }

  /** Kills the tracked sandboxes, then deletes the snapshots taken of them (forks make one). */
  async killAll() {
    const all = this.sandboxes.splice(0);
    const ids = new Set(all.map((sb) => sb.id));
    const results = await Promise.allSettled(all.map((sb) => sb.kill()));
    const snaps = (await this.client.snapshots.list().toArray()).filter((s) => ids.has(s.sandboxId));
    const gone = (e) => {
      if (!(e instanceof NotFoundError)) throw e;
    };
    results.push(...(await Promise.allSettled(snaps.map((s) => this.client.snapshots.delete(s.id).catch(gone)))));
    const failed = results.filter((r) => r.status === "rejected");
    if (failed.length > 0) throw new AggregateError(failed.map((f) => f.reason), "cleanup: some sandboxes or snapshots could not be removed");
  }
}

export async function sha256Hex(bytes) {
  const { createHash } = await import("node:crypto");
  return createHash("sha256").update(bytes).digest("hex");
}
