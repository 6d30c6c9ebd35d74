// Shared by the Node driver tests (scripts/test-db-drivers.sh): the run's one database (made by
// the script, named by PANDASTACK_DBDRIVERS_ID) and its two endpoints.
//
// The connection strings name `<id>.db.localhost` and `<id>-pooler.db.localhost`, which libc
// does not resolve. `dns.lookup` (what `net.connect` calls) sends `*.db.localhost` to the front
// (PANDASTACK_DB_FRONT): the drivers still send the name as TLS SNI, as they would with a
// wildcard DNS record in production.
import dns from 'node:dns';
import pg from 'pg';

export const ENDPOINTS = ['direct', 'pooled'];
const [frontHost] = process.env.PANDASTACK_DB_FRONT.split(':');
const realLookup = dns.lookup;
dns.lookup = function lookup(host, options, callback) {
  const h = typeof host === 'string' && host.endsWith('.db.localhost') ? frontHost : host;
  return realLookup.call(dns, h, options, callback);
};

export async function api(method, path, body) {
  const r = await fetch(process.env.PANDASTACK_BASE_URL + path, {
    method,
    headers: {
      authorization: `Bearer ${process.env.PANDASTACK_API_KEY}`,
      'content-type': 'application/json',
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

export async function database() {
  return api('GET', `/v1/databases/${process.env.PANDASTACK_DBDRIVERS_ID}`);
}

export function uriOf(db, endpoint) {
  return endpoint === 'direct' ? db.connection_uri : db.pooled_uri;
}

/** node-postgres's options for `uri` (TLS without verification: the front's certificate is
 * self-signed; `sslmode=require` in the URI alone makes pg verify it). */
export function pgConfig(uri) {
  const u = new URL(uri);
  u.searchParams.delete('sslmode');
  return { connectionString: u.toString(), ssl: { rejectUnauthorized: false } };
}

/**
 * Keeps other clients in open transactions until one of them holds backend `pid` (the server
 * connection PgBouncer gave the client under test last): that client's next transaction runs
 * on another server connection, where its prepared statements were never parsed. Returns a
 * function that releases them. On the direct endpoint there is nothing to hold.
 */
export async function occupy(uri, pid, tries = 6) {
  const held = [];
  const release = async () => {
    for (const c of held) await c.end().catch(() => {});
  };
  for (let i = 0; i < tries; i++) {
    const c = new pg.Client(pgConfig(uri));
    held.push(c);
    await c.connect();
    await c.query('begin');
    const { rows } = await c.query('select pg_backend_pid() as pid');
    if (rows[0].pid === pid) return release;
  }
  await release();
  throw new Error(`no other client got backend ${pid}`);
}

export function table(prefix, endpoint) {
  return `${prefix}_${endpoint}`;
}

export async function waitState(id, state, timeoutMs = 180_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const d = await api('GET', `/v1/databases/${id}`);
    if (d.state === state) return d;
    if (Date.now() > deadline) throw new Error(`database ${id} is ${d.state}, not ${state}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}
