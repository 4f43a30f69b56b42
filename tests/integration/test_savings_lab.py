"""The savings ledger on the real lab, through the live services the controller uses: switching an
empty node off measures its idle power from its own RAPL counter first, waking it measures what
the way back drew, and the ledger's saving is that idle power times the time it stayed off.

Also the sampler bug the research suspected, on real lab nodes: they report the host's boot id,
so a power cycle within the sampler's window used to give one energy row spanning the time off
(the counter stands still while off), with a mean power far below the node's idle that the
idle split then learned. Now that interval has no row, and the next one is the node's real draw."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.orchestrator.decide.solve import make_plan
from peakpack.orchestrator.domain.savings import SavingKind, ledger
from peakpack.orchestrator.faces.cli.common import load_inventory
from peakpack.orchestrator.faces.wiring import live_services

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
IDLE_W = 100.0  # the lab's RAPL zone draws its idle_w on a node without containers


def test_switching_an_empty_node_off_and_on_is_measured_and_no_row_spans_the_time_off(clean_lab: Lab,
                                                                                      tmp_path: Path) -> None:
    lab, url = clean_lab, f"sqlite:///{tmp_path / 'pp.db'}"
    host_boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    node_boot = lab.exec("node-3", ["cat", "/proc/sys/kernel/random/boot_id"]).stdout.strip()
    assert node_boot == host_boot  # the premise of the bug: a lab power cycle keeps the boot id
    inv = load_inventory(lab.inventory_path)
    log = io.StringIO()
    with Store.open(url) as store:
        services = live_services(inv, store, Console(file=log))
        try:
            snapshot = services.observe().snapshot
            plan_id = store.plans.save(make_plan(inv, snapshot, policy="noop"), inventory="lab", snapshot=snapshot)
            services.account_energy(snapshot, None)  # the samples the next interval starts from
            time.sleep(2)
            services.ops.power_off("node-3", f"plan {plan_id}: emptied")
            time.sleep(8)
            services.ops.power_on("node-3", f"plan {plan_id}")
            across = services.account_energy(services.observe().snapshot, None)
            assert not [r for r in across if r.node == "node-3"], across  # spans a power cycle: no row
            time.sleep(6)
            [after] = [r for r in services.account_energy(services.observe().snapshot, None)
                       if r.node == "node-3" and r.container is None]
        finally:
            services.close()
        rows = store.savings.history()
    seconds = (after.end - after.start).total_seconds()
    assert after.source == "rapl" and after.energy_j / seconds == pytest.approx(IDLE_W, rel=0.15)

    [off] = [r for r in rows if r.kind is SavingKind.OFF]
    assert (off.node, off.plan_id, off.source) == ("node-3", plan_id, "rapl")
    assert off.idle_w == pytest.approx(IDLE_W, rel=0.15)  # a 5 s probe of a counter that ticks every 0.5 s
    assert off.end is not None and off.end > off.start
    [boot] = [r for r in rows if r.kind is SavingKind.BOOT]
    window = (off.end - off.start).total_seconds()
    assert boot.source == "rapl" and boot.energy_j is not None and boot.model_j is None
    assert 0 < boot.energy_j < IDLE_W * 1.15 * window  # it drew less than staying on idle would have

    book = ledger(rows, datetime.now(UTC))
    rapl = book.total["rapl"]
    assert rapl.saved_j == pytest.approx(off.idle_w * window) and rapl.spent_j == pytest.approx(boot.energy_j)
    assert rapl.net_j > 0 and book.nodes_off == 0
    proc = subprocess.run([sys.executable, "-m", "peakpack", "history", "savings", "--by", "plan", "--db", url],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"plan {plan_id}" in proc.stdout and "energy saved:" in proc.stdout and "(rapl counters)" in proc.stdout
    assert "node-3 draws" in log.getvalue()
