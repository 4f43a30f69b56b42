"""Trace-driven evaluation: replay PlanetLab VM traces on a simulated cluster under a placement
policy (the production planner or a published baseline) and report Beloglazov's metrics."""
