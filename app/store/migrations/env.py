"""Alembic environment: migrations run on the connection the caller hands over (see
app/store/db.py), never on one they open themselves."""

from alembic import context

from app.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
)
with context.begin_transaction():
    context.run_migrations()
