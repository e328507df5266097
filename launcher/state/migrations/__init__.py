"""Alembic's scripts for the state DB (env.py, versions/): run by launcher/state/migrate.py."""
