"""Addresses that move with their container (migrate/segment.py) on the real lab: Debian's memcached
on the lab's macvlan network (`labnet`, over every node's eth0; the lab's bridge is the nodes'
shared segment), and a client on the host that holds ONE connection and never reconnects
(tests/support/held.py). Across a migration and across a rollback the connection goes on with
every acknowledged write intact; the bridge delivers to the new node as soon as `peakpack migrate`
returns; a target that already uses the address is refused at preflight; the `on_moved` hook gets
its document and its failure undoes nothing. Nothing is mocked; the tests assert state, never time."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.lab.image import memcached_image
from peakpack.lab.layout import SEGMENT_NETWORK
from peakpack.lab.node import docker
from peakpack.migrate.transaction import Migration, MigrationResult
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.model import Clients
from peakpack.orchestrator.domain.settings import MigrationSettings
from peakpack.orchestrator.domain.states import MigrationState
from peakpack.orchestrator.observe.cluster import observe_cluster
from peakpack.orchestrator.remote.shell import RemoteShell
from peakpack.power.ipmi import power_probe
from tests.support.held import HeldConnection

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
NAME = "mc"
PORT = 11211
#: memcached as root (CRIU cannot dump another user's process where root lacks CAP_SYS_RESOURCE),
#: beside a second server on port 81 that a test can stop to make the copy stop answering
SERVICE = "busybox nc -ll -p 81 -e cat & echo $! > /tmp/nc.pid; exec memcached -u root -m 64 -t 1 -c 64 -p 11211"


@pytest.fixture()
def seg_lab(clean_lab: Lab) -> Lab:
    memcached_image(list(clean_lab.layout.nodes))
    return clean_lab


def start(lab: Lab, node: str = "node-1", ip: str | None = None) -> tuple[str, str]:
    """memcached on `node` on the segment network; its (IPv4 address, MAC address)."""
    layout = lab.node(node)
    docker(layout, "run", "-d", "--name", NAME, "--network", SEGMENT_NETWORK, *(["--ip", ip] if ip else []),
           "--restart", "unless-stopped", "peakpack/memcached:lab", "sh", "-c", SERVICE)
    address, mac = endpoint(lab, node)
    for _ in range(100):
        try:
            socket.create_connection((address, PORT), timeout=1).close()
            break
        except OSError:
            subprocess.run(["sleep", "0.1"])
    return address, mac


def endpoint(lab: Lab, node: str) -> tuple[str, str]:
    net = json.loads(docker(lab.node(node), "inspect", "-f", "{{json .NetworkSettings.Networks}}", NAME).stdout)
    return net[SEGMENT_NETWORK]["IPAddress"], net[SEGMENT_NETWORK]["MacAddress"]


def copies(lab: Lab) -> dict[str, str]:
    found = {}
    for n in lab.layout.nodes:
        state = docker(n, "inspect", "-f", "{{.State.Running}}", NAME, check=False)
        if state.returncode == 0:
            found[n.name] = "running" if state.stdout.strip() == "true" else "stopped"
    return found


def delivered_to(lab: Lab, mac: str) -> str | None:
    """The node whose port of the lab's bridge the bridge sends `mac` to (its forwarding table)."""
    fdb = subprocess.run(["bridge", "fdb", "show", "br", lab.layout.bridge], capture_output=True, text=True).stdout
    port = next((line.split()[2] for line in fdb.splitlines() if line.lower().startswith(mac.lower())), None)
    return next((n.name for n in lab.layout.nodes if n.host_veth == port), None)


def answers_anew(address: str) -> bool:
    """A new connection to `address` is accepted and memcached answers on it."""
    with socket.create_connection((address, PORT), timeout=10) as s:
        s.sendall(b"version\r\n")
        return s.recv(100).startswith(b"VERSION")


def peakpack(*args: str, db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "peakpack", *args, "--db", f"sqlite:///{db}"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)


def migrate(lab: Lab, db: Path, hook=None, settings: MigrationSettings | None = None,  # type: ignore[no-untyped-def]
            source: str = "node-1", target: str = "node-2") -> MigrationResult:
    inv = load_inventory(lab.inventory_path)
    with RemoteShell(inv) as shell, Store.open(f"sqlite:///{db}") as store:
        return shell.call(Migration(shell.pool, shell.engines, store, inv, NAME, source, target, hook=hook,
                                    bmc_power=power_probe(inv), settings=settings).run())


