"""What a plan predicts, so that the ledger can check it afterwards (`history plans`).

Energy saved over the forecast horizon (`PlannerSettings.forecast.window_seconds`): the plan is
replayed action by action and each action is credited with the drop in the cluster's modelled
power it causes (the nodes' power curves at their loads, as `cluster_metrics` computes the plan's
"before" and "after"), held over the horizon, minus its migration energy. The parts add up to
(before - after) x horizon - migration energy.

Frozen time of each migration: a least-squares line of frozen ms over the container's memory MB,
fitted per node pair (source -> target) to the SUCCEEDED migrations in the store once that pair
has `MIN_FIT_POINTS` of them: machines of one kind freeze the same gigabyte 3.7 s on one and
9-14 s on another (docs/migration.md, "Where the freeze's seconds go"), so a cluster's moves
cost what its own links and nodes made them cost. A pair with fewer migrations takes the line
fitted to the whole cluster's, and a cluster with fewer than `MIN_FIT_POINTS` the line measured on
the lab for the default route, pages straight to the target over TLS and cubic (docs/migration.md,
"The page streams over cubic": memcached with 1 GB / 2 GB of items froze 2.55-3.40 / 4.92-5.24 s). Each
prediction names which of the three it came from. Pure: data in, data out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

import numpy as np

from ..domain.model import MEASURED_SOURCES, ClusterSnapshot, Inventory, NodeLoad, cluster_metrics, node_loads
from ..domain.plan import ActionKind, Plan, apply_action
from ..domain.records import FrozenSample
from ..domain.settings import PlannerSettings

#: frozen ms = DEFAULT_FROZEN_MS + DEFAULT_FROZEN_MS_PER_MB x memory MB until the store has a fit:
#: the least-squares line through the six runs of the default route with TLS and page streams over
#: cubic (the defaults) in `bench/migration_downtime.py --sizes 1024,2048 --rounds 3 --routes pages
#: --tls both --congestion cubic,own` on the lab, CRIU with scripts/criu-patches (docs/migration.md,
#: "The page streams over cubic (patch 0004)", 2026-11-28 13:09 UTC)
DEFAULT_FROZEN_MS = 713.0
DEFAULT_FROZEN_MS_PER_MB = 2.14
#: SUCCEEDED migrations needed before the fit replaces the default
MIN_FIT_POINTS = 3


@dataclass(frozen=True)
class FrozenModel:
    """frozen ms = intercept + slope x memory MB; `source` is "pair" (fitted to one node pair's
    migrations), "fit" (to the whole cluster's) or "default" (the lab's line)."""

    intercept_ms: float
    ms_per_mb: float
    source: str
    points: int = 0

    def at(self, memory_mb: float) -> float:
        return max(0.0, self.intercept_ms + self.ms_per_mb * memory_mb)

    def to_json(self) -> dict[str, Any]:
        return {"intercept_ms": round(self.intercept_ms, 1), "ms_per_mb": round(self.ms_per_mb, 3),
                "points": self.points, "source": self.source}


DEFAULT_MODEL = FrozenModel(DEFAULT_FROZEN_MS, DEFAULT_FROZEN_MS_PER_MB, "default")


def frozen_model(history: Sequence[tuple[float, float]], *, flat_slope: float = DEFAULT_FROZEN_MS_PER_MB,
                 source: str = "fit") -> FrozenModel:
    """Fit frozen ms to memory MB over `history` ((memory MB, frozen ms) of SUCCEEDED
    migrations); the lab's default until there are MIN_FIT_POINTS. When every point has the same
    memory size the slope cannot be fitted: `flat_slope` through their mean."""
    if len(history) < MIN_FIT_POINTS:
        return replace(DEFAULT_MODEL, points=len(history))
    mem = np.array([m for m, _ in history], dtype=float)
    ms = np.array([f for _, f in history], dtype=float)
    if np.ptp(mem) < 1e-9:
        return FrozenModel(float(ms.mean() - flat_slope * mem.mean()), flat_slope, source, len(history))
    slope, intercept = np.polyfit(mem, ms, 1)
    return FrozenModel(float(intercept), float(slope), source, len(history))


@dataclass(frozen=True)
class FrozenFits:
    """The frozen-time lines of a cluster: one per node pair that has enough migrations of its
    own, the cluster's line for every other pair (`frozen_fits`)."""

    cluster: FrozenModel = DEFAULT_MODEL
    pairs: Mapping[tuple[str, str], FrozenModel] = field(default_factory=dict)

    def model(self, source: str, target: str) -> FrozenModel:
        return self.pairs.get((source, target), self.cluster)

    def at(self, source: str, target: str, memory_mb: float) -> float:
        return self.model(source, target).at(memory_mb)

    def pairs_json(self) -> dict[str, Any]:
        """{"source->target": the pair's line} (`plan --json` "frozen_pairs")."""
        return {f"{a}->{b}": m.to_json() for (a, b), m in sorted(self.pairs.items())}


