"""Benchmarks (run as scripts: `python benchmarks/NAME.py`) and the test/benchmark-only helpers
they share with tests/ (imported as `benchmarks.MODULE` from the repository root)."""
