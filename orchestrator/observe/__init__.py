"""Observation: what the nodes look like now, over SSH (containers, counters, node facts)."""
