"""Tests of launcher/config/: the user's settings."""
