"""The web page's routes on a real SQLite store filled with records, through Starlette's
TestClient: server-rendered tables, the JSON the charts read, and the token guard on
approve/reject."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from peakpack.db.base import now
from peakpack.db.store import Store
from peakpack.orchestrator.decide.solve import make_plan
from peakpack.orchestrator.domain.config import demo_snapshot, parse_inventory
from peakpack.orchestrator.domain.errors import InventoryError
from peakpack.orchestrator.domain.model import ClusterSnapshot, Inventory
from peakpack.orchestrator.domain.plan import Plan
from peakpack.orchestrator.domain.records import EnergyRow, QosEventRecord
from peakpack.orchestrator.domain.states import MigrationState, PlanStatus
from peakpack.orchestrator.faces.web.app import create_app

TOKEN = "s3cret-token"
DEMO = (Path(__file__).resolve().parents[2] / "inventory" / "demo.toml").read_text()


def inventory_with_token(tmp_path: Path, mode: int = 0o600, token: str = TOKEN) -> Inventory:
    (tmp_path / "web.token").write_text(token + "\n")
    (tmp_path / "web.token").chmod(mode)
    return parse_inventory(DEMO + '\n[web]\ntoken_file = "web.token"\n', base=tmp_path, source=tmp_path / "inv.toml")


@pytest.fixture(scope="module")
def planned() -> tuple[Inventory, ClusterSnapshot, Plan]:
    inv = parse_inventory(DEMO, base=Path("."))
    snap = demo_snapshot(inv)
    return inv, snap, make_plan(inv, snap, policy="ffd", time_limit_s=2)


@pytest.fixture
def store(tmp_path: Path, planned: tuple[Inventory, ClusterSnapshot, Plan]) -> Iterator[Store]:
    """Two plans (an older APPLIED one, the newest RECOMMENDED), a migration after the newest
    plan's observation, a node switched off after it, and energy rows for nodes and containers."""
    _, snap, plan = planned
    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as s:
        old = s.plans.save(plan, "demo", snap)
        s.plans.set_status(old, PlanStatus.APPLIED, only_from=[PlanStatus.RECOMMENDED])
        s.plans.save(plan, "demo", snap)
        moved = snap.containers[0]
        target = next(n.name for n in snap.nodes if n.name not in (moved.node, "head"))
        m = s.migrations.begin(moved.name, moved.node, target)
        s.migrations.finish(m, MigrationState.SUCCEEDED, frozen_ms=123.4, total_ms=2345.6)
        e = s.power.begin("node-8", "power_off", reason="empty")
        s.power.finish(e, "SUCCEEDED")
        t0 = now() - timedelta(minutes=20)
        s.energy.add([EnergyRow("node-1", t0, t0 + timedelta(minutes=10), 7200.0, "rapl"),
                      EnergyRow("node-1", t0 + timedelta(minutes=10), t0 + timedelta(minutes=20), 3600.0, "rapl"),
                      EnergyRow("node-2", t0, t0 + timedelta(minutes=10), 1800.0, "model"),
                      EnergyRow("node-1", t0, t0 + timedelta(minutes=10), 360.0, "rapl", container=moved.name)])
        s.qos.add([QosEventRecord("node-1", "a1b2", 1, t0, "cpu_suppress", None, "web stalled 23% (psi)"),
                   QosEventRecord("node-1", "a1b2", 2, t0 + timedelta(seconds=5), "mem_evict", "batch",
                                  "available 40 MiB < 10% of 512 MiB")])
        yield s


def test_the_page_renders_every_table_on_the_server_and_is_read_only_without_a_token(
        store: Store, planned: tuple[Inventory, ClusterSnapshot, Plan]) -> None:
    inv, _, plan = planned
    page = TestClient(create_app(store, inv)).get("/")
    assert page.status_code == 200
    html = page.text
    assert html.count('<tr class="node"') == len(inv.nodes)
    assert (
        html.count('<tr class="plan"') == 2 and 'data-status="RECOMMENDED"' in html and 'data-status="APPLIED"' in html
    )
    assert html.count('<tr class="migration"') == 1 and "123.4" in html
    assert html.count('<tr class="power-event"') == 1
    assert html.count('<tr class="qos-event"') == 2 and "available 40 MiB &lt; 10% of 512 MiB" in html
    assert html.index('data-kind="mem_evict"') < html.index('data-kind="cpu_suppress"')  # the newest first
    assert html.count("<li data-state=") == 2 * len(plan.actions)
    assert "<form" not in html and "Read-only" in html
    assert '<script src="/static/uPlot.iife.min.js">' in html


