"""The web page in a real browser against a store filled by a real lab run: headless Chromium
(Debian's `chromium`, driven over its DevTools pipe) loads `peakpack web`, the test reads the
rendered DOM (tables, chart canvases drawn by the page's script) and approves a RECOMMENDED plan
through the page's form, which must apply it on the lab. Nothing is mocked."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from peakpack.lab import Lab
from tests.integration.test_service import REPO, history, planned_cpu, serve, spread_thinly, start, where
from tests.support.browser import Browser

pytestmark = pytest.mark.integration
TOKEN = "lab-web-token"


def web_inventory(lab: Lab) -> Path:
    """The lab's inventory with a `[web]` token, next to it (its paths are relative to it)."""
    folder = lab.inventory_path.parent
    (folder / "web.token").write_text(TOKEN + "\n")
    (folder / "web.token").chmod(0o600)
    path = folder / "inventory-web.toml"
    path.write_text(lab.inventory_path.read_text() + '\n[web]\ntoken_file = "web.token"\n')
    return path


def approve(browser: Browser, plan_id: int) -> None:
    """Fill the plan's form with the token and press approve; the answer page must say APPLIED."""
    browser.evaluate(f"""(() => {{
        const form = document.querySelector('#plan-{plan_id} form.decide');
        form.querySelector('input[name=token]').value = {json.dumps(TOKEN)};
        form.querySelector('input[name=by]').value = 'browser-test';
        form.querySelector('button[name=approve]').click();
    }})()""")
    title = browser.wait_for("document.getElementById('title') && document.getElementById('title').textContent",
                             timeout_s=600)
    assert title == f"plan {plan_id}: APPLIED", browser.evaluate("document.body.innerText")


@pytest.fixture
def web_page(clean_lab: Lab, tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """`peakpack web` on a fresh store (URL, store file, inventory); stopped afterwards."""
    db, inventory = tmp_path / "pp.db", web_inventory(clean_lab)
    proc = subprocess.Popen([sys.executable, "-m", "peakpack", "web", "--db", f"sqlite:///{db}",
                             "--inventory", str(inventory), "--http-port", "0"],
                            cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"http://\S+/", line)
        assert found, line
        yield found.group(0), db, inventory
    finally:
        proc.terminate()
        proc.wait(30)


def test_the_page_shows_a_lab_run_and_approving_a_plan_applies_it(
    clean_lab: Lab, web_page: tuple[str, Path, Path]
) -> None:
    lab, (url, db, inventory) = clean_lab, web_page
    spread_thinly(lab)
    serve(lab, db, "--once")  # consolidates: migrations, power-off, energy rows
    [host] = {nodes[0] for nodes in where(lab).values()}
    # new containers plan on their labels: 1.5 cores is over the cap, the next plan wakes a node
    start(lab, host, "burst-1", 0.75)
    start(lab, host, "burst-2", 0.75)
    proc = subprocess.run([sys.executable, "-m", "peakpack", "plan", "--inventory", str(inventory),
                           "--db", f"sqlite:///{db}", "--time-limit", "5", "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    plans = history(db, "plans")
    recommended = plans[-1]["plan_id"]
    assert len(plans) == 2 and plans[-1]["status"] == "RECOMMENDED"
    assert json.loads(proc.stdout)["actions"], "the overloaded node must give a plan with actions"

    with Browser() as browser:
        browser.goto(url)
        # the charts are drawn by the page's script from /api/state: canvases exist only after it ran.
        # The containers' chart fills from the next epoch on: the one interval this run closed, after
        # its plan, has no counter reading of the containers of its own (one observation per epoch)
        assert browser.wait_for("document.querySelectorAll('#chart-nodes canvas').length") >= 1
        assert "No energy recorded" in browser.evaluate("document.querySelector('#chart-containers').innerText")
        dom = browser.evaluate("""({
            nodes: [...document.querySelectorAll('tr.node')].map(r => r.dataset.node),
            plans: [...document.querySelectorAll('tr.plan')].map(r => [+r.dataset.plan, r.dataset.status]),
            migrations: document.querySelectorAll('tr.migration').length,
            power: document.querySelectorAll('tr.power-event').length,
            forms: [...document.querySelectorAll('form.decide')].map(f => f.getAttribute('action')),
            legend: document.querySelector('#chart-nodes .u-legend').innerText,
        })""")
        assert sorted(dom["nodes"]) == sorted(n.name for n in lab.layout.nodes)
        assert dom["plans"] == [[recommended, "RECOMMENDED"], [plans[0]["plan_id"], "APPLIED"]]
        assert dom["migrations"] == len(history(db, "migrations")) == 2
        assert dom["power"] == 2
        assert dom["forms"] == [f"/plans/{recommended}/approve"]
        assert "rapl" in dom["legend"]

        approve(browser, recommended)

    applied = history(db, "plans")[-1]
    assert applied["plan_id"] == recommended and applied["status"] == "APPLIED"
    assert applied["decided_by"] == "web:browser-test"
    placement = where(lab)
    assert sorted(placement) == ["app-1", "app-2", "app-3", "burst-1", "burst-2"]
    cpu = planned_cpu(db, recommended)  # the apps on their measured history, the bursts on their labels
    assert cpu["burst-1"] == cpu["burst-2"] == 0.75, cpu
    load: dict[str, float] = {}
    for name, [node] in placement.items():
        load[node] = load.get(node, 0) + cpu[name]
    assert len(load) >= 2 and max(load.values()) <= 0.7 * 2 + 1e-9, load


def test_serve_approve_leaves_the_plan_to_the_page_and_the_controller_applies_it(
    clean_lab: Lab, tmp_path: Path
) -> None:
    lab, db, log = clean_lab, tmp_path / "pp.db", tmp_path / "serve.log"
    spread_thinly(lab)
    with log.open("w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "peakpack", "serve", "--inventory", str(web_inventory(lab)),
                                 "--db", f"sqlite:///{db}", "--time-limit", "5", "--epoch-seconds", "3600",
                                 "--approve", "--http-port", "0"], cwd=REPO, stderr=stderr)
    try:
        for _ in range(300):
            found = re.search(r"web page: (http://\S+/)", log.read_text())
            if found or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert found, log.read_text()
        with Browser() as browser:
            browser.goto(found.group(1))
            # the first epoch's plan appears without reloading: the page refreshes its tables itself
            plan_id = browser.wait_for(
                "(document.querySelector('tr.plan[data-status=RECOMMENDED] form.decide') || {}).action"
                " && +document.querySelector('tr.plan[data-status=RECOMMENDED]').dataset.plan",
                timeout_s=300,
            )
            assert len(where(lab)) == 3 and len({n[0] for n in where(lab).values()}) == 3  # nothing moved unasked
            approve(browser, plan_id)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(300)
    assert len({nodes[0] for nodes in where(lab).values()}) == 1, where(lab)
    assert history(db, "plans")[0]["status"] == "APPLIED"
