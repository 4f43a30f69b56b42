"""snapshot -> problem -> placement -> plan: the pure pipeline shared by the CLI, the controller
and the simulator's production policy."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Protocol

from ..domain.budgets import Allowance
from ..domain.model import ClusterSnapshot, Inventory, is_twice
from ..domain.placement import eligibility, movers_port_clashes
from ..domain.plan import Plan
from ..domain.settings import PlannerSettings
from .planner.build import build_plan
from .planner.problem import Placement, PlacementProblem, Policy, Weights
from .planner.registry import get_policy
from .planner.rules import Remembered, restrained_eligibility, restrained_inventory, restraints
from .predict import frozen_fits
from .pressure import with_lowered_caps

DEFAULT_POLICY = "peakpack"
#: re-solves allowed to separate containers that publish the same host port
MAX_PORT_ROUNDS = 5


class Unsettled(Protocol):
    """A migration that has not ended (the store's MigrationRecord has these fields)."""

    @property
    def id(self) -> int: ...
    @property
    def container(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def target(self) -> str: ...


def unsettled_holds(migrations: Iterable[Unsettled]) -> Iterator[tuple[str, str, str]]:
    """(node, container, why) for both nodes of every migration not settled: until it is, its
    container counts as present on both (settling may resume the source or restore the target)."""
    for m in migrations:
        why = f"migration {m.id} of {m.container} ({m.source} -> {m.target}) is not settled"
        for node in (m.source, m.target):
            yield node, m.container, why


def hold_unsettled(snapshot: ClusterSnapshot, migrations: Iterable[Unsettled]) -> ClusterSnapshot:
    """Both nodes of an unsettled migration are held, so neither is emptied, switched off or
    given new work. Its container seen on both is the migration's doing (a target restored while
    the source waits), so that hold says so instead."""
    held = dict(snapshot.held)
    for node, container, why in unsettled_holds(migrations):
        if node not in held or is_twice(held[node], container):
            held[node] = why
    return replace(snapshot, held=held) if held != snapshot.held else snapshot


def held_by_unsettled(migrations: Iterable[Unsettled], *, containers: Collection[str] = (),
                      nodes: Collection[str] = ()) -> str | None:
    """Why a command by hand may not act on one of `containers` or `nodes` (None: it may): an
    unsettled migration holds them, as it holds them from the planner. Acting there anyway (moving
    its container on, pinning or switching a node) would leave settling a copy to resume beside
    the one moved on: two running copies."""
    for node, container, why in unsettled_holds(migrations):
        if container in containers or node in nodes:
            return why
    return None


def held_inventory(inventory: Inventory, snapshot: ClusterSnapshot) -> Inventory:
    """The inventory as this plan may use it: a held node is not power-managed, so no policy,
    replay or power rule switches it."""
    if not snapshot.held:
        return inventory
    nodes = tuple(replace(n, power_managed=False) if n.name in snapshot.held else n for n in inventory.nodes)
    return replace(inventory, nodes=nodes)


def make_plan(
    inventory: Inventory,
    snapshot: ClusterSnapshot,
    *,
    policy: str = DEFAULT_POLICY,
    settings: PlannerSettings | None = None,
    time_limit_s: float | None = None,
    facts: Remembered | None = None,
    dry_run: bool = True,
    allowance: Allowance | None = None,
    traffic: Mapping[tuple[str, str], float] | None = None,
) -> Plan:
    """Solve the placement for `snapshot` with the named policy and order it into a plan,
    within what the disruption budgets and windows allow (`budgets.allowance`; None: anything).
    `traffic`: forecast bytes per second per container pair (`decide.traffic`), which the
    objective charges while a pair is on two nodes.

    `settings` default to the inventory's (`[planner]`); `time_limit_s` overrides theirs (the CLI
    flag). `facts` (what the store remembers) feed the power rules, hysteresis and the lower caps
    of nodes whose latency-sensitive containers stalled (`planner.rules`, `qos`), judged at the
    snapshot's time; None: nothing remembered."""
    settings = settings or inventory.planner
    search = {"workers": settings.workers, "target_gap": settings.relative_gap} if policy == DEFAULT_POLICY else {}
    solver = get_policy(policy, **search)
    facts = facts or Remembered()
    inventory = with_lowered_caps(held_inventory(inventory, snapshot), facts.lowered)
    held_back = restraints(inventory, snapshot, settings, facts, snapshot.taken_at)
    solved = restrained_inventory(inventory, held_back)
    problem = PlacementProblem(
        inventory=solved,
        snapshot=snapshot,
        weights=Weights.from_settings(settings, inventory.cluster.epoch_seconds),
        time_limit_s=settings.time_limit_s if time_limit_s is None else time_limit_s,
        work_limit=settings.work_limit,
        eligible=restrained_eligibility(eligibility(inventory, snapshot), snapshot, inventory, held_back),
        cap=settings.cap,
        allowance=allowance or Allowance(),
        pinned=held_back.pinned,
        keep_power=held_back.keep_power,
        traffic=traffic or {},
        frozen=frozen_fits(facts.frozen_history),
        lowered_caps={n: c.why for n, c in facts.lowered.items()},
    )
    problem, placement = _solve_without_port_clashes(solver, problem)
    plan = build_plan(problem, placement, policy)
    hosting = set(placement.assignment.values())
    notes = tuple(f"{n} stays on: {why}" for n, why in sorted(held_back.keep_power.items())
                  if n in placement.powered and n not in hosting)
    notes += tuple(f"{n} not woken: {why}" for n, why in sorted(held_back.keep_power.items())
                   if n not in placement.powered)
    notes += tuple(f"{n}: {c.why}" for n, c in sorted(facts.lowered.items()))
    used = {**settings.by_key(), "time_limit_s": problem.time_limit_s}
    return replace(plan, dry_run=dry_run, based_on_version=snapshot.version, notes=plan.notes + notes, settings=used)


def _solve_without_port_clashes(solver: Policy, problem: PlacementProblem) -> tuple[PlacementProblem, Placement]:
    """Two movers may pick the same node for the same port; forbid that node to the one that
    clashed and solve again (clashes are rare, so this converges in a round or two). Returns the
    problem last solved (its explanations are that problem's) and its placement, which says the
    safety net stopped the solve if it stopped any round (that round chose what was forbidden)."""
    eligible = dict(problem.eligible)
    everywhere = frozenset(problem.inventory.node_names)
    clock = False
    for _ in range(MAX_PORT_ROUNDS):
        placement = solver.solve(problem)
        clock = clock or placement.report.stopped_by_clock
        clashes = movers_port_clashes(problem.snapshot, placement.assignment)
        if not clashes:
            return problem, _clocked(placement, clock)
        for name, node in clashes.items():
            eligible[name] = eligible.get(name, everywhere) - {node}
        problem = replace(problem, eligible=dict(eligible))
    where = problem.snapshot.placement()  # give up moving the containers that keep clashing
    problem = replace(problem, eligible={**eligible, **{n: frozenset({where[n]}) for n in clashes}})
    return problem, _clocked(solver.solve(problem), clock)


def _clocked(placement: Placement, clock: bool) -> Placement:
    """`placement`, saying the safety net stopped its solve if it stopped an earlier round."""
    if not clock or placement.report.stopped_by_clock:
        return placement
    return replace(placement, report=replace(placement.report, stopped_by_clock=True))
