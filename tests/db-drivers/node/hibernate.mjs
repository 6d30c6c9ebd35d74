// A hibernated database's first connection with the driver's default timeouts (postgres.js:
// connect_timeout 30 s; pg: no connect timeout): the front wakes the VM. Run by
// scripts/test-db-drivers.sh after the other suites (`node --test node/hibernate.mjs`).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import postgres from 'postgres';
import pg from 'pg';
import { ENDPOINTS, api, database, uriOf, pgConfig, waitState } from './common.mjs';

/** Writes `mark` over the HTTP query API, then hibernates the database's VM. */
async function hibernate(mark) {
  const d = await database();
  const q = `/v1/databases/${d.id}/query`;
  await api('POST', q, { sql: 'create table if not exists wakes (mark text primary key)' });
  await api('POST', q, { sql: 'insert into wakes values ($1)', params: [mark] });
  await api('POST', `/v1/sandboxes/${d.sandbox_id}/hibernate`);
  await waitState(d.id, 'hibernated', 120_000);
  return d;
}

for (const endpoint of ENDPOINTS) {
  test(`postgres.js wakes a hibernated database (${endpoint})`, async () => {
    const mark = `postgresjs-${endpoint}`;
    const d = await hibernate(mark);
    const sql = postgres(uriOf(d, endpoint), { max: 1 }); // default connect_timeout
    const t0 = Date.now();
    try {
      const [row] = await sql`select mark from wakes where mark = ${mark}`;
      assert.equal(row.mark, mark);
      console.log(`postgres.js ${endpoint}: woke and answered in ${(Date.now() - t0) / 1000}s`);
    } finally {
      await sql.end();
    }
  });

  test(`pg wakes a hibernated database (${endpoint})`, async () => {
    const mark = `pg-${endpoint}`;
    const d = await hibernate(mark);
    const c = new pg.Client(pgConfig(uriOf(d, endpoint))); // default: no connect timeout
    const t0 = Date.now();
    await c.connect();
    try {
      const { rows } = await c.query({ name: 'wake_mark', text: 'select mark from wakes where mark = $1', values: [mark] });
      assert.equal(rows[0].mark, mark);
      console.log(`pg ${endpoint}: woke and answered in ${(Date.now() - t0) / 1000}s`);
    } finally {
      await c.end();
    }
  });
}
