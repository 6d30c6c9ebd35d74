// Managed PostgreSQL against a real server with real guests: ONE database for the file (creates
// are slow under emulation; the first one on a server bakes the `postgres` template), deleted at
// the end also when a test fails. Queries over HTTP with parameters, a SQL error as QueryError
// with its SQLSTATE, node-postgres through the TLS front, Neon's own driver
// (`@neondatabase/serverless`, HTTP mode) against the Neon-compatible `/sql`, a restore outside
// the restore window refused, and the delete.
//
// Needs PANDASTACK_DB_FRONT (host:port of the server's database front, printed by
// scripts/dev-server.sh); without it the tests are skipped. The connection string names
// `<id>.db.localhost`, which does not resolve: node-postgres connects to PANDASTACK_DB_FRONT and
// sends the host name as the TLS server name (SNI), which is how the front finds the database.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { neon, neonConfig } from "@neondatabase/serverless";
import pg from "pg";

import { DatabaseNotFoundError, InvalidArgumentError, QueryError } from "../dist/index.js";
import { BASE_URL, RUN_ID, client } from "./helpers.mjs";

const FRONT = process.env.PANDASTACK_DB_FRONT;
const skip = FRONT ? false : "PANDASTACK_DB_FRONT is not set (scripts/dev-server.sh prints it)";
const ps = client();
const name = `ts_${RUN_ID}`;

/** A node-postgres client for a connection string, through the front at PANDASTACK_DB_FRONT. */
function pgClient(uri) {
  const u = new URL(uri);
  const i = FRONT.lastIndexOf(":");
  return new pg.Client({
    host: FRONT.slice(0, i),
    port: Number(FRONT.slice(i + 1)),
    user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    database: decodeURIComponent(u.pathname.slice(1)),
    ssl: { rejectUnauthorized: false, servername: u.hostname },
    connectionTimeoutMillis: 120_000,
  });
}

