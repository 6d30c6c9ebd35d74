// An agent's own PostgreSQL: a managed database with pgvector, used over HTTP. The agent creates
// a database, loads the `vector` extension, stores a few documents with their embeddings
// (`vector(3)` here, to keep it short) through parameterised queries, asks for the document
// nearest to a query embedding, and deletes the database. Any PostgreSQL driver could connect to
// `db.connectionUri` instead (TLS, through the server's database front).
//
// The first database on a server builds and bakes the `postgres` template: that create takes
// minutes; later ones take seconds.
//
//   (cd sdk/typescript && npm ci && npm run build)
//   PANDASTACK_API_KEY=pds_… PANDASTACK_BASE_URL=http://127.0.0.1:8080 node examples/typescript/agent-database.mjs
import { randomUUID } from "node:crypto";

import { PandaStack } from "../../sdk/typescript/dist/index.js";

const client = new PandaStack(); // PANDASTACK_API_KEY, PANDASTACK_BASE_URL
const name = `agent_${randomUUID().slice(0, 8)}`;

const db = await client.databases.create({ name });
console.log(`database ${db.name} (${db.id}): PostgreSQL ${db.version}, ${db.state}`);
try {
  const query = (sql, params) => client.databases.query(db.id, sql, params);
  await query("create extension if not exists vector");
  await query("create table docs (id serial primary key, body text not null, embedding vector(3))");
  const docs = [
    ["how to bake bread", [0.9, 0.1, 0.0]],
    ["a guide to sourdough starters", [0.8, 0.2, 0.1]],
    ["rust borrow checker explained", [0.0, 0.1, 0.9]],
    ["postgres index tuning", [0.1, 0.9, 0.2]],
  ];
  for (const [body, embedding] of docs) {
    // An array is sent as its JSON text, "[0.9,0.1,0]": pgvector's input format.
    await query("insert into docs (body, embedding) values ($1, $2)", [body, embedding]);
  }
  console.log(`stored ${docs.length} documents`);

  const question = [0.05, 0.15, 0.95]; // "something about programming languages"
  const nearest = await query(
    "select body, round((embedding <-> $1::vector)::numeric, 3) as distance from docs order by embedding <-> $1::vector limit 1",
    [question],
  );
  const [body, distance] = nearest.rows[0];
  console.log(`nearest neighbour: ${body} (distance ${distance})`);
} finally {
  await client.databases.delete(db.id);
}
console.log("database deleted");
console.log("done");
