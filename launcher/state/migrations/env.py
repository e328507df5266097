"""Alembic's environment for the state DB: run programmatically by launcher/state/migrate.py
on a connection it has already opened (and begun a write transaction on), never from a
command line with an alembic.ini. Developers make a new revision with:

    python -m launcher.state.migrate revision "what changes"
"""

from __future__ import annotations

from alembic import context

from launcher.state.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite's ALTER TABLE is limited
    transaction_per_migration=False,
)
with context.begin_transaction():
    context.run_migrations()
