"""Disruption budgets and maintenance windows: parsing, matching a clock, and a planner that
plans within them (not a plan cut short afterwards)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from peakpack.orchestrator.decide.planner.build import build_plan
from peakpack.orchestrator.decide.planner.objective import violations
from peakpack.orchestrator.decide.planner.registry import get_policy
from peakpack.orchestrator.domain.budgets import (
    Allowance,
    Budgets,
    Window,
    WindowRule,
    allowance,
    exceeds,
    parse_clock,
    parse_days,
)
from peakpack.orchestrator.domain.model import Container
from peakpack.orchestrator.domain.plan import ActionKind, replay
from tests.support.paths import REPO
from tests.support.synthetic import node, problem_from

WORKDAYS = Window(parse_days("mon-fri"), parse_clock("08:00"), parse_clock("18:00"),
                  WindowRule.NO_MIGRATIONS, "Europe/Berlin")


def spread(per_node: int = 2, n_nodes: int = 6, hot: float = 0.0):
    """Workers of 10 cores (cap 7) running `per_node` 1-core containers each; `hot` extra cores
    on w0 put it over the cap."""
    nodes = [node("head", 4, head=True)] + [node(f"w{i}", 10, 65536, 100, 200) for i in range(n_nodes)]
    containers = [Container(f"c{i}-{j}", f"w{i}", 1.0, 512) for i in range(n_nodes) for j in range(per_node)]
    if hot:
        containers.append(Container("hot", "w0", hot, 512))
    return problem_from(nodes, containers, time_limit_s=5)


def plan_for(problem, allow: Allowance):
    problem = replace(problem, allowance=allow)
    placement = get_policy("peakpack").solve(problem)
    assert violations(problem, placement.assignment, placement.powered) == []
    return build_plan(problem, placement, "peakpack")


def test_days_ranges_lists_and_wrapping() -> None:
    assert parse_days("mon-fri") == {0, 1, 2, 3, 4}
    assert parse_days("sat,sun") == {5, 6}
    assert parse_days("fri-mon") == {4, 5, 6, 0}
    assert parse_days("daily") == set(range(7))
    with pytest.raises(ValueError, match="mon-fri"):
        parse_days("weekdays")
    with pytest.raises(ValueError, match="HH:MM"):
        parse_clock("8am")


def test_a_window_matches_local_time_in_its_zone() -> None:
    monday_0730_utc = datetime(2026, 11, 23, 7, 30, tzinfo=UTC)  # 08:30 in Berlin
    assert WORKDAYS.active(monday_0730_utc)
    assert not WORKDAYS.active(monday_0730_utc.replace(hour=6))  # 07:00 in Berlin
    assert not WORKDAYS.active(datetime(2026, 11, 28, 10, 0, tzinfo=UTC))  # Saturday
    night = Window(parse_days("fri"), parse_clock("22:00"), parse_clock("06:00"), WindowRule.NO_POWER_OFFS)
    assert night.active(datetime(2026, 11, 28, 3, 0, tzinfo=UTC))  # Saturday 03:00: Friday's night
    assert not night.active(datetime(2026, 11, 27, 3, 0, tzinfo=UTC))  # Friday 03:00: Thursday's


def test_the_allowance_takes_the_tighter_budget_and_what_the_last_hour_used() -> None:
    at = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
    a = allowance(Budgets(migrations_per_epoch=4, migrations_per_hour=10, power_offs_per_hour=2), (), at,
                  migrations_last_hour=8, power_offs_last_hour=2)
    assert (a.migrations, a.power_offs, a.consolidate) == (2, 0, True)
    assert "per hour" in a.migrations_why and "8 used" in a.migrations_why
    quiet = allowance(Budgets(), (WORKDAYS,), datetime(2026, 11, 23, 9, 0, tzinfo=UTC))
    assert not quiet.consolidate and quiet.power_offs == 0 and "mon,tue" in quiet.consolidate_why


def test_a_stored_plan_is_checked_against_the_limits_in_force_when_it_is_applied() -> None:
    at = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)  # a Saturday: no window
    used = allowance(Budgets(migrations_per_hour=10, power_offs_per_hour=2), (), at,
                     migrations_last_hour=8, power_offs_last_hour=1)
    assert exceeds(used, ["n1", "n2"], 1, set()) is None
    assert "3 containers, 2 allowed now" in (exceeds(used, ["n1", "n1", "n2"], 0, set()) or "")
    assert "2 nodes off, 1 allowed now" in (exceeds(used, [], 2, set()) or "")
    quiet = allowance(Budgets(), (WORKDAYS,), datetime(2026, 11, 23, 9, 0, tzinfo=UTC))
    assert exceeds(quiet, ["hot"], 0, {"hot"}) is None  # a cap fix runs in a window
    assert "only cap fixes now" in (exceeds(quiet, ["hot", "cool"], 0, {"hot"}) or "")
    assert "only cap fixes now" in (exceeds(quiet, [], 1, set()) or "")


def test_a_budget_of_two_gives_at_most_two_migrations_that_replay_under_the_cap() -> None:
    problem = spread()
    unlimited = plan_for(problem, Allowance())
    assert len(unlimited.migrations) > 2  # without a budget the plan moves more
    plan = plan_for(problem, Allowance(migrations=2))
    assert 0 < len(plan.migrations) <= 2
    # the two moves empty one worker, which is switched off: a whole step, not half of one
    assert [a.kind for a in plan.actions].count(ActionKind.POWER_OFF) == 1
    replay(problem.inventory, problem.snapshot, plan.actions)  # raises if a step breaks the cap
    assert plan.after.max_cpu_util <= problem.cpu_cap + 1e-9


def test_power_offs_beyond_the_hourly_budget_are_not_planned() -> None:
    plan = plan_for(spread(), Allowance(power_offs=1))
    assert [a.kind for a in plan.actions].count(ActionKind.POWER_OFF) == 1


def test_a_window_forbids_consolidation_but_fixes_the_cap() -> None:
    problem = spread(hot=6.0)  # w0: 8 cores on a 7-core cap
    quiet = plan_for(problem, Allowance(consolidate=False, power_offs=0))
    assert quiet.migrations and all(a.source == "w0" for a in quiet.migrations)
    assert not [a for a in quiet.actions if a.kind is ActionKind.POWER_OFF]
    assert quiet.after.max_cpu_util <= problem.cpu_cap + 1e-9
    assert quiet.after.nodes_on == quiet.before.nodes_on
    busy = plan_for(problem, Allowance())
    assert busy.after.nodes_on < busy.before.nodes_on  # outside the window it consolidates


@pytest.mark.parametrize("extra, field", [
    ('[[windows]]\ndays = "weekdays"\nstart = "08:00"\nend = "18:00"\nwhat = "no-migrations"\n', "windows[0].days"),
    ('[[windows]]\ndays = "mon"\nstart = "8"\nend = "18:00"\nwhat = "no-migrations"\n', "windows[0].start"),
    ('[[windows]]\ndays = "mon"\nstart = "08:00"\nend = "08:00"\nwhat = "no-migrations"\n', "windows[0].end"),
    ('[budgets]\nmigrations_per_hour = -1\n', "budgets.migrations_per_hour"),
])
def test_a_malformed_window_or_budget_is_one_line_and_exit_2(tmp_path: Path, extra: str, field: str) -> None:
    inv = tmp_path / "inv.toml"
    inv.write_text((REPO / "inventory/demo.toml").read_text() + extra)
    proc = subprocess.run([sys.executable, "-m", "peakpack", "plan", "--inventory", str(inv),
                           "--snapshot", str(REPO / "inventory/demo-snapshot.json"),
                           "--db", f"sqlite:///{tmp_path / 'pp.db'}"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and field in proc.stderr and "Traceback" not in proc.stderr