def test_a_connection_held_across_a_migration_is_kept(seg_lab: Lab, tmp_path: Path) -> None:
    lab = seg_lab
    address, mac = start(lab)
    confs = {n.name: (n.etc_criu / "runc.conf").read_bytes() for n in lab.layout.nodes}
    with HeldConnection(address, PORT) as client:
        client.wait_for(200)
        done = peakpack("migrate", NAME, "--to", "node-2", "--inventory", str(lab.inventory_path), db=tmp_path / "db")
        assert done.returncode == 0, done.stderr
        assert "SUCCEEDED" in done.stdout
        # the bridge learnt the move from the target's announcement, not from aging out (300 s)
        assert delivered_to(lab, mac) == "node-2"
        assert answers_anew(address)
        moved_at = client.seen.acked
        client.wait_for(moved_at + 200)
        seen = client.stop()
        assert seen.error is None, seen.error  # the one connection went on: a pause, not a reset
        assert seen.acked >= moved_at + 200
        assert client.readback() == 0  # every acknowledged write, read back on that connection
    assert copies(lab) == {"node-2": "running"}
    assert endpoint(lab, "node-2") == (address, mac)  # the same IPv4 and MAC addresses
    assert [(n.etc_criu / "runc.conf").read_bytes() for n in lab.layout.nodes] == list(confs.values())
    with Store.open(f"sqlite:///{tmp_path / 'db'}") as store:
        [m] = store.migrations.history()
        preflight = next(s for s in store.migrations.steps(m.id) if s.step == "preflight")
    assert json.loads(preflight.detail or "{}")["clients"] == Clients.KEPT.value


def test_a_connection_held_across_a_rollback_after_the_dump_is_kept(seg_lab: Lab, tmp_path: Path) -> None:
    """The source is dumped, its links taken down, then the target's disk fills: the source is
    resumed in place, its connection out of repair mode and its links back up, and it goes on."""
    lab = seg_lab
    address, mac = start(lab)

    async def fill_target(step: str) -> None:
        if step == "transferring":
            lab.fault("node-2", "fill-disk")

    with HeldConnection(address, PORT) as client:
        client.wait_for(200)
        try:
            result = migrate(lab, tmp_path / "db", fill_target)
        finally:
            lab.fault("node-2", "free-disk")
        assert result.state is MigrationState.ROLLED_BACK, result.reason
        resumed_at = client.seen.acked
        client.wait_for(resumed_at + 200)
        seen = client.stop()
        assert seen.error is None, seen.error
        assert seen.acked >= resumed_at + 200
        assert client.readback() == 0
    assert copies(lab) == {"node-1": "running"}
    assert delivered_to(lab, mac) == "node-1"
    assert answers_anew(address)


def test_a_target_that_ran_and_stopped_answering_hands_back_and_resets_the_connection(seg_lab: Lab,
                                                                                      tmp_path: Path) -> None:
    """The target was restored and announced itself, then one of its servers went away within the
    grace period: its links go down before it is removed (its closing sockets must not answer the
    client), and the source resumes with the state of the dump and announces itself again. The
    connection went on on the target meanwhile, so the source's copy of it can never agree with the
    client again: it is reset, so the client reconnects at once (instead of hanging), to the source."""
    lab = seg_lab
    address, mac = start(lab)

    async def stop_a_server(step: str) -> None:
        if step == "settling":  # restored and verified running; the grace period starts
            docker(lab.node("node-2"), "exec", NAME, "sh", "-c", "kill $(cat /tmp/nc.pid)")

    with HeldConnection(address, PORT) as client:
        client.wait_for(200)
        result = migrate(lab, tmp_path / "db", stop_a_server, MigrationSettings(grace_seconds=2.0))
        assert result.state is MigrationState.ROLLED_BACK, result.reason
        assert "does not answer" in (result.reason or "")
        seen = client.stop()
        assert seen.error is not None and "Timeout" not in seen.error, seen.error  # reset or closed
    assert copies(lab) == {"node-1": "running"}
    assert delivered_to(lab, mac) == "node-1"
    fresh = HeldConnection(address, PORT)  # a new connection, to the source's state: the writes
    try:                                   # acknowledged before the migration began are all there
        assert fresh.readback(200) == 0
    finally:
        fresh.sock.close()


