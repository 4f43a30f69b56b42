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
from tests.support.paths import REPO

TOKEN = "s3cret-token"


def page(app: object) -> TestClient:
    """A client that reaches the page by its listening address (the Host header is checked)."""
    return TestClient(app, base_url="http://127.0.0.1")
DEMO = (REPO / "inventory" / "demo.toml").read_text()


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
    answer = page(create_app(store, inv)).get("/")
    assert answer.status_code == 200
    html = answer.text
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
    state = page(create_app(store, inv)).get("/api/state").json()
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
    energy = page(create_app(store, inv)).get("/api/state").json()["energy"]
    nodes = energy["nodes"]
    assert len(nodes["t"]) == 3  # both series start at the same instant, then two interval ends
    assert nodes["series"]["node-1 (rapl)"] == [0.0, pytest.approx(2.0), pytest.approx(3.0)]
    assert nodes["series"]["node-2 (model)"] == [0.0, pytest.approx(0.5), None]
    assert energy["containers"]["series"] == {f"{snap.containers[0].name} (rapl)": [0.0, pytest.approx(0.1)]}


def test_the_chart_library_is_served_from_the_package(store: Store) -> None:
    client = page(create_app(store))
    js = client.get("/static/uPlot.iife.min.js")
    assert js.status_code == 200 and "uPlot" in js.text
    assert client.get("/static/page.js").status_code == 200


def test_a_read_only_page_refuses_every_decision(
    store: Store, planned: tuple[Inventory, ClusterSnapshot, Plan]
) -> None:
    inv, _, _ = planned
    plan_id = store.plans.recent(1)[0].plan_id
    client = page(create_app(store, inv))
    for decision in ("approve", "reject"):
        answer = client.post(f"/plans/{plan_id}/{decision}", data={"token": TOKEN})
        assert answer.status_code == 403
    assert store.plans.get(plan_id).status is PlanStatus.RECOMMENDED


def test_with_a_token_only_recommended_plans_get_buttons_and_a_wrong_token_changes_nothing(
        store: Store, tmp_path: Path) -> None:
    inv = inventory_with_token(tmp_path)
    newest = store.plans.recent(1)[0].plan_id
    client = page(create_app(store, inv))
    html = client.get("/").text
    assert html.count("<form") == 1 and f'action="/plans/{newest}/approve"' in html
    answer = client.post(f"/plans/{newest}/reject", data={"token": "guess"})
    assert answer.status_code == 403 and "token" in answer.text
    assert store.plans.get(newest).status is PlanStatus.RECOMMENDED


def test_rejecting_through_the_page_records_who_decided(store: Store, tmp_path: Path) -> None:
    inv = inventory_with_token(tmp_path)
    newest = store.plans.recent(1)[0].plan_id
    answer = page(create_app(store, inv)).post(f"/plans/{newest}/reject", data={"token": TOKEN, "by": "ana"})
    assert answer.status_code == 200, answer.text
    record = store.plans.get(newest)
    assert record.status is PlanStatus.REJECTED and record.decided_by == "web:ana"


def test_approving_an_applied_plan_is_refused_with_the_reason(store: Store, tmp_path: Path) -> None:
    inv = inventory_with_token(tmp_path)
    oldest = store.plans.recent(2)[0].plan_id
    answer = page(create_app(store, inv)).post(f"/plans/{oldest}/approve", data={"token": TOKEN})
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


@pytest.mark.parametrize("bind, host, ok", [
    ("127.0.0.1", "127.0.0.1:8080", True),
    ("127.0.0.1", "localhost:8080", True),
    ("127.0.0.1", "[::1]:8080", True),
    ("127.0.0.1", "evil.example:8080", False),  # DNS rebinding: the attacker's name on our address
    ("127.0.0.1", "", False),
    ("0.0.0.0", "192.0.2.10:8080", True),  # on every interface: any of this machine's addresses
    ("0.0.0.0", "evil.example", False),
    ("0.0.0.0", "head.example:8080", True),  # a name of [web] hosts
    ("10.0.0.5", "10.0.0.5", True),
    ("10.0.0.5", "127.0.0.1", False),
])
def test_the_host_header_must_name_the_page(store: Store, tmp_path: Path, bind: str, host: str, ok: bool) -> None:
    inventory_with_token(tmp_path)  # writes the token file
    inv = parse_inventory(DEMO + '\n[web]\ntoken_file = "web.token"\nhosts = ["head.example"]\n', base=tmp_path)
    client = TestClient(create_app(store, inv, bind=bind), base_url="http://127.0.0.1")
    for path in ("/", "/api/state", "/static/page.js"):
        answer = client.get(path, headers={"host": host})
        assert (answer.status_code == 200) == ok and (ok or answer.status_code == 421), (path, answer.status_code)


