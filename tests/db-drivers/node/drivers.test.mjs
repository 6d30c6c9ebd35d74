// Node drivers on both endpoints of one database: postgres.js with prepared statements, pg with
// named statements, Drizzle ORM over pg, and @neondatabase/serverless over HTTP (Neon's /sql).
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import postgres from 'postgres';
import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { pgTable, integer, text } from 'drizzle-orm/pg-core';
import { and, eq, gte, sql as dsql } from 'drizzle-orm';
import { neon, neonConfig } from '@neondatabase/serverless';
import { ENDPOINTS, database, uriOf, pgConfig, occupy, table } from './common.mjs';

const db = await database();
assert.equal(db.state, 'ready');

for (const endpoint of ENDPOINTS) {
  const uri = uriOf(db, endpoint);
  const pooled = endpoint === 'pooled';

  describe(endpoint, () => {
    test('postgres.js: prepared statements in and across transactions', async () => {
      const t = table('pjs', endpoint);
      // One connection, so every query of the test shares its prepared statements.
      const sql = postgres(uri, { prepare: true, max: 1, onnotice: () => {} });
      try {
        await sql.unsafe(`drop table if exists ${t}`);
        await sql.unsafe(`create table ${t} (id int primary key, v text)`);
        const byId = (tx, i) => tx`select v as w from ${tx(t)} where id = ${i}`;
        const pid = await sql.begin(async (tx) => {
          for (let i = 0; i < 100; i++) await tx`insert into ${tx(t)} ${tx({ id: i, v: `v${i}` })}`;
          const [{ n }] = await tx`select count(*)::int as n from pg_prepared_statements
            where statement like ${`insert into "${t}"%`}`;
          assert.equal(n, 1, 'the insert was parsed once');
          assert.equal((await byId(tx, 99))[0].w, 'v99'); // parsed here, used after the switch
          const [{ p }] = await tx`select pg_backend_pid() as p`;
          return p;
        });
        const release = pooled ? await occupy(uri, pid) : async () => {};
        try {
          // Statements on their own and in short transactions. On its own, postgres.js
          // re-prepares a statement the server says it does not know (and so survives a pooler
          // that does not carry statements over); in a transaction that error aborts it.
          for (let i = 0; i < 50; i++) {
            const [{ w }] = await sql.begin((tx) => byId(tx, i));
            assert.equal(w, `v${i}`);
            const [{ v }] = await sql`select v from ${sql(t)} where id = ${i}`;
            assert.equal(v, `v${i}`);
          }
          if (pooled) {
            const [{ p }] = await sql`select pg_backend_pid() as p`;
            assert.notEqual(p, pid, 'ran on another server connection');
          }
        } finally {
          await release();
        }
        const [{ n, s }] = await sql`select count(*)::int as n, sum(id)::int as s from ${sql(t)}`;
        assert.deepEqual([n, s], [100, 4950]);
      } finally {
        await sql.end();
      }
    });

    test('pg: named prepared statements in and across transactions', async () => {
      const t = table('npg', endpoint);
      const c = new pg.Client(pgConfig(uri));
      await c.connect();
      try {
        await c.query(`drop table if exists ${t}`);
        await c.query(`create table ${t} (id int primary key, v text)`);
        const ins = (i) => ({ name: `ins_${t}`, text: `insert into ${t} values ($1, $2)`, values: [i, `v${i}`] });
        const get = (i) => ({ name: `get_${t}`, text: `select v from ${t} where id = $1`, values: [i] });
        await c.query('begin');
        for (let i = 0; i < 100; i++) await c.query(ins(i));
        const { rows } = await c.query(
          'select count(*)::int as n from pg_prepared_statements where statement like $1',
          [`insert into ${t} %`],
        );
        assert.equal(rows[0].n, 1, 'parsed once, bound 100 times');
        const pid = (await c.query('select pg_backend_pid() as p')).rows[0].p;
        await c.query('commit');
        const release = pooled ? await occupy(uri, pid) : async () => {};
        try {
          for (let i = 100; i < 150; i++) await c.query(ins(i)); // each its own transaction
          for (let i = 0; i < 150; i += 7) assert.equal((await c.query(get(i))).rows[0].v, `v${i}`);
          if (pooled) assert.notEqual((await c.query('select pg_backend_pid() as p')).rows[0].p, pid);
        } finally {
          await release();
        }
        const r = await c.query(`select count(*)::int as n from ${t}`);
        assert.equal(r.rows[0].n, 150);
      } finally {
        await c.end();
      }
    });

    test('Drizzle ORM over node-postgres: insert, select, update, a named prepared query', async () => {
      const name = table('drz_items', endpoint);
      const items = pgTable(name, {
        id: integer('id').primaryKey(),
        title: text('title').notNull(),
        qty: integer('qty').notNull(),
      });
      const pool = new pg.Pool({ ...pgConfig(uri), max: 2 });
      const orm = drizzle(pool);
      try {
        await orm.execute(dsql.raw(`drop table if exists ${name}`));
        await orm.execute(dsql.raw(`create table ${name} (id int primary key, title text not null, qty int not null)`));
        const made = await orm
          .insert(items)
          .values(Array.from({ length: 10 }, (_, i) => ({ id: i, title: `item ${i}`, qty: i * 3 })))
          .returning({ id: items.id });
        assert.equal(made.length, 10);
        const big = await orm.select().from(items).where(gte(items.qty, 21)).orderBy(items.id);
        assert.deepEqual(big.map((r) => r.title), ['item 7', 'item 8', 'item 9']);
        await orm.update(items).set({ title: 'renamed' }).where(eq(items.id, 9));
        const byId = orm
          .select({ title: items.title })
          .from(items)
          .where(and(eq(items.id, dsql.placeholder('id')), gte(items.qty, 0)))
          .prepare(`by_id_${endpoint}`);
        for (let i = 0; i < 10; i++) {
          const [row] = await byId.execute({ id: i });
          assert.equal(row.title, i === 9 ? 'renamed' : `item ${i}`);
        }
      } finally {
        await pool.end();
      }
    });

    test('@neondatabase/serverless over HTTP: queries and a transaction', async () => {
      neonConfig.fetchEndpoint = () => `${db.http_url}/sql`;
      const sql = neon(uri);
      const t = table('neon', endpoint);
      await sql.query(`drop table if exists ${t}`);
      await sql.query(`create table ${t} (id int primary key, body text, tags jsonb, big int8)`);
      const n = 7;
      const rows = await sql`select ${n}::int * 6 as answer, ${'x'}::text as s`;
      assert.deepEqual(rows, [{ answer: 42, s: 'x' }]);
      const res = await sql.transaction([
        sql.query(`insert into ${t} values ($1, $2, $3, $4)`, [1, 'one', JSON.stringify({ a: [1] }), '9007199254740993']),
        sql.query(`insert into ${t} values ($1, $2, $3, $4)`, [2, 'two', null, null]),
        sql.query(`select id, body, tags, big from ${t} order by id`),
      ]);
      assert.deepEqual(res[2], [
        { id: 1, body: 'one', tags: { a: [1] }, big: '9007199254740993' },
        { id: 2, body: 'two', tags: null, big: null },
      ]);
      // A failing statement rolls the whole transaction back.
      await assert.rejects(
        sql.transaction([sql.query(`insert into ${t} values (3, 'three')`), sql.query('select 1/0')]),
        /division by zero/,
      );
      const [{ count }] = await sql.query(`select count(*)::int as count from ${t}`);
      assert.equal(count, 2);
    });

    // Its WebSocket mode (Pool/Client over /v2): tests/neon-ws, run by the same script.
  });
}
