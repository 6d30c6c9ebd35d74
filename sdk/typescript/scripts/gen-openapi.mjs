#!/usr/bin/env node
// Generates src/generated/openapi.ts (the wire types) from the server's contract,
// crates/pandastack-api/openapi.json, with openapi-typescript (a pinned devDependency).
//
//   npm run gen         writes src/generated/openapi.ts
//   npm run gen:check   regenerates into a temporary file and fails if the committed one differs
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const spec = resolve(root, "../../crates/pandastack-api/openapi.json");
const target = join(root, "src/generated/openapi.ts");
const check = process.argv.includes("--check");

// `--default-non-nullable false`: a field is required only when the schema says so (a default
// alone does not make it so); `--empty-objects-unknown`: a schema-less value ("any JSON") is
// `unknown`, not `Record<string, never>`.
const flags = ["--default-non-nullable", "false", "--empty-objects-unknown"];

function generate(out) {
  const cli = join(root, "node_modules/openapi-typescript/bin/cli.js");
  const r = spawnSync(process.execPath, [cli, relative(root, spec), ...flags, "-o", out], { cwd: root, stdio: ["ignore", "ignore", "inherit"] });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

if (!check) {
  generate(target);
} else {
  const dir = mkdtempSync(join(tmpdir(), "pandastack-openapi-"));
  try {
    const fresh = join(dir, "openapi.ts");
    generate(fresh);
    let committed = "";
    try {
      committed = readFileSync(target, "utf8");
    } catch {}
    if (committed !== readFileSync(fresh, "utf8")) {
      spawnSync("diff", ["-u", target, fresh], { stdio: "inherit" });
      console.error(`${relative(process.cwd(), target)} is stale: run \`npm run gen\` in sdk/typescript`);
      process.exit(1);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
