"""Spot economics: deadline-aware spot policies (`policy`), trace loading (`traces`) and the
reference simulator (`simulate`). Pure and stdlib-only. The offline optimum the policies are
measured against needs numpy and lives outside the package, in benchmarks/spot_optimum.py."""
