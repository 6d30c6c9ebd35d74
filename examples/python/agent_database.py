"""An agent's own PostgreSQL: a managed database with pgvector, used over HTTP.

The agent creates a database, loads the ``vector`` extension, stores a few documents with their
embeddings (``vector(3)`` here, to keep it short) through parameterised queries, asks for the
document nearest to a query embedding, and deletes the database. Any PostgreSQL driver could
connect to ``db.connection_uri`` instead (TLS, through the server's database front).

The first database on a server builds and bakes the ``postgres`` template: that create takes
minutes; later ones take seconds.

    PANDASTACK_BASE_URL=... PANDASTACK_API_KEY=... python3 examples/python/agent_database.py
"""

import uuid

from pandastack import PandaStack

client = PandaStack()  # PANDASTACK_API_KEY (or PANDASTACK_TOKEN), PANDASTACK_BASE_URL
name = f"agent_{uuid.uuid4().hex[:8]}"

db = client.databases.create(name)
print(f"database {db.name} ({db.id}): PostgreSQL {db.version}, {db.state}")
try:
    client.databases.query(db.id, "create extension if not exists vector")
    client.databases.query(
        db.id, "create table docs (id serial primary key, body text not null, embedding vector(3))"
    )
    docs = [
        ("how to bake bread", [0.9, 0.1, 0.0]),
        ("a guide to sourdough starters", [0.8, 0.2, 0.1]),
        ("rust borrow checker explained", [0.0, 0.1, 0.9]),
        ("postgres index tuning", [0.1, 0.9, 0.2]),
    ]
    for body, embedding in docs:
        # A list is sent as its JSON text, "[0.9,0.1,0.0]": pgvector's input format.
        client.databases.query(db.id, "insert into docs (body, embedding) values ($1, $2)", [body, embedding])
    print(f"stored {len(docs)} documents")

    question = [0.05, 0.15, 0.95]  # "something about programming languages"
    nearest = client.databases.query(
        db.id,
        "select body, round((embedding <-> $1::vector)::numeric, 3) as distance "
        "from docs order by embedding <-> $1::vector limit 1",
        [question],
    )
    body, distance = nearest.rows[0]
    print(f"nearest neighbour: {body} (distance {distance})")
finally:
    client.databases.delete(db.id)
print("database deleted")
print("done")