describe("databases", { skip }, () => {
  let db;

  before(async () => {
    db = await ps.databases.create({ name, idleSeconds: 0 });
  });

  after(async () => {
    // Also after a failed create: the server may have made it before the request gave up.
    await ps.databases.delete(name);
  });

  test("the create answers a ready database, found by id and by name", async () => {
    assert.equal(db.name, name);
    assert.equal(db.user, name);
    assert.equal(db.version, 17);
    assert.equal(db.state, "ready");
    assert.equal(db.parent, null);
    assert.ok(db.sandboxId && db.volume && db.host && db.createdAt);
    assert.match(db.connectionUri, new RegExp(`^postgres://${name}:[^@]+@${db.id}\\.[^/]+/${name}\\?sslmode=require$`));
    assert.match(db.pooledUri, new RegExp(`@${db.id}-pooler\\.`));
    assert.equal((await ps.databases.get(name)).id, db.id);
    assert.ok((await ps.databases.list().toArray()).some((d) => d.id === db.id));
    assert.ok((await ps.databases.extensions()).versions["17"].some((e) => e.name === "vector"));
  });

  test("query with params over HTTP", async () => {
    const q = (sql, params) => ps.databases.query(db.id, sql, params);
    assert.equal((await q("create table notes (id int primary key, body text, tags jsonb)")).command, "CREATE");
    const ins = await q("insert into notes values ($1, $2, $3), ($4, $5, $6)", [1, "first", { k: ["a"] }, 2, "second", null]);
    assert.deepEqual([ins.command, ins.rowCount], ["INSERT", 2]);
    const r = await q("select id, body, tags from notes where id >= $1 order by id", [1]);
    assert.deepEqual(r.fields.map((f) => f.name), ["id", "body", "tags"]);
    assert.deepEqual(r.rows, [[1, "first", { k: ["a"] }], [2, "second", null]]);
    const big = await q("select 9007199254740993::int8 as n");
    assert.deepEqual(big.rows, [["9007199254740993"]], "int8 keeps its precision as text");
  });

  test("a SQL error is a QueryError with the SQLSTATE", async () => {
    const e = await ps.databases.query(db.id, "selec 1").catch((x) => x);
    assert.ok(e instanceof QueryError && !(e instanceof InvalidArgumentError), String(e));
    assert.deepEqual([e.status, e.code, e.sqlstate, e.severity], [400, "query_failed", "42601", "ERROR"]);
    assert.match(e.pgMessage, /syntax error/);
    const dup = await ps.databases.query(db.id, "insert into notes values ($1, $2)", [1, "dup"]).catch((x) => x);
    assert.ok(dup instanceof QueryError, String(dup));
    assert.equal(dup.sqlstate, "23505");
  });

  test("node-postgres through the TLS front", async () => {
    const c = pgClient(db.connectionUri);
    await c.connect();
    try {
      const r = await c.query("select body from notes where id = $1", [1]);
      assert.deepEqual(r.rows, [{ body: "first" }]);
      await c.query("insert into notes (id, body) values ($1, $2)", [3, "from node-postgres"]);
      // With `ssl` set, node-postgres refuses a server that does not speak TLS: this is TLS.
      const who = await c.query("select current_user as u, current_database() as d");
      assert.deepEqual(who.rows, [{ u: name, d: name }]);
    } finally {
      await c.end();
    }
    const seen = await ps.databases.query(db.id, "select body from notes where id = 3");
    assert.deepEqual(seen.rows, [["from node-postgres"]], "what the driver wrote, the HTTP query sees");
  });

  test("@neondatabase/serverless in HTTP mode, unmodified, against the database's /sql", async () => {
    // The driver posts to `https://<host>/sql`; here the API serves it at `<http_url>/sql` on
    // plain HTTP, which is what `fetchEndpoint` is for. The password in the connection string
    // is what logs in: no API key.
    neonConfig.fetchEndpoint = () => `${db.httpUrl}/sql`;
    assert.ok(db.httpUrl.startsWith(BASE_URL), `${db.httpUrl} is served by ${BASE_URL}`);
    const sql = neon(db.connectionUri);
    assert.deepEqual(await sql`select body from notes where id = ${1}`, [{ body: "first" }]);
    const [ins, count] = await sql.transaction([
      sql`insert into notes (id, body) values (${4}, ${"from the Neon driver"})`,
      sql`select count(*)::int as n from notes`,
    ]);
    assert.deepEqual([ins, count], [[], [{ n: 4 }]]);
    const full = await neon(db.connectionUri, { fullResults: true, arrayMode: true })`select id, body from notes where id = ${4}`;
    assert.deepEqual(full.rows, [[4, "from the Neon driver"]]);
    assert.deepEqual(full.fields.map((f) => f.name), ["id", "body"]);
    const bad = await sql`selec 1`.catch((x) => x);
    assert.equal(bad.code, "42601", String(bad));
    const wrong = db.connectionUri.replace(/:[^:@]+@/, ":wrong@");
    const denied = await neon(wrong)`select 1`.catch((x) => x);
    assert.equal(denied.code, "28P01", String(denied));
  });

  test("a restore outside the restore window is refused (422) and names the window", async () => {
    // No archive needed: 2001 is before any base backup.
    const e = await ps.databases.restore(db.id, new Date(Date.UTC(2001, 0, 1))).catch((x) => x);
    assert.ok(e instanceof InvalidArgumentError, String(e));
    assert.deepEqual([e.status, e.code], [422, "invalid_argument"]);
    assert.match(e.message, /window|base backup/);
  });

  test("delete, then it is gone", async () => {
    assert.equal(await ps.databases.delete(db.id), true);
    const e = await ps.databases.get(db.id).catch((x) => x);
    assert.ok(e instanceof DatabaseNotFoundError, String(e));
    assert.equal(e.code, "database_not_found");
    assert.equal(await ps.databases.delete(db.id), false);
  });
});
