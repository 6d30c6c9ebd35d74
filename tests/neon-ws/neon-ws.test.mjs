// @neondatabase/serverless in its WebSocket mode (Pool, Client, interactive transactions)
// against a real PandaStack server and a real managed database, through the database front's
// PostgreSQL-over-WebSocket endpoint (wss://<front>/v2). Run by scripts/test-neon-ws.sh.
//
// Environment: PANDASTACK_BASE_URL, PANDASTACK_API_KEY, PANDASTACK_DB_FRONT (host:port of the
// database front) and PANDASTACK_DB_CA (its certificate, PEM: a dev server's self-signed one is
// <data dir>/db-tls/cert.pem). PANDASTACK_NEON_WS_DATABASE names an existing database to use
// instead of creating (and deleting) one.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";

import { Client, Pool, neonConfig } from "@neondatabase/serverless";
import WebSocket from "ws";

const base = need("PANDASTACK_BASE_URL");
const apiKey = need("PANDASTACK_API_KEY");
const front = need("PANDASTACK_DB_FRONT");
const ca = fs.readFileSync(need("PANDASTACK_DB_CA"));

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (see scripts/test-neon-ws.sh)`);
  return v;
}

// The driver's settings for PandaStack, as docs/databases.md gives them. The database's host
// name (<id>.db.<domain>) goes in `address`, so the front finds the database even though the
// socket is opened to an IP address here (*.db.localhost does not resolve through libc).
neonConfig.wsProxy = (host, port) => `${front}/v2?address=${host}:${port}`;
// Node 20 has no global WebSocket: the `ws` package, trusting the dev server's certificate and
// checking it against the database's name.
neonConfig.webSocketConstructor = class extends WebSocket {
  constructor(url, protocols) {
    const address = new URL(url).searchParams.get("address") ?? "";
    super(url, protocols, { ca, servername: address.replace(/:\d+$/, "") });
  }
};

async function api(method, path, body) {
  const r = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

let db;
let created = false;

before(async () => {
  const existing = process.env.PANDASTACK_NEON_WS_DATABASE;
  if (existing) {
    db = await api("GET", `/v1/databases/${existing}`);
  } else {
    db = await api("POST", "/v1/databases", { name: `neonws${Date.now().toString(36)}` });
    created = true;
  }
});

after(async () => {
  if (created && db) await api("DELETE", `/v1/databases/${db.id}`);
});

test("Pool: queries and parameters over the WebSocket", async () => {
  const pool = new Pool({ connectionString: db.connection_uri });
  try {
    const one = await pool.query("select 1 as one");
    assert.deepEqual(one.rows, [{ one: 1 }]);
    const n = await pool.query("select $1::int + 1 as n, $2::text as t", [41, "héllo"]);
    assert.deepEqual(n.rows, [{ n: 42, t: "héllo" }]);
    const who = await pool.query("select current_user as u, current_database() as d");
    assert.equal(who.rows[0].u, db.user);
  } finally {
    await pool.end();
  }
});

test("Pool: an interactive transaction rolls back and commits", async () => {
  const pool = new Pool({ connectionString: db.connection_uri });
  try {
    await pool.query("create table if not exists neon_ws_t (id int primary key, v text)");
    await pool.query("delete from neon_ws_t");
    const c = await pool.connect();
    try {
      await c.query("BEGIN");
      await c.query("insert into neon_ws_t values ($1, $2)", [1, "rolled back"]);
      const inside = await c.query("select v from neon_ws_t where id = 1");
      assert.deepEqual(inside.rows, [{ v: "rolled back" }], "seen inside the transaction");
      await c.query("ROLLBACK");
      const gone = await c.query("select count(*)::int as n from neon_ws_t");
      assert.equal(gone.rows[0].n, 0, "gone after ROLLBACK");

      await c.query("BEGIN");
      await c.query("insert into neon_ws_t values ($1, $2)", [2, "committed"]);
      // Not visible to another session before COMMIT.
      const other = await pool.query("select count(*)::int as n from neon_ws_t");
      assert.equal(other.rows[0].n, 0, "invisible to another connection before COMMIT");
      await c.query("COMMIT");
    } finally {
      c.release();
    }
    const after = await pool.query("select id, v from neon_ws_t order by id");
    assert.deepEqual(after.rows, [{ id: 2, v: "committed" }]);
  } finally {
    await pool.end();
  }
});

test("Client: connect, query, an error keeps the session, end", async () => {
  const client = new Client(db.connection_uri);
  await client.connect();
  try {
    const r = await client.query("select 'x' || $1 as s", ["y"]);
    assert.deepEqual(r.rows, [{ s: "xy" }]);
    await assert.rejects(client.query("select * from no_such_table"), (e) => e.code === "42P01");
    const again = await client.query("select 2 as two");
    assert.deepEqual(again.rows, [{ two: 2 }]);
  } finally {
    await client.end();
  }
});

test("Pool through PgBouncer (the -pooler host)", async () => {
  const pool = new Pool({ connectionString: db.pooled_uri });
  try {
    const r = await pool.query("select 3 as three");
    assert.deepEqual(r.rows, [{ three: 3 }]);
  } finally {
    await pool.end();
  }
});

test("a hibernated database wakes on the first WebSocket connection", async () => {
  const sandbox = (await api("GET", `/v1/databases/${db.id}`)).sandbox_id;
  await api("POST", `/v1/sandboxes/${sandbox}/hibernate`);
  assert.equal((await api("GET", `/v1/databases/${db.id}`)).state, "hibernated");
  const pool = new Pool({ connectionString: db.connection_uri });
  try {
    const t = performance.now();
    const r = await pool.query("select count(*)::int as n from neon_ws_t");
    console.log(`neon-ws: first query on a hibernated database ${(performance.now() - t).toFixed(0)} ms`);
    assert.equal(r.rows[0].n, 1, "the committed row survived hibernation");
  } finally {
    await pool.end();
  }
  assert.equal((await api("GET", `/v1/databases/${db.id}`)).state, "ready");
});

// With pipelineConnect = "password" (the default) `connect()` resolves before the server has
// answered; its refusal then comes as the client's "error" event and fails the first query.
async function refusal(uri) {
  const client = new Client(uri);
  const seen = new Promise((resolve) => client.on("error", resolve));
  const failed = client.connect().then(
    () => client.query("select 1").then(() => null, (e) => e),
    (e) => e,
  );
  const first = await Promise.race([seen, failed]);
  const e = first?.code ? first : await Promise.race([seen, new Promise((r) => setTimeout(r, 5000))]);
  await client.end().catch(() => {});
  return e;
}

test("a wrong password is PostgreSQL's refusal (28P01)", async () => {
  const uri = new URL(db.connection_uri);
  uri.password = "not-the-password";
  const e = await refusal(uri.toString());
  assert.equal(e?.code, "28P01", String(e));
  assert.match(e.message, /password authentication failed/);
});

test("a database that does not exist is 3D000", async () => {
  const uri = new URL(db.connection_uri);
  uri.hostname = uri.hostname.replace(/^[^.]+/, "nosuchdatabase");
  const e = await refusal(uri.toString());
  assert.equal(e?.code, "3D000", String(e));
  assert.match(e.message, /database nosuchdatabase does not exist/);
});

test("select 1 round trip over one WebSocket (p50 of 20)", async () => {
  const client = new Client(db.connection_uri);
  const t0 = performance.now();
  await client.connect();
  const connectMs = performance.now() - t0;
  try {
    await client.query("select 1");
    const times = [];
    for (let i = 0; i < 20; i++) {
      const t = performance.now();
      await client.query("select 1");
      times.push(performance.now() - t);
    }
    times.sort((a, b) => a - b);
    const p50 = (times[9] + times[10]) / 2;
    console.log(
      `neon-ws: connect ${connectMs.toFixed(1)} ms; select 1 round trip p50 ${p50.toFixed(2)} ms, ` +
        `min ${times[0].toFixed(2)} ms, max ${times[19].toFixed(2)} ms (20 queries)`,
    );
  } finally {
    await client.end();
  }
});