def test_nodes_show_the_moves_and_power_events_after_the_observation(
        store: Store, planned: tuple[Inventory, ClusterSnapshot, Plan]) -> None:
    inv, snap, _ = planned
    state = TestClient(create_app(store, inv)).get("/api/state").json()
    nodes = {n["name"]: n for n in state["nodes"]}
    moved = snap.containers[0]
    target = next(n.name for n in snap.nodes if n.name not in (moved.node, "head"))
    assert moved.name in nodes[target]["containers"] and moved.name not in nodes[moved.node]["containers"]
    assert nodes["node-8"]["powered"] is False and nodes["node-1"]["powered"] is True
    assert nodes["node-1"]["cap_cpu"] == pytest.approx(16 * inv.cluster.cap)
    assert nodes["node-1"]["power_w"] == pytest.approx(3600.0 / 600) and nodes["node-1"]["power_source"] == "rapl"


def test_the_charts_get_cumulative_energy_per_node_and_container_with_their_source(
        store: Store, planned: tuple[Inventory, ClusterSnapshot, Plan]) -> None:
    inv, snap, _ = planned
    energy = TestClient(create_app(store, inv)).get("/api/state").json()["energy"]
    nodes = energy["nodes"]
    assert len(nodes["t"]) == 3  # both series start at the same instant, then two interval ends
    assert nodes["series"]["node-1 (rapl)"] == [0.0, pytest.approx(2.0), pytest.approx(3.0)]
    assert nodes["series"]["node-2 (model)"] == [0.0, pytest.approx(0.5), None]
    assert energy["containers"]["series"] == {f"{snap.containers[0].name} (rapl)": [0.0, pytest.approx(0.1)]}


def test_the_chart_library_is_served_from_the_package(store: Store) -> None:
    client = TestClient(create_app(store))
    js = client.get("/static/uPlot.iife.min.js")
    assert js.status_code == 200 and "uPlot" in js.text
    assert client.get("/static/page.js").status_code == 200


def test_a_read_only_page_refuses_every_decision(
    store: Store, planned: tuple[Inventory, ClusterSnapshot, Plan]
) -> None:
    inv, _, _ = planned
    plan_id = store.plans.recent(1)[0].plan_id
    client = TestClient(create_app(store, inv))
    for decision in ("approve", "reject"):
        answer = client.post(f"/plans/{plan_id}/{decision}", data={"token": TOKEN})
        assert answer.status_code == 403
    assert store.plans.get(plan_id).status is PlanStatus.RECOMMENDED


def test_with_a_token_only_recommended_plans_get_buttons_and_a_wrong_token_changes_nothing(
        store: Store, tmp_path: Path) -> None:
    inv = inventory_with_token(tmp_path)
    newest = store.plans.recent(1)[0].plan_id
    client = TestClient(create_app(store, inv))
    html = client.get("/").text
    assert html.count("<form") == 1 and f'action="/plans/{newest}/approve"' in html
    answer = client.post(f"/plans/{newest}/reject", data={"token": "guess"})
    assert answer.status_code == 403 and "token" in answer.text
    assert store.plans.get(newest).status is PlanStatus.RECOMMENDED


def test_rejecting_through_the_page_records_who_decided(store: Store, tmp_path: Path) -> None:
    inv = inventory_with_token(tmp_path)
    newest = store.plans.recent(1)[0].plan_id
    answer = TestClient(create_app(store, inv)).post(f"/plans/{newest}/reject", data={"token": TOKEN, "by": "ana"})
    assert answer.status_code == 200, answer.text
    record = store.plans.get(newest)
    assert record.status is PlanStatus.REJECTED and record.decided_by == "web:ana"


def test_approving_an_applied_plan_is_refused_with_the_reason(store: Store, tmp_path: Path) -> None:
    inv = inventory_with_token(tmp_path)
    oldest = store.plans.recent(2)[0].plan_id
    answer = TestClient(create_app(store, inv)).post(f"/plans/{oldest}/approve", data={"token": TOKEN})
    assert answer.status_code == 409 and f"{oldest}" in answer.text
    assert store.plans.get(oldest).status is PlanStatus.APPLIED


@pytest.mark.parametrize("mode, token, fix", [(0o644, TOKEN, "chmod 600"), (0o600, "", "is empty")])
def test_the_token_file_is_checked_like_a_password_file(tmp_path: Path, mode: int, token: str, fix: str) -> None:
    with pytest.raises(InventoryError, match=rf"web\.token_file: .*{fix}"):
        inventory_with_token(tmp_path, mode, token)


def test_the_page_is_served_beside_the_controller_and_a_busy_port_is_one_line(store: Store) -> None:
    import urllib.request

    from peakpack.orchestrator.domain.errors import PeakpackError
    from peakpack.orchestrator.faces.web.server import serving_in_background

    with serving_in_background(create_app(store), "127.0.0.1", 0) as port:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/state", timeout=10) as answer:
            assert answer.status == 200 and b'"plans"' in answer.read()
        with pytest.raises(PeakpackError, match=rf"--http-port: cannot listen on 127.0.0.1:{port} "):
            with serving_in_background(create_app(store), "127.0.0.1", port):
                pass