def test_a_decision_checks_its_size_and_its_token_before_its_form(store: Store, tmp_path: Path) -> None:
    inv = inventory_with_token(tmp_path)
    newest = store.plans.recent(1)[0].plan_id
    client = page(create_app(store, inv))
    big = client.post(f"/plans/{newest}/reject", content=b"token=" + b"x" * 100_000,
                      headers={"content-type": "application/x-www-form-urlencoded"})
    assert big.status_code == 413  # refused by its declared length: never read
    upload = client.post(f"/plans/{newest}/reject", files={"token": ("t", TOKEN.encode())})
    assert upload.status_code in (413, 415)  # no multipart parsing for anyone
    header = client.post(f"/plans/{newest}/reject", headers={"authorization": "Basic " + b64(f"ana:{TOKEN}")},
                         data={"by": "ana"})
    assert header.status_code == 403  # the token in the header only: a browser sends that by itself
    assert store.plans.get(newest).status is PlanStatus.RECOMMENDED
    ok = client.post(f"/plans/{newest}/reject", data={"token": TOKEN, "by": "ana"})
    assert ok.status_code == 200 and store.plans.get(newest).status is PlanStatus.REJECTED


def b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


def test_reads_can_need_the_token_too(store: Store, tmp_path: Path) -> None:
    (tmp_path / "web.token").write_text(TOKEN + "\n")
    (tmp_path / "web.token").chmod(0o600)
    inv = parse_inventory(DEMO + '\n[web]\ntoken_file = "web.token"\ntoken_for_reads = true\n', base=tmp_path)
    client = page(create_app(store, inv))
    for path in ("/", "/tables", "/api/state", "/static/page.js"):
        denied = client.get(path)
        assert denied.status_code == 401 and denied.headers["www-authenticate"].startswith("Basic"), path
        assert client.get(path, auth=("anyone", "guess")).status_code == 401
        assert client.get(path, auth=("anyone", TOKEN)).status_code == 200, path
    assert page(create_app(store, parse_inventory(DEMO, base=Path(".")))).get("/api/state").status_code == 200


def test_another_sites_page_cannot_decide_with_the_credentials_a_browser_resends(store: Store,
                                                                                 tmp_path: Path) -> None:
    """`token_for_reads`: the browser logged in with the token (HTTP basic) and resends it with
    every request to the page, also the form post another site's page makes it send (its Host is
    the page's own). Without the token in the form that post changes nothing."""
    (tmp_path / "web.token").write_text(TOKEN + "\n")
    (tmp_path / "web.token").chmod(0o600)
    inv = parse_inventory(DEMO + '\n[web]\ntoken_file = "web.token"\ntoken_for_reads = true\n', base=tmp_path)
    newest = store.plans.recent(1)[0].plan_id
    client = page(create_app(store, inv))
    for decision in ("reject", "approve"):
        forged = client.post(f"/plans/{newest}/{decision}", auth=("anyone", TOKEN), data={"by": "mallory"},
                             headers={"origin": "https://evil.example", "referer": "https://evil.example/"})
        assert forged.status_code == 403, forged.text
        assert store.plans.get(newest).status is PlanStatus.RECOMMENDED
    own = client.post(f"/plans/{newest}/reject", auth=("anyone", TOKEN), data={"token": TOKEN, "by": "ana"})
    assert own.status_code == 200 and store.plans.get(newest).status is PlanStatus.REJECTED


def test_node_text_is_shown_literally(store: Store, planned: tuple[Inventory, ClusterSnapshot, Plan]) -> None:
    inv, snap, _ = planned
    m = store.migrations.begin(snap.containers[1].name, snap.containers[1].node, "node-8")
    store.migrations.finish(m, MigrationState.FAILED, "<script>alert(1)</script> [/var/lib/docker] & more")
    html = page(create_app(store, inv)).get("/").text
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; [/var/lib/docker] &amp; more" in html


def test_a_plan_holding_an_infinite_value_does_not_break_the_page(
        store: Store, planned: tuple[Inventory, ClusterSnapshot, Plan]) -> None:
    from dataclasses import replace

    inv, snap, plan = planned
    broken = replace(plan, after=replace(plan.after, power_w=float("inf")), before=replace(plan.before,
                                                                                          power_w=float("nan")))
    store.plans.save(broken, "demo", snap)  # e.g. made by an older peakpack
    client = page(create_app(store, inv))
    state = client.get("/api/state")
    assert state.status_code == 200
    newest = state.json()["plans"][0]
    assert newest["after"]["power_w"] is None and newest["before"]["power_w"] is None
    assert client.get("/").status_code == 200


def test_containers_left_in_place_are_listed_with_why(store: Store, tmp_path: Path) -> None:
    inv = parse_inventory(DEMO, base=Path("."))
    snap = demo_snapshot(inv)
    bad = replace_container(snap, 0, immovable="label peakpack.memory_mb: 'nan' is not a finite number; give a "
                                               "number from 0 to 1073741824 MB")
    store.plans.save(make_plan(inv, bad, policy="noop"), "demo", bad)
    html = page(create_app(store, inv)).get("/").text
    assert html.count('<tr class="staying"') == 1 and "label peakpack.memory_mb: &#39;nan&#39;" in html


def replace_container(snap: ClusterSnapshot, index: int, **changes: object) -> ClusterSnapshot:
    from dataclasses import replace

    containers = list(snap.containers)
    containers[index] = replace(containers[index], **changes)  # type: ignore[arg-type]
    return replace(snap, containers=tuple(containers))