def frozen_fits(history: Sequence[FrozenSample]) -> FrozenFits:
    """Per node pair (source -> target, as the move goes: the target's memory and the source's
    dump differ by direction) the line through that pair's migrations, once it has
    MIN_FIT_POINTS; the cluster's line through all of them for the rest."""
    cluster = frozen_model([(h.memory_mb, h.frozen_ms) for h in history])
    by_pair: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for h in history:
        by_pair.setdefault((h.source, h.target), []).append((h.memory_mb, h.frozen_ms))
    return FrozenFits(cluster, {pair: frozen_model(points, flat_slope=cluster.ms_per_mb, source="pair")
                                for pair, points in by_pair.items() if len(points) >= MIN_FIT_POINTS})


def migration_energy_j(settings: PlannerSettings, memory_mb: float) -> float:
    """The energy one migration costs (settings: a fixed part and a part per GB copied)."""
    return settings.migration_j + settings.migration_j_per_gb * memory_mb / 1024.0


@dataclass(frozen=True)
class ActionPrediction:
    energy_saved_j: float
    power_saved_w: float
    migration_j: float = 0.0
    frozen_ms: float | None = None
    #: which line the frozen time came from: "pair", "fit" or "default" (`FrozenModel.source`)
    frozen_source: str | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"energy_saved_j": round(self.energy_saved_j, 1),
                             "power_saved_w": round(self.power_saved_w, 3)}
        if self.frozen_ms is not None:
            d.update(migration_j=round(self.migration_j, 1), frozen_ms=round(self.frozen_ms, 1),
                     frozen_source=self.frozen_source)
        return d


@dataclass(frozen=True)
class Prediction:
    """A plan's prediction in total and per action (in the plan's order)."""

    horizon_s: float
    actions: tuple[ActionPrediction, ...]
    frozen: FrozenFits
    #: each node the plan leaves on -> (its curve's power at its load after the plan, the curve's
    #: idle power): what the ledger sets against each node's energy rows
    nodes_after: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def energy_saved_j(self) -> float:
        return sum(a.energy_saved_j for a in self.actions)

    @property
    def frozen_ms(self) -> float:
        return sum(a.frozen_ms or 0.0 for a in self.actions)

    @property
    def frozen_source(self) -> str:
        """The lines the migrations' frozen times came from ("pair", "fit", "default", or several
        joined by "+"); the cluster's own when the plan migrates nothing."""
        used = sorted({a.frozen_source for a in self.actions if a.frozen_source})
        return "+".join(used) or self.frozen.cluster.source

    def to_json(self) -> dict[str, Any]:
        """The plan's total (`plans.prediction_json`, `peakpack plan --json` "prediction")."""
        return {
            "horizon_s": self.horizon_s,
            "energy_saved_j": round(self.energy_saved_j, 1),
            "power_saved_w": round(sum(a.power_saved_w for a in self.actions), 3),
            "migration_j": round(sum(a.migration_j for a in self.actions), 1),
            "frozen_ms": round(self.frozen_ms, 1),
            "frozen_source": self.frozen_source,
            "frozen_fit": self.frozen.cluster.to_json(),
            "frozen_pairs": self.frozen.pairs_json(),
            "source": "model",
            "nodes_after": {n: {"power_w": round(w, 3), "idle_w": round(idle, 3)}
                            for n, (w, idle) in sorted(self.nodes_after.items())},
        }


def predict(inventory: Inventory, snapshot: ClusterSnapshot, plan: Plan, settings: PlannerSettings,
            frozen_history: Sequence[FrozenSample]) -> Prediction:
    """Predict `plan`'s energy saved over the forecast horizon and each migration's frozen time."""
    horizon = settings.forecast.window_seconds
    fits = frozen_fits(frozen_history)
    memory = {c.name: c.memory_mb for c in snapshot.containers}
    state = snapshot
    power = cluster_metrics(inventory, state).power_w
    out: list[ActionPrediction] = []
    for action in plan.actions:
        state = apply_action(inventory, state, action)
        after = cluster_metrics(inventory, state).power_w
        saved_w = power - after
        power = after
        if action.kind is ActionKind.MIGRATE:
            assert action.container is not None and action.source is not None and action.target is not None
            mb = memory[action.container]
            cost = migration_energy_j(settings, mb)
            model = fits.model(action.source, action.target)
            out.append(ActionPrediction(saved_w * horizon - cost, saved_w, cost, model.at(mb), model.source))
        else:
            out.append(ActionPrediction(saved_w * horizon, saved_w))
    loads, on = node_loads(state.containers), state.powered()
    nodes_after = {spec.name: (spec.power.at(loads.get(spec.name, NodeLoad()).cpu / spec.cpus), spec.power.idle_w)
                   for spec in inventory.nodes if spec.name in on}
    return Prediction(horizon, tuple(out), fits, nodes_after)


