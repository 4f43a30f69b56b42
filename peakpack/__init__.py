"""peakpack: keeps a cluster of Docker hosts packed at their peak energy efficiency.

One namespace for the design card's folders, which stay where the card puts them (setuptools'
`package-dir` in pyproject.toml maps each): `peakpack.orchestrator` (the domain, deciding,
observing, acting and the faces), `peakpack.migrate`, `peakpack.power`, `peakpack.db`,
`peakpack.inventory` (data) and `peakpack.lab`. docs/architecture.md is the map.
"""
