"""Spot economics: deadline-aware spot policies (`policy`), trace loading (`traces`), the reference
simulator (`simulate`) and the offline optimum (`optimum`). Pure and stdlib-only except
`optimum`, which imports numpy lazily."""