class NodeEnergy(Protocol):
    """What the ledger reads of a node's energy row (`db.records.EnergyRow`)."""

    @property
    def node(self) -> str: ...
    @property
    def start(self) -> datetime: ...
    @property
    def end(self) -> datetime: ...
    @property
    def energy_j(self) -> float: ...
    @property
    def source(self) -> str: ...
    @property
    def idle_j(self) -> float | None: ...


def predicted_row_j(row: NodeEnergy, nodes_after: Mapping[str, Any]) -> float:
    """The energy the plan predicted for `row`'s node over `row`'s interval, in the domain of the
    row's own number: the curve's active power after the plan (its power at the load less its
    idle) over the interval, plus the row's idle energy (`idle_j`: for a measured row the idle the
    counter itself shows, `power.accounting.split_idle_w`; for a model row the curve's). RAPL
    counts only the CPU package, so the curve's wall power would over-predict it by the
    difference of the idles. A node the plan switched off was predicted to use nothing."""
    node = nodes_after.get(row.node)
    if node is None:
        return 0.0
    seconds = (row.end - row.start).total_seconds()
    idle_j = row.idle_j if row.idle_j is not None else node["idle_w"] * seconds
    return (node["power_w"] - node["idle_w"]) * seconds + idle_j


def check_prediction(applied_at: datetime, prediction: dict[str, Any] | None, energy: Sequence[NodeEnergy],
                     frozen_ms: Sequence[float]) -> dict[str, Any]:
    """The ledger's side of a plan (`history plans`): what was measured against what it predicted.

    Energy: the nodes' energy rows (not the per-container split) that lie within the forecast
    horizon after the plan, against the energy the plan predicted for the same nodes over the
    same intervals (`predicted_row_j`, in each row's own domain) plus its migration energy. Rows
    of later plans' epochs count too: the horizon is what the plan was chosen for. A plan stored
    before predictions had per-node powers (`nodes_after`) has no predicted energy. Downtime: the
    frozen ms of the plan's own migrations, against the predicted sum. `energy_j` is every node's
    energy, `measured_energy_j` only what counters and BMCs measured (rapl, dcmi),
    `modelled_energy_j` what power curves estimated for nodes with neither: never mixed up.
    """
    horizon = float((prediction or {}).get("horizon_s", 0.0))
    end = applied_at + timedelta(seconds=horizon)
    rows = [r for r in energy if r.start >= applied_at and r.end <= end]
    covered = max(((r.end - applied_at).total_seconds() for r in rows), default=0.0)
    out: dict[str, Any] = {
        "measured_frozen_ms": round(sum(frozen_ms), 1) if frozen_ms else None,
        "predicted_frozen_ms": None if prediction is None else prediction.get("frozen_ms"),
        "measured_s": round(covered, 1),
        "energy_j": round(sum(r.energy_j for r in rows), 1) if rows else None,
        "measured_energy_j": round(sum(r.energy_j for r in rows if r.source in MEASURED_SOURCES), 1) if rows else None,
        "modelled_energy_j": round(sum(r.energy_j for r in rows if r.source not in MEASURED_SOURCES), 1)
        if rows else None,
        "measured_source": "+".join(sorted({r.source for r in rows if r.source in MEASURED_SOURCES})) or None,
        "predicted_energy_j": None,
    }
    if prediction is not None and "nodes_after" in prediction and rows:
        predicted = sum(predicted_row_j(r, prediction["nodes_after"]) for r in rows)
        out["predicted_energy_j"] = round(predicted + float(prediction.get("migration_j", 0.0)), 1)
    return out


__all__ = ["DEFAULT_MODEL", "ActionPrediction", "FrozenFits", "FrozenModel", "NodeEnergy", "Prediction",
           "check_prediction", "frozen_fits", "frozen_model", "migration_energy_j", "predict", "predicted_row_j"]
