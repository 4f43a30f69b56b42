"""Prometheus metrics of the controller (`serve --metrics-port`). One registry per controller so
tests and several controllers in one process do not collide."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from ..domain.plan import Plan
from ..domain.savings import Ledger


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.nodes_on = Gauge("peakpack_nodes_on", "Powered nodes after the last epoch", registry=self.registry)
        self.power_w = Gauge("peakpack_power_watts", "Modelled cluster power after the last plan",
                             registry=self.registry)
        self.energy_j = Counter("peakpack_energy_joules", "Node energy by source: rapl and dcmi are measured, "
                                "model is the power curve at the measured load", ["node", "source"],
                                registry=self.registry)
        self.migrations = Counter("peakpack_migrations", "Finished migrations by final state", ["state"],
                                  registry=self.registry)
        self.power_actions = Counter("peakpack_power_actions", "Power actions by kind and result",
                                     ["action", "state"], registry=self.registry)
        self.plan_seconds = Histogram("peakpack_plan_seconds", "Solver time per epoch", registry=self.registry,
                                      buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.epochs = Counter("peakpack_epochs", "Epochs by outcome", ["outcome"], registry=self.registry)
        self.saved_j = Counter("peakpack_energy_saved_joules", "Energy saved by switching nodes off, measured: each "
                               "node's idle power from its counter x the time it stayed off, by counter source "
                               "(rapl: the CPU package, dcmi: the wall; never add the two)", ["source"],
                               registry=self.registry)
        self.spent_j = Counter("peakpack_energy_spent_joules", "Measured energy of the migrations and wakes that the "
                               "savings cost, by counter source; net saved = saved - spent", ["source"],
                               registry=self.registry)
        #: ledger totals already counted, per source (None until the first look: counting starts then)
        self._ledger_seen: dict[str, tuple[float, float]] | None = None
        self.qos_events = Counter("peakpack_qos_events", "Events of the nodes' QoS guards (cpu_suppress, mem_evict, "
                                  "...) and the controller's restarts, by node and kind", ["node", "kind"],
                                  registry=self.registry)

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        start_http_server(port, addr=addr, registry=self.registry)

    def observe_ledger(self, book: Ledger) -> None:
        """Add what the savings ledger gained since the last look (the first look only sets the
        start: the counters count from this process's start, as Prometheus counters do)."""
        now = {source: (t.saved_j, t.spent_j) for source, t in book.total.items() if source != "none"}
        if self._ledger_seen is not None:
            for source, (saved, spent) in now.items():
                was_saved, was_spent = self._ledger_seen.get(source, (0.0, 0.0))
                self.saved_j.labels(source).inc(max(0.0, saved - was_saved))
                self.spent_j.labels(source).inc(max(0.0, spent - was_spent))
        self._ledger_seen = now

    def observe_plan(self, plan: Plan) -> None:
        self.plan_seconds.observe(plan.solver.seconds)
        self.nodes_on.set(plan.after.nodes_on)
        self.power_w.set(plan.after.power_w)
