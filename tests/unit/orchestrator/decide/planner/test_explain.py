"""Every container of a plan gets one line of why it moves or stays, naming the real reason."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from peakpack.db.store import Store
from peakpack.orchestrator.decide.planner.build import build_plan
from peakpack.orchestrator.decide.planner.registry import get_policy
from peakpack.orchestrator.decide.predict import FrozenFits, frozen_fits
from peakpack.orchestrator.domain.budgets import Allowance
from peakpack.orchestrator.domain.model import Container
from peakpack.orchestrator.domain.records import FrozenSample
from tests.support.synthetic import node, problem_from


def explained(allow: Allowance | None = None, hot: float = 0.0, pinned: bool = False):
    nodes = [node("head", 4, head=True)] + [node(f"w{i}", 10, 65536, 100, 200) for i in range(4)]
    containers = [Container(f"c{i}-{j}", f"w{i}", 1.0, 512) for i in range(4) for j in range(2)]
    if hot:
        containers.append(Container("hot", "w0", hot, 512))
    if pinned:
        containers.append(Container("db", "w3", 0.5, 512, immovable="opted out with the label peakpack.migrate=false"))
    problem = replace(problem_from(nodes, containers, time_limit_s=5), allowance=allow or Allowance())
    plan = build_plan(problem, get_policy("peakpack").solve(problem), "peakpack")
    assert set(plan.explanations) == {c.name for c in containers}
    return plan, plan.explanations, problem


def test_a_move_names_the_node_it_empties_and_the_watts_saved() -> None:
    plan, why, _ = explained()
    off = {a.node for a in plan.actions if a.kind.value == "power_off"}
    assert off
    for a in plan.migrations:
        assert why[a.container].startswith(f"moves {a.source} -> {a.target}: empties {a.source}")
        assert "W (power model" in why[a.container]
    stays = [c for c in why if c not in {a.container for a in plan.migrations}]
    assert stays and all("not worth its migration cost" in why[c] for c in stays)
    frozen = FrozenFits().cluster.at(512) / 1000  # the default line until the store has migrations
    assert all(f"frozen about {frozen:.1f} s" in why[c] for c in stays)
    assert all(why[a.container].endswith(f"frozen ~{frozen:.1f} s (lab default)")
               for a in plan.migrations)


def test_not_worth_names_the_frozen_time_the_stores_migrations_predict() -> None:
    *_, problem = explained()
    history = [FrozenSample("w9", "w8", mb, 10.0 * mb) for mb in (100.0, 200.0, 300.0)]
    fitted = replace(problem, frozen=frozen_fits(history))
    plan = build_plan(fitted, get_policy("peakpack").solve(fitted), "peakpack")
    stays = [c for c in plan.explanations if c not in {a.container for a in plan.migrations}]
    assert stays and all("frozen about 5.1 s" in plan.explanations[c] for c in stays)  # 10 ms per MB x 512 MB


def test_a_move_names_its_pairs_frozen_time_and_a_stay_the_range_over_its_targets() -> None:
    plan, why, problem = explained()
    a = plan.migrations[0]
    assert a.source and a.target
    stay = next(c for c in problem.snapshot.containers if "not worth" in why[c.name])
    other = next(n for n in ("w0", "w1", "w2", "w3") if n != stay.node)
    slow = [FrozenSample(x, y, mb, 20.0 * mb) for x, y in ((a.source, a.target), (stay.node, other))
            for mb in (100.0, 200.0, 300.0)]
    fitted = replace(problem, frozen=frozen_fits(slow + [FrozenSample("w9", "w8", 100.0, 100.0)]))
    why = build_plan(fitted, get_policy("peakpack").solve(fitted), "peakpack").explanations
    assert why[a.container].endswith(f"frozen ~10.2 s (fit to 3 moves {a.source} -> {a.target})")  # 20 ms/MB
    low, high = sorted((fitted.frozen.cluster.at(512) / 1000, 10.24))  # the other targets take the cluster's line
    assert f"frozen about {low:.1f}-{high:.1f} s by target" in why[stay.name]


def test_stays_for_an_opt_out_a_budget_and_a_window() -> None:
    _, why, _ = explained(Allowance(migrations=1, migrations_why="budget: 1 migrations per epoch"), pinned=True)
    assert why["db"] == "stays on w3: cannot be live-migrated (opted out with the label peakpack.migrate=false)"
    assert "migration budget leaves 1" in why["c0-0"] and "budget: 1 migrations per epoch" in why["c0-0"]
    plan, why, _ = explained(Allowance(consolidate=False, power_offs=0, consolidate_why="window mon 08:00-18:00"),
                          hot=6.0)
    assert all(why[a.container].endswith(f"over its 70% CPU cap or its memory cap; its clients must reconnect at "
                                         f"{a.target}'s address; frozen ~1.8 s (lab default)") for a in plan.migrations)
    assert "maintenance window mon 08:00-18:00" in why["c1-0"]


def test_the_store_keeps_the_explanations(tmp_path: Path) -> None:
    plan, why, problem = explained()
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        plan_id = store.plans.save(plan, inventory="synthetic", snapshot=problem.snapshot)
        assert store.plans.explanations(plan_id) == why
