// Preview URLs against a real server: a web server inside the sandbox reached at the URL the SDK
// returns, through the server's preview proxy. `PANDASTACK_PROXY` (set by scripts/dev-server.sh)
// is where the proxy listens: `*.localhost` names need not resolve on the test machine, so the
// request goes to that address with the preview host in its Host header.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";

import { SandboxGuard } from "./helpers.mjs";

const PROXY = process.env.PANDASTACK_PROXY;
if (!PROXY) throw new Error("PANDASTACK_PROXY is not set (scripts/dev-server.sh prints it)");
const [PROXY_HOST, PROXY_PORT] = PROXY.split(":");

/** GET `path` at preview `url` through the proxy; resolves { status, body }. */
function get(url, path, token) {
  const headers = { host: new URL(url).host };
  if (token) headers["x-pandastack-access-token"] = token;
  return new Promise((resolve, reject) => {
    const req = http.get({ host: PROXY_HOST, port: Number(PROXY_PORT), path, headers }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString("utf8") }));
    });
    req.on("error", reject);
  });
}

const guard = new SandboxGuard();
let sb;

before(async () => {
  sb = await guard.create({ metadata: { case: "preview" } });
  await sb.files.write("/srv/www/index.html", "hello from the sandbox\n");
  await sb.exec("setsid python3 -m http.server 8000 --bind 127.0.0.1 -d /srv/www </dev/null >/dev/null 2>&1 &", { check: true });
  const deadline = Date.now() + 60_000;
  for (;;) {
    const r = await sb.exec(`python3 -c "import socket; socket.create_connection(('127.0.0.1', 8000))"`);
    if (r.exitCode === 0) break;
    assert.ok(Date.now() < deadline, "the web server did not start");
    await new Promise((r) => setTimeout(r, 200));
  }
});

test("getUrl reaches a server in the sandbox; private by token, public on request", async () => {
  const url = await sb.getUrl(8000);
  assert.ok(new URL(url).hostname.startsWith(`8000-${sb.id}.`), url);
  const p = await sb.getPort(8000);
  assert.deepEqual([p.url, p.port, p.public, p.token.length], [url, 8000, false, 32]);

  assert.equal((await get(url, "/")).status, 401);
  const ok = await get(url, "/index.html", p.token);
  assert.deepEqual([ok.status, ok.body], [200, "hello from the sandbox\n"]);

  assert.equal((await sb.setPortPublic(8000)).public, true);
  assert.equal((await get(url, "/index.html")).status, 200);
  assert.equal((await sb.setPortPublic(8000, false)).public, false);
  assert.equal((await get(url, "/index.html")).status, 401);

  const closed = await get(await sb.getUrl(8001), "/", p.token);
  assert.equal(closed.status, 502);
  assert.equal(JSON.parse(closed.body).error.code, "port_not_listening");
});
