"""What the planner may not do this epoch, decided before it solves: power-off refusals (grace,
quarantine, break-even, spare nodes) and hysteresis (and, from `decide/pressure.py`, the lower caps of
nodes whose latency-sensitive containers stalled). Pure: the store's memory comes in as `Remembered`.

The answers are problem data the solvers already understand, so the objective sees them instead
of a rule editing the plan afterwards: a node that may not be switched off is not power-managed
in the problem (it stays powered, so emptying it saves nothing and its migrations cost, and the
solver leaves it); a spare node also takes no containers; a container pinned by hysteresis is
eligible only where it is. docs/planner.md, "Power decisions and hysteresis", says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from ...domain.capacity import over_cap_nodes
from ...domain.model import ClusterSnapshot, Inventory, NodeSpec
from ...domain.records import FrozenSample
from ...domain.settings import PlannerSettings
from ..pressure import LoweredCap


@dataclass(frozen=True)
class Remembered:
    """What the store remembers that the rules need; empty: nothing is remembered (a dry run
    without history), so only break-even, spare nodes and quarantine can refuse."""

    #: powered nodes that became empty by themselves -> since when (`idle_updates`)
    idle_since: Mapping[str, datetime] = field(default_factory=dict)
    woken_at: Mapping[str, datetime] = field(default_factory=dict)  # last successful power-on
    quarantined: Mapping[str, str] = field(default_factory=dict)  # node -> why
    moved_at: Mapping[str, datetime] = field(default_factory=dict)  # container -> last migration
    #: recent SUCCEEDED migrations, their node pair, memory and frozen ms: what a migration's
    #: frozen time is predicted from (`predict.frozen_fits`)
    frozen_history: tuple[FrozenSample, ...] = ()
    #: nodes whose latency-sensitive containers stalled: their lower cap and why (`decide/pressure.py`)
    lowered: Mapping[str, LoweredCap] = field(default_factory=dict)
    #: containers a node's QoS guard stopped, to be started there again -> that node
    #: (`decide/pressure.guard_stopped`): still hosted there, though not running
    stopped: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Restraints:
    """The rules' answer: nodes whose power state stays as it is (-> why), spare nodes (kept on
    and empty), containers pinned where they are by hysteresis (-> why)."""

    keep_power: Mapping[str, str]
    spare: frozenset[str]
    pinned: Mapping[str, str]


def break_even_seconds(spec: NodeSpec, settings: PlannerSettings) -> float:
    """How long a node must stay off for the idle energy saved to pay for booting it again."""
    idle = spec.power.at(0.0)
    boot_w = settings.boot_power_w if settings.boot_power_w is not None else spec.power.at(1.0)
    return settings.boot_seconds * boot_w / idle if idle > 0 else float("inf")


def off_refusal(spec: NodeSpec, settings: PlannerSettings, epoch_seconds: float, facts: Remembered,
                now: datetime) -> str | None:
    """Why a powered, power-managed node may not be switched off this epoch; None: it may.

    Grace protects nodes that were just woken or became empty by themselves (load that left may
    come back); a node that the plan itself drains may go off in the same plan.
    """
    if spec.name in facts.quarantined:
        return f"quarantined: {facts.quarantined[spec.name]}"
    stopped = sorted(c for c, node in facts.stopped.items() if node == spec.name)
    if stopped:  # switched off, nothing would start them again
        return (f"hosts {', '.join(stopped)}, stopped by its QoS guard for memory: started there again once it "
                "has room")
    grace = timedelta(seconds=settings.grace_seconds)
    woken = facts.woken_at.get(spec.name)
    if woken is not None and now - woken < grace:
        return (
            f"woken {(now - woken).total_seconds():.0f} s ago, within the {settings.grace_seconds:.0f} s grace period"
        )
    idle = facts.idle_since.get(spec.name)
    if idle is not None and now - idle < grace:
        return (f"empty for {(now - idle).total_seconds():.0f} s of the {settings.grace_seconds:.0f} s "
                "grace period")
    needed, horizon = break_even_seconds(spec, settings), settings.off_horizon_s(epoch_seconds)
    if needed > horizon:
        return f"a boot costs {needed:.0f} s of idle power, more than the {horizon:.0f} s it is expected to stay off"
    return None


def restraints(inventory: Inventory, snapshot: ClusterSnapshot, settings: PlannerSettings, facts: Remembered,
               now: datetime) -> Restraints:
    """Decide, for this epoch, which nodes keep their power state and which containers stay."""
    powered = snapshot.powered()
    hosting = {c.node for c in snapshot.containers} | set(facts.stopped.values())
    keep: dict[str, str] = {}
    candidates: list[NodeSpec] = []
    for spec in inventory.nodes:
        if not spec.can_power_off:
            continue  # already fixed in every problem
        if spec.name not in powered:
            if spec.name in facts.quarantined:  # a node that failed to wake needs an operator first
                keep[spec.name] = (f"quarantined: {facts.quarantined[spec.name]}; "
                                   f"`peakpack power clear {spec.name}` once fixed")
            continue
        why = off_refusal(spec, settings, inventory.cluster.epoch_seconds, facts, now)
        if why:
            keep[spec.name] = why
        candidates.append(spec)
    # spare capacity is kept, not created: the largest nodes already empty stay on and empty
    empty = sorted((s for s in candidates if s.name not in hosting), key=lambda s: (-s.cpus, s.name))
    spare = frozenset(s.name for s in empty[: settings.spare_nodes])
    keep.update({n: "kept on as spare capacity" for n in spare})
    return Restraints(keep, spare, _pinned(inventory, snapshot, settings, facts, now))


def _pinned(inventory: Inventory, snapshot: ClusterSnapshot, settings: PlannerSettings, facts: Remembered,
            now: datetime) -> dict[str, str]:
    """Hysteresis: containers that moved within the forecast window, except on a node over its
    cap (there they may move: the cap forces it) -> why."""
    if not settings.hysteresis or not facts.moved_at:
        return {}
    window = timedelta(seconds=settings.forecast.window_seconds)
    over = over_cap_nodes(inventory, snapshot.containers, settings.cap)
    return {c.name: (f"moved {(now - facts.moved_at[c.name]).total_seconds():.0f} s ago, within the "
                     f"{window.total_seconds():.0f} s forecast window (hysteresis)")
            for c in snapshot.containers
            if c.name in facts.moved_at and now - facts.moved_at[c.name] < window and c.node not in over}


def restrained_inventory(inventory: Inventory, r: Restraints) -> Inventory:
    """The inventory as the solver sees it: a node whose power state must stay is not
    power-managed (like a held node, planning.held_inventory)."""
    if not r.keep_power:
        return inventory
    nodes = tuple(replace(n, power_managed=False) if n.name in r.keep_power else n for n in inventory.nodes)
    return replace(inventory, nodes=nodes)


def restrained_eligibility(eligible: Mapping[str, frozenset[str]], snapshot: ClusterSnapshot,
                           inventory: Inventory, r: Restraints) -> dict[str, frozenset[str]]:
    """Eligibility with spare nodes taken away from every container and pinned containers kept
    where they are."""
    out = dict(eligible)
    everywhere = frozenset(inventory.node_names)
    for c in snapshot.containers:
        if c.name in r.pinned:
            out[c.name] = frozenset({c.node})
        elif r.spare:
            out[c.name] = out.get(c.name, everywhere) - r.spare
    return out


def idle_updates(snapshot: ClusterSnapshot, idle_since: Mapping[str, datetime],
                 now: datetime) -> dict[str, datetime | None]:
    """New `Remembered.idle_since` values: set when a powered node is first seen empty, cleared when
    it hosts work again or is off. Seen before planning, so a node the plan drains is not idle."""
    hosting = {c.node for c in snapshot.containers}
    updates: dict[str, datetime | None] = {}
    for n in snapshot.nodes:
        empty = n.powered and n.name not in hosting
        if empty and n.name not in idle_since:
            updates[n.name] = now
        elif not empty and n.name in idle_since:
            updates[n.name] = None
    return updates
