"""The catalog: typed `Offer` rows (offer.py), the bundled snapshot (data/), its build
step (`python -m launcher.catalog.build`) and the fast query API (query.py).

Nothing is imported here, so `from launcher.catalog import query` loads only what a
query needs (no csv parsing, no pydantic).
"""
