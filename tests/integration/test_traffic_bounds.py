"""Traffic nobody answered is not traffic between containers, on the real lab: a container on
node-1 sends UDP at a port another container publishes on node-2, where nothing listens (nothing
ever replies: conntrack keeps the flow [UNREPLIED]), while it also fetches pages from a third
container's published TCP port. The live read path (`cluster.read_node_traffic`, as `serve` reads
the tables) counts the pair that spoke both ways and not the one only one side spoke in, which
would otherwise let any container pull another onto its node (docs/traffic.md, "Bounds")."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest

from peakpack.lab import Lab
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.records import TrafficRecord
from peakpack.orchestrator.observe.cluster import read_node_traffic
from peakpack.orchestrator.observe.traffic import TrafficMeter
from peakpack.orchestrator.remote.shell import RemoteShell

pytestmark = pytest.mark.integration
IMAGE = "peakpack/busybox:lab"
SERVER = "mkdir -p /www && head -c 200000 /dev/zero > /www/blob && exec httpd -f -p 80 -h /www"
#: busybox's syslogd forwards every message as one UDP datagram to the remote address
FLOOD = ("syslogd -n -R {address}:9999 & sleep 1; m=$(head -c 900 /dev/zero | tr '\\0' x); "
         "while :; do logger -t flood \"$m\"; done")
FETCH = "while :; do wget -qO /dev/null http://{address}:8080/blob; sleep 0.2; done"


def test_a_flow_only_one_side_spoke_in_is_not_counted_as_a_pair(clean_lab: Lab) -> None:
    lab = clean_lab
    inv = load_inventory(lab.inventory_path)
    address = {n.name: n.address for n in inv.nodes}
    started = [
        ("node-2", ["docker", "run", "-d", "--name", "sink", "-p", "9999:9999/udp", IMAGE, "sleep", "100000"]),
        ("node-2", ["docker", "run", "-d", "--name", "srv", "-p", "8080:80", IMAGE, "sh", "-c", SERVER]),
        ("node-1", ["docker", "run", "-d", "--name", "cli", IMAGE, "sh", "-c",
                    FLOOD.format(address=address["node-2"]) + " & " + FETCH.format(address=address["node-2"])]),
    ]
    try:
        for node, argv in started:
            run = lab.exec(node, argv)
            assert run.returncode == 0, run.stderr
        said: list[str] = []
        meter = TrafficMeter(inv, said.append)
        nodes = ("node-1", "node-2")

        def read() -> dict:
            async def both() -> list:
                return list(await asyncio.gather(*(read_node_traffic(shell.pool, n, address[n]) for n in nodes)))

            return dict(zip(nodes, shell.call(both())))

        with RemoteShell(inv) as shell:
            time.sleep(3)  # both loops running: the flood's flow is in both tables
            meter.measure(read(), datetime.now(UTC))  # a baseline
            time.sleep(10)
            table = lab.exec("node-2", ["cat", "/proc/net/nf_conntrack"]).stdout
            rows = meter.measure(read(), datetime.now(UTC)).pairs
    finally:
        for node, name in (("node-1", "cli"), ("node-2", "srv"), ("node-2", "sink")):
            lab.exec(node, ["docker", "rm", "-f", name])

    flood = [line for line in table.splitlines() if "dport=9999" in line and "udp" in line]
    assert flood and all("[UNREPLIED]" in line for line in flood), flood  # the kernel's view: nobody answered

    def pair(server: str) -> list[TrafficRecord]:
        return [r for r in rows if (r.client, r.server) == ("cli", server)]

    [fetched] = pair("srv")  # spoke both ways: counted, once, joined across the nodes
    assert (fetched.how, fetched.client_node, fetched.server_node) == ("joined", "node-1", "node-2")
    assert fetched.s2c_bytes > 200_000, fetched
    assert pair("sink") == [], pair("sink")  # sent at, never answered: no pair
    assert not any("dropped" in line for line in said), said  # nothing about the tables was out of bounds
