"""Container labels are checked when observed: a bad `peakpack.*` label (NaN, infinite, negative,
absurd, not a number, an unknown class) is listed with its fix, the container is planned as
immovable (its node stays as it is) and the epoch goes on; a memory label below what the
container uses never lets the planner overpack its node. Node text in the CLI's tables is shown
as it is, never read as markup."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.orchestrator.decide.solve import make_plan
from peakpack.orchestrator.domain.config import demo_inventory
from peakpack.orchestrator.domain.inputs import container_labels
from peakpack.orchestrator.domain.model import ClusterSnapshot, NodeState
from peakpack.orchestrator.domain.states import MigrationState
from peakpack.orchestrator.faces.cli.app import main
from peakpack.orchestrator.observe.cluster import containers_of, parse_inspect, parse_usage
from tests.unit.orchestrator.observe.test_cluster_declared import INSPECT

USAGE = "# 10.0\nweb-1 0 209715200\n# 11.0\nweb-1 125000000 209715200\n"  # 200 MB in use


def observed(labels: dict[str, str]) -> object:
    doc = copy.deepcopy(INSPECT)
    doc[0]["Config"]["Labels"] = labels
    [c] = containers_of("node-1", parse_inspect("node-1", json.dumps(doc)), parse_usage("node-1", USAGE))
    return c


@pytest.mark.parametrize("key, value", [
    ("peakpack.memory_mb", "nan"), ("peakpack.memory_mb", "inf"), ("peakpack.memory_mb", "-64"),
    ("peakpack.memory_mb", "1e30"), ("peakpack.memory_mb", "lots"), ("peakpack.cpu", "NaN"),
    ("peakpack.cpu", "1e15"), ("peakpack.cpu", "-1"), ("peakpack.class", "gremlin"), ("peakpack.group", "a b"),
])
def test_a_bad_label_makes_its_container_stay_put_with_the_fix(key: str, value: str) -> None:
    declared = container_labels({key: value})
    [problem] = declared.problems
    assert (problem.startswith(f"label {key}: ") and "give" in problem) or "use" in problem
    c = observed({key: value})
    assert c.immovable is not None and c.immovable.startswith(f"label {key}: ")  # type: ignore[attr-defined]
    assert c.memory_mb == 200.0  # type: ignore[attr-defined]  # what it uses


def test_a_memory_label_never_understates_what_the_container_uses() -> None:
    assert observed({"peakpack.memory_mb": "64"}).memory_mb == 200.0  # type: ignore[attr-defined]
    assert observed({"peakpack.memory_mb": "1024"}).memory_mb == 1024.0  # type: ignore[attr-defined]
    good = observed({"peakpack.cpu": "0.5", "peakpack.memory_mb": "512", "peakpack.class": "devil"})
    assert good.immovable is None and (good.cpu, good.memory_mb) == (0.5, 512.0)  # type: ignore[attr-defined]


def test_the_epoch_goes_on_with_a_bad_label() -> None:
    inv = demo_inventory()
    c = observed({"peakpack.memory_mb": "nan"})
    snap = ClusterSnapshot(nodes=tuple(NodeState(n.name) for n in inv.nodes), containers=(c,))  # type: ignore[arg-type]
    plan = make_plan(inv, snap, time_limit_s=2)
    assert all(a.container != "web-1" for a in plan.actions)


def test_node_text_in_a_table_is_not_markup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "pp.db"
    with Store.open(f"sqlite:///{db}") as store:
        m = store.migrations.begin("web-1", "node-1", "node-2")
        store.migrations.finish(m, MigrationState.FAILED, "rsync: [/var/lib/docker] [bold]x[/] failed")
        store.power.quarantine("node-2", "BMC said [red]no[/red]")
    for argv in (["history", "migrations", "--wide"], ["power", "status"]):
        try:
            main([*argv, "--db", f"sqlite:///{db}"])
        except SystemExit as exc:
            assert exc.code in (0, None), capsys.readouterr().err
    out = capsys.readouterr().out
    assert "[/var/lib/docker] [bold]x[/] failed" in out and "BMC said [red]no[/red]" in out
