"""The live web page of `peakpack serve --http-port` and `peakpack web`: server-rendered tables of
nodes, plans, migrations and power events, energy charts, and approve/reject for RECOMMENDED plans.

Reads the store like `peakpack history`; approving a plan goes through `orchestrator.apply`."""