def test_a_target_already_using_the_address_is_refused_and_planned_around(seg_lab: Lab, tmp_path: Path) -> None:
    lab = seg_lab
    taken = lab.layout.ip_range(lab.node("node-1")).split("/")[0]
    address, _ = start(lab, ip=taken)
    docker(lab.node("node-2"), "run", "-d", "--name", "squatter", "--network", SEGMENT_NETWORK, "--ip", taken,
           "peakpack/busybox:lab", "sleep", "3600")
    confs = {n.name: (n.etc_criu / "runc.conf").read_bytes() for n in lab.layout.nodes}
    done = peakpack("migrate", NAME, "--to", "node-2", "--inventory", str(lab.inventory_path), db=tmp_path / "db")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert re.search(rf"address {re.escape(address)} of network {SEGMENT_NETWORK} is already used on node-2 by "
                     "squatter", line), line
    assert copies(lab) == {"node-1": "running"}  # nothing changed on either node
    assert [(n.etc_criu / "runc.conf").read_bytes() for n in lab.layout.nodes] == list(confs.values())
    assert not list((lab.node("node-2").docker_root / "peakpack-criu").glob("*/*"))
    inv = load_inventory(lab.inventory_path)
    [mc] = [c for c in observe_cluster(inv, power_probe(inv)).containers if c.name == NAME]
    assert mc.clients is Clients.KEPT
    assert [n for n, why in mc.refused_on if address in why] == ["node-2"]  # the plan keeps it off node-2


def hook_inventory(lab: Lab, command: str, timeout: float) -> Path:
    """The lab's inventory with `[migration] on_moved` set (beside it: its paths are relative)."""
    text = lab.inventory_path.read_text().replace(
        "[migration]", f"[migration]\non_moved = {json.dumps(command)}\non_moved_timeout_seconds = {timeout}", 1)
    path = lab.dir / "hooked.toml"
    path.write_text(text)
    return path


def test_the_hook_gets_its_document_and_a_failing_hook_undoes_nothing(clean_lab: Lab, tmp_path: Path) -> None:
    """A container that only publishes a port answers at the target node's address after a move:
    the hook is told where, and a hook that hangs (killed at its timeout) or fails changes nothing."""
    lab = clean_lab
    docker(lab.node("node-1"), "run", "-d", "--name", NAME, "-p", "8090:81", "peakpack/busybox:lab",
           "sh", "-c", "nc -ll -p 81 -e cat")
    doc = tmp_path / "doc.json"
    hanging = hook_inventory(lab, f"cat > {doc}; exec sleep 60", timeout=2)
    done = peakpack("migrate", NAME, "--to", "node-2", "--inventory", str(hanging), db=tmp_path / "db")
    assert done.returncode == 0, done.stderr
    assert "on_moved FAILED" in done.stderr and "killed after 2 s" in done.stderr
    told = json.loads(doc.read_text())
    n1, n2 = (lab.node(n).address for n in ("node-1", "node-2"))
    assert (told["event"], told["state"], told["container"], told["runs_on"], told["moved"]) == (
        "peakpack.migration.settled", "SUCCEEDED", NAME, "node-2", True)
    assert told["clients"] == Clients.ELSEWHERE.value
    assert told["before"]["ports"] == [{"address": n1, "port": 8090, "proto": "tcp", "container_port": 81}]
    assert told["after"]["ports"] == [{"address": n2, "port": 8090, "proto": "tcp", "container_port": 81}]
    assert copies(lab) == {"node-2": "running"}

    failing = hook_inventory(lab, "echo no load balancer here; exit 3", timeout=30)
    back = peakpack("migrate", NAME, "--to", "node-1", "--inventory", str(failing), "--json", db=tmp_path / "db")
    assert back.returncode == 0, back.stderr
    result = json.loads(back.stdout)
    assert result["state"] == "SUCCEEDED"
    assert "FAILED" in result["on_moved"] and "exited 3: no load balancer here" in result["on_moved"]
    assert copies(lab) == {"node-1": "running"}
    with Store.open(f"sqlite:///{tmp_path / 'db'}") as store:
        hooks = [s for m in store.migrations.history() for s in store.migrations.steps(m.id)
                 if s.step == "on_moved"]
    assert sorted(s.state for s in hooks) == ["FAILED", "FAILED"]
