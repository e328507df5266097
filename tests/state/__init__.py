"""Tests of launcher/state/: the state DB and its file at rest."""
