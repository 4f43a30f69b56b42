"""Traffic between containers on the real lab, nothing mocked: a client container on node-1 calls
a server container on node-2 through its published port the whole time. `peakpack serve
--dry-run` reads every node's conntrack table each epoch; `history traffic` then shows the pair
with about the bytes the client's own interface counted, and the plan puts the two on one node,
saying why, while with the traffic weight at 0 it leaves them apart.

The nodes are not power-managed here, so emptying one saves nothing and only the traffic can
pay for a move: at ~18 MB/s the pair costs 0.1 J/MB x 7200 s x 18 MB/s = 13 kJ over the
forecast window, against 4.5 kJ for the migration (docs/traffic.md, the break-even)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from tests.integration.test_serve_demand import wait_for_plans

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
EPOCH = 10
IMAGE = "peakpack/busybox:lab"
#: 2 MB ten times a second at most: ~18 MB/s when the fetch itself is quick
CLIENT = "while :; do wget -qO /dev/null http://{address}:8080/blob; sleep 0.1; done"
SERVER = "mkdir -p /www && head -c 2000000 /dev/zero > /www/blob && exec httpd -f -p 80 -h /www"


def peakpack(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "peakpack", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def ip_bytes(lab: Lab) -> tuple[float, int]:
    """When, and the IP bytes the client's own eth0 sent and received (Ethernet headers, 14 B a
    packet, taken off: conntrack counts IP bytes)."""
    stats = "cd /sys/class/net/eth0/statistics && cat rx_bytes rx_packets tx_bytes tx_packets"
    proc = lab.exec("node-1", ["docker", "exec", "cli", "sh", "-c", stats])
    assert proc.returncode == 0, proc.stderr
    rx, rx_p, tx, tx_p = (int(v) for v in proc.stdout.split())
    return time.time(), (rx - 14 * rx_p) + (tx - 14 * tx_p)


def test_measured_traffic_joins_a_client_and_its_server_unless_the_weight_is_zero(clean_lab: Lab,
                                                                                  tmp_path: Path) -> None:
    lab, url, log = clean_lab, f"sqlite:///{tmp_path / 'pp.db'}", tmp_path / "serve.log"
    address = lab.layout.node("node-2").address
    text = lab.inventory_path.read_text().replace("power_managed = true", "power_managed = false")
    inventory = lab.dir / "inventory-traffic.toml"  # beside the lab's: its relative paths hold
    inventory.write_text(text)
    blind = lab.dir / "inventory-blind.toml"
    blind.write_text(text.replace("[planner]", "[planner]\ntraffic_j_per_gb = 0", 1))
    run = lab.exec("node-2", ["docker", "run", "-d", "--name", "srv", "-p", "8080:80", IMAGE, "sh", "-c", SERVER])
    assert run.returncode == 0, run.stderr
    run = lab.exec("node-1", ["docker", "run", "-d", "--name", "cli", IMAGE, "sh", "-c",
                              CLIENT.format(address=address)])
    assert run.returncode == 0, run.stderr
    try:
        with log.open("w") as out:
            serve = subprocess.Popen([sys.executable, "-m", "peakpack", "serve", "--dry-run", "--inventory",
                                      str(inventory), "--db", url, "--epoch-seconds", str(EPOCH)],
                                     stdout=out, stderr=subprocess.STDOUT, text=True, cwd=REPO)
            try:
                wait_for_plans(url, 2, serve, log)  # the first read was a baseline; counting since
                first_plan_at = time.time()
                client_before = ip_bytes(lab)
                wait_for_plans(url, 6, serve, log)
                client_after = ip_bytes(lab)
            finally:
                serve.send_signal(signal.SIGTERM)
                serve.wait(timeout=120)
        assert serve.returncode == 0, log.read_text()
        assert "epoch failed" not in log.read_text() and "traffic not measured" not in log.read_text()

        # the pair, named on both nodes (172.17.0.2 is a container on each), counted once
        proc = peakpack("history", "traffic", "--json", "--db", url)
        assert proc.returncode == 0, proc.stderr
        [pair] = [r for r in json.loads(proc.stdout) if (r["client"], r["server"]) == ("cli", "srv")]
        assert (pair["client_node"], pair["server_node"], pair["how"]) == ("node-1", "node-2", "joined")
        # about the bytes the client counted: both as rates over what each measured (their windows
        # differ by a read; the load is steady)
        with Store.open(url) as store:
            rows = [p for p in store.traffic.pairs() if (p.client, p.server) == ("cli", "srv")
                    and p.at.timestamp() > first_plan_at]
            reads = [r for r in store.traffic.reads() if r.node == "node-2" and r.at.timestamp() > first_plan_at]
            measured = sum(p.bytes for p in rows) / sum(r.interval_s or 0 for r in reads)
            last_plan = store.plans.history()[-1]
            explanations = store.plans.explanations(last_plan.plan_id)
            moves = [a for a in store.plans.actions(plan_id=last_plan.plan_id) if a.kind == "migrate"]
        counted = (client_after[1] - client_before[1]) / (client_after[0] - client_before[0])
        print(f"pair cli -> srv: measured {measured / 1e6:.2f} MB/s, the client counted {counted / 1e6:.2f} MB/s")
        assert counted > 6e6, f"the client moved only {counted / 1e6:.1f} MB/s: too little to test a join"
        assert measured == pytest.approx(counted, rel=0.15), (measured, counted)

        # the plan joins them, and says so
        assert [(a.container, a.target) for a in moves] in ([("cli", "node-2")], [("srv", "node-1")]), moves
        mover, other = moves[0].container, "srv" if moves[0].container == "cli" else "cli"
        assert explanations[mover].startswith(f"moves to join {other} ("), explanations

        # `peakpack plan` plans on the stored forecast too; with the weight at 0 nothing moves
        for inv, joins in ((inventory, True), (blind, False)):
            proc = peakpack("plan", "--inventory", str(inv), "--db", url, "--json", "--explain", "cli")
            assert proc.returncode == 0, proc.stderr
            doc = json.loads(proc.stdout)
            migrations = [a for a in doc["actions"] if a["kind"] == "migrate"]
            assert bool(migrations) is joins, doc
            if not joins:
                assert doc["explanation"]["cli"].startswith("stays on node-1: not worth its migration cost")
    finally:
        for node, name in (("node-1", "cli"), ("node-2", "srv")):
            lab.exec(node, ["docker", "rm", "-f", name])
        inventory.unlink(missing_ok=True)
        blind.unlink(missing_ok=True)


#: a closed connection leaves a conntrack table this many seconds later here (TIME_WAIT, 120 s by
#: default): with the test's 20 s epochs it stands for 120 s with 800 s ones
TIME_WAIT_S = 3
TIME_WAIT = "net.netfilter.nf_conntrack_tcp_timeout_time_wait"


def test_reads_between_epochs_count_connections_that_left_the_table_before_the_epoch(clean_lab: Lab,
                                                                                    tmp_path: Path) -> None:
    """The client opens a connection per request, and each leaves the tables TIME_WAIT_S after
    it closed: observations 20 s apart see about a sixth of them, while `serve` reading the tables
    every 2 s between epochs (`[cluster] traffic_read_seconds`) counts about what the client
    counted. Both run at once on the same traffic (reading a table changes nothing)."""
    lab = clean_lab
    address = lab.layout.node("node-2").address
    text = lab.inventory_path.read_text().replace("power_managed = true", "power_managed = false")
    inventories = {}
    for every in (2, 0):
        inventories[every] = lab.dir / f"inventory-reads-{every}.toml"
        inventories[every].write_text(text.replace("epoch_seconds = 60",
                                                   f"epoch_seconds = 60\ntraffic_read_seconds = {every}", 1))
    before = {n: lab.exec(n, ["sysctl", "-n", TIME_WAIT]).stdout.strip() for n in ("node-1", "node-2")}
    serves: list[tuple[subprocess.Popen[str], Path, str]] = []
    try:
        for node in before:
            assert lab.exec(node, ["sysctl", "-qw", f"{TIME_WAIT}={TIME_WAIT_S}"]).returncode == 0
        run = lab.exec("node-2", ["docker", "run", "-d", "--name", "srv", "-p", "8080:80", IMAGE, "sh", "-c", SERVER])
        assert run.returncode == 0, run.stderr
        run = lab.exec("node-1", ["docker", "run", "-d", "--name", "cli", IMAGE, "sh", "-c",
                                  CLIENT.format(address=address)])
        assert run.returncode == 0, run.stderr
        for every, inventory in inventories.items():
            url, log = f"sqlite:///{tmp_path / f'reads-{every}.db'}", tmp_path / f"serve-{every}.log"
            serves.append((subprocess.Popen(
                [sys.executable, "-m", "peakpack", "serve", "--dry-run", "--inventory", str(inventory), "--db", url,
                 "--epoch-seconds", "20"], stdout=log.open("w"), stderr=subprocess.STDOUT, text=True, cwd=REPO),
                log, url))
        for proc, log, url in serves:
            wait_for_plans(url, 2, proc, log)  # the first read was a baseline; counting since
        started, client_before = time.time(), ip_bytes(lab)
        for proc, log, url in serves:
            wait_for_plans(url, 4, proc, log)
        client_after = ip_bytes(lab)
    finally:
        for proc, _, _ in serves:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        for node, value in before.items():
            lab.exec(node, ["sysctl", "-qw", f"{TIME_WAIT}={value}"])
        for node, name in (("node-1", "cli"), ("node-2", "srv")):
            lab.exec(node, ["docker", "rm", "-f", name])
        for inventory in inventories.values():
            inventory.unlink(missing_ok=True)
    for proc, log, _ in serves:
        assert proc.returncode == 0 and "epoch failed" not in log.read_text(), log.read_text()
    assert "traffic read failed" not in serves[0][1].read_text()

    def rate(url: str) -> float:
        with Store.open(url) as store:
            rows = [p for p in store.traffic.pairs() if (p.client, p.server) == ("cli", "srv")
                    and p.at.timestamp() > started]
            reads = [r for r in store.traffic.reads() if r.node == "node-2" and r.at.timestamp() > started]
        return sum(p.bytes for p in rows) / sum(r.interval_s or 0 for r in reads)

    counted = (client_after[1] - client_before[1]) / (client_after[0] - client_before[0])
    with_reads, epochs_only = rate(serves[0][2]), rate(serves[1][2])
    print(f"cli -> srv: client {counted / 1e6:.2f} MB/s; with reads every 2 s {with_reads / 1e6:.2f} MB/s, "
          f"at observations only {epochs_only / 1e6:.2f} MB/s")
    assert counted > 6e6, f"the client moved only {counted / 1e6:.1f} MB/s"
    assert with_reads == pytest.approx(counted, rel=0.15), (with_reads, counted)
    assert epochs_only < 0.5 * counted, (epochs_only, counted)  # what the reads between epochs catch
