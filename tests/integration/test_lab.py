"""`peakpack lab` end to end on the real parts: nodes isolated from each other, IPMI that really
cuts a node's power, RAPL counters that follow CPU use, containers that publish ports on
user-defined bridge networks per node (nothing leaks to the host), real faults (a partitioned node,
a killed dockerd, a full disk) that their opposites undo, and a lab that refuses to be broken."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from peakpack.lab import Fault, Lab
from peakpack.lab.lab import CRIU_RUNC_CONF, ensure_criu_config
from peakpack.lab.node import LabError, cgroup_pids
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.power.ipmi import ipmitool_argv

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def peakpack(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "peakpack", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=600)
    assert not check or proc.returncode == 0, proc.stderr
    return proc


def ipmitool(lab: Lab, node: str, *command: str) -> str:
    inv = load_inventory(lab.inventory_path)
    bmc = inv.node(node).bmc
    assert bmc is not None
    # the product's own argv: its per-request timeout and retries (a loaded lab's BMC answers late)
    proc = subprocess.run(ipmitool_argv(bmc, *command), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def ssh_answers(address: str) -> bool:
    try:
        with socket.create_connection((address, 22), timeout=2):
            return True
    except OSError:
        return False


def wait(predicate, seconds: float = 60) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.3)
    return False


def energy_uj(lab: Lab, node: str) -> int:
    return int((lab.node(node).rapl_zone / "energy_uj").read_text())


def test_nodes_are_separate_and_the_inventory_is_ready(clean_lab: Lab) -> None:
    lab = clean_lab
    inv = load_inventory(lab.inventory_path)
    assert [n.name for n in inv.nodes] == ["node-1", "node-2", "node-3"]
    assert all(n.ssh and n.bmc and n.can_power_off for n in inv.nodes)
    assert oct(inv.nodes[0].bmc.password_file.stat().st_mode & 0o777) == "0o600"
    proc = lab.exec("node-2", ["docker", "run", "-d", "--name", "c1", "--network", "none",
                               "peakpack/busybox:lab", "sleep", "1000"])
    assert proc.returncode == 0, proc.stderr
    names = {n: lab.exec(n, ["docker", "ps", "--format", "{{.Names}}"]).stdout.split() for n in ("node-1", "node-2")}
    assert names == {"node-1": [], "node-2": ["c1"]}
    assert lab.exec("node-3", ["sh", "-c", "echo $NODE_NAME"]).stdout.strip() == "node-3"
    # each node's docker data-root is its own filesystem, not the host's
    node = lab.node("node-2")
    root = lab.exec("node-2", ["docker", "info", "-f", "{{.DockerRootDir}}"]).stdout.strip()
    assert root == str(node.docker_root)
    assert node.docker_root.stat().st_dev != node.dir.stat().st_dev
    status = json.loads(peakpack("lab", "status", "--dir", str(lab.dir), "--json").stdout)
    assert [(s["name"], s["powered"], s["containers"]) for s in status] == [
        ("node-1", True, 0), ("node-2", True, 1), ("node-3", True, 0)]
    proc = peakpack(
        "lab", "exec", "--dir", str(lab.dir), "node-2", "--", "docker", "inspect", "-f", "{{.State.Running}}", "c1"
    )
    assert proc.stdout.strip() == "true"
    assert peakpack("lab", "exec", "--dir", str(lab.dir), "node-2", "--", "false", check=False).returncode == 1


def test_ipmi_power_off_really_stops_the_node_and_on_brings_it_back(clean_lab: Lab) -> None:
    lab = clean_lab
    address = lab.node("node-3").address
    assert lab.exec("node-3", ["docker", "run", "-d", "--name", "victim", "--network", "none",
                               "peakpack/busybox:lab", "sleep", "1000"]).returncode == 0
    assert "Chassis Power is on" in ipmitool(lab, "node-3", "chassis", "power", "status")
    ipmitool(lab, "node-3", "chassis", "power", "soft")
    assert "Chassis Power is off" in ipmitool(lab, "node-3", "chassis", "power", "status")
    assert wait(lambda: not ssh_answers(address)), "sshd still answers on a powered-off node"
    frozen = energy_uj(lab, "node-3")
    time.sleep(1.5)
    assert energy_uj(lab, "node-3") == frozen, "an off node's energy counter must not advance"
    ipmitool(lab, "node-3", "chassis", "power", "on")
    assert wait(lambda: ssh_answers(address)), "sshd did not come back after power on"
    assert wait(lambda: lab.exec("node-3", ["docker", "ps", "-q"]).returncode == 0)
    # a power loss kills what ran: the container exists but no longer runs
    state = lab.exec("node-3", ["docker", "inspect", "-f", "{{.State.Running}}", "victim"]).stdout.strip()
    assert state == "false"
    [row] = [r for r in lab.status() if r.name == "node-3"]
    assert row.disk_free_bytes is not None  # its own filesystem stayed mounted through the power cut


def test_rapl_counter_follows_cpu_use(clean_lab: Lab) -> None:
    lab = clean_lab
    def tick(node: str, after: int) -> tuple[int, float]:
        """The counter's next value after `after` and when it appeared: the daemon adds energy in
        ticks (every 0.5 s, later on a loaded host), so a window is measured from tick to tick."""
        while (e := energy_uj(lab, node)) == after:
            time.sleep(0.02)
        return e, time.monotonic()

    def watts(node: str) -> float:
        e0, t0 = tick(node, energy_uj(lab, node))
        time.sleep(3)
        e1, t1 = tick(node, energy_uj(lab, node))
        return (e1 - e0) / 1e6 / (t1 - t0)

    idle = watts("node-1")
    assert lab.exec("node-1", ["docker", "run", "-d", "--name", "burn", "--network", "none",
                               "peakpack/busybox:lab", "sh", "-c", "while :; do :; done"]).returncode == 0
    time.sleep(1)
    busy = watts("node-1")
    assert 90 <= idle <= 140 and busy > idle + 30, (idle, busy)
    zone = lab.node("node-1").rapl_zone
    assert (zone / "name").read_text().strip() == "package-0"
    assert int((zone / "max_energy_range_uj").read_text()) > energy_uj(lab, "node-1")


def test_second_up_is_refused_and_down_is_idempotent(tmp_path: Path, lab: Lab) -> None:
    proc = peakpack("lab", "up", "--nodes", "3", "--dir", str(lab.dir), check=False)
    assert proc.returncode == 2 and "already running" in proc.stderr and "Traceback" not in proc.stderr
    assert ssh_answers(lab.node("node-1").address)  # the running lab is untouched
    other = tmp_path / "lab2"
    peakpack("lab", "up", "--nodes", "1", "--disk-gb", "2", "--dir", str(other))
    assert lab.exec("node-1", ["true"]).returncode == 0  # two labs side by side
    image = Lab(other).node("node-1").disk_image
    for fault in (Fault.PARTITION, Fault.KILL_DOCKERD, Fault.FILL_DISK):  # down cleans up a broken node too
        Lab(other).fault("node-1", fault)
    peakpack("lab", "down", "--dir", str(other))
    peakpack("lab", "down", "--dir", str(other))
    assert not other.exists()
    assert str(other) not in Path("/proc/mounts").read_text()
    assert subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True).stdout == ""


def host_network_state() -> dict[str, str]:
    """What a lab node must never change in the host's own network namespace."""
    def run(*argv: str) -> str:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    return {
        "filter": run("iptables", "-S"), "nat": run("iptables", "-t", "nat", "-S"),
        # any lab's own bridge and veths (ppXXXXbr, ppXXXXhK) may come and go; nothing else may
        "links": "\n".join(sorted(name for name in (line.split()[0].split("@")[0]
                                                    for line in run("ip", "-br", "link").splitlines())
                                  if not re.fullmatch(r"pp[0-9a-f]{4}(br|h\d+)", name))),
    }


def http_get(url: str, seconds: float = 20) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # straight to the lab, never a proxy
    deadline = time.monotonic() + seconds
    while True:
        try:
            with opener.open(url, timeout=3) as reply:
                return reply.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_published_ports_and_bridge_networks_work_per_node(clean_lab: Lab) -> None:
    lab = clean_lab
    before = host_network_state()
    nodes = ("node-1", "node-2")
    try:
        for node in nodes:  # the same subnet, container name and host port on both nodes
            proc = lab.exec(node, ["docker", "network", "create", "--subnet", "172.30.0.0/24", "appnet"])
            assert proc.returncode == 0, proc.stderr
            proc = lab.exec(node, ["docker", "run", "-d", "--name", "web", "--network", "appnet", "-p", "8080:80",
                                   "peakpack/busybox:lab", "sh", "-c",
                                   f"mkdir -p /www && echo hello from {node} > /www/index.html && "
                                   "exec httpd -f -p 80 -h /www"])
            assert proc.returncode == 0, proc.stderr
            ip = lab.exec(node, ["docker", "inspect", "-f", "{{.NetworkSettings.Networks.appnet.IPAddress}}", "web"])
            assert ip.stdout.strip() == "172.30.0.2"
        for node in nodes:  # from the host, at the node's own address (DNAT in the node's namespace)
            assert http_get(f"http://{lab.node(node).address}:8080/") == f"hello from {node}\n"
        # on the node itself (docker-proxy) and from a container by name (the network's DNS)
        proc = lab.exec("node-2", ["busybox", "wget", "-qO-", "http://127.0.0.1:8080/"])
        assert proc.stdout == "hello from node-2\n", proc.stderr
        proc = lab.exec("node-1", ["docker", "run", "--rm", "--network", "appnet", "peakpack/busybox:lab",
                                   "wget", "-qO-", "http://web/"])
        assert proc.stdout == "hello from node-1\n", proc.stderr
        # the rules live in the node's namespace; the host's firewall and links are as they were
        nat = subprocess.run(["nsenter", f"--net=/var/run/netns/{lab.node('node-1').netns}", "iptables", "-t", "nat",
                              "-S", "DOCKER"], capture_output=True, text=True, timeout=30).stdout
        assert "--dport 8080" in nat and "172.30.0.2:80" in nat, nat
        assert host_network_state() == before
    finally:
        for node in nodes:
            lab.exec(node, ["docker", "rm", "-f", "web"])
            lab.exec(node, ["docker", "network", "rm", "appnet"])


def test_criu_config_is_written_only_when_absent(tmp_path: Path, lab: Lab) -> None:
    for name in ("node-1", "node-2", "node-3"):  # `lab up` wrote each node's own, or copied the operator's
        node_conf = lab.node(name).etc_criu / "runc.conf"
        assert node_conf.exists() and lab.exec(name, ["cat", str(CRIU_RUNC_CONF)]).stdout == node_conf.read_text()
    conf = tmp_path / "criu" / "runc.conf"
    written: list[str] = []
    assert ensure_criu_config(written=written.append, kept=written.append, path=conf)
    options = [line for line in conf.read_text().splitlines() if line and not line.startswith("#")]
    assert options == ["tcp-close"] and "wrote" in written[0]
    conf.write_text("tcp-established\n")  # the operator's choice stays
    assert not ensure_criu_config(written=written.append, kept=written.append, path=conf)
    assert conf.read_text() == "tcp-established\n" and "left as it is" in written[1]


# -- faults ---------------------------------------------------------------------------------------

def status_of(lab: Lab, node: str) -> dict[str, object]:
    return next(r.to_json() for r in lab.status() if r.name == node)


def peer_ssh(lab: Lab) -> list[str]:
    """ssh as one node logs in to another (the peer key that rsync uses between nodes)."""
    keys = lab.layout.keys
    return ["ssh", "-i", str(keys / "peer_ed25519"), "-o", f"UserKnownHostsFile={keys / 'known_hosts'}",
            "-o", "BatchMode=yes", "-o", "ConnectTimeout=3"]


def rsync_to(lab: Lab, source: str, node: str, dest: str) -> list[str]:
    return ["rsync", "-e", " ".join(peer_ssh(lab)), source, f"root@{lab.node(node).address}:{dest}"]


def test_partition_cuts_the_node_off_but_not_its_bmc_and_heal_brings_it_back(clean_lab: Lab) -> None:
    lab = clean_lab
    node, other = lab.node("node-2"), lab.node("node-1")
    rsync_to_node = rsync_to(lab, "/etc/hostname", "node-2", "/tmp/peakpack-partition-probe")
    assert lab.exec("node-1", rsync_to_node).returncode == 0
    peakpack("lab", "fault", "--dir", str(lab.dir), "node-2", "--partition")
    lab.fault("node-2", Fault.PARTITION)  # again: harmless
    rows = json.loads(peakpack("lab", "status", "--dir", str(lab.dir), "--json").stdout)
    assert [(r["name"], r["partitioned"]) for r in rows] == [("node-1", False), ("node-2", True), ("node-3", False)]
    assert not ssh_answers(node.address)  # from the host
    t0 = time.monotonic()
    proc = lab.exec("node-1", rsync_to_node, timeout=30)  # from another node: rsync over ssh
    assert proc.returncode != 0 and ("No route to host" in proc.stderr or "timed out" in proc.stderr), proc.stderr
    assert time.monotonic() - t0 < 10
    # from the node itself: nothing leaves it (its route went with the link)
    proc = subprocess.run(
        ["nsenter", f"--net=/var/run/netns/{node.netns}", *peer_ssh(lab), f"root@{other.address}", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 255 and "Network is unreachable" in proc.stderr, proc.stderr
    # the BMC is out of band (served on the host side): it still answers
    assert "Chassis Power is on" in ipmitool(lab, "node-2", "chassis", "power", "status")
    lab.fault("node-2", Fault.HEAL)
    peakpack("lab", "fault", "--dir", str(lab.dir), "node-2", "--heal")  # again: harmless
    assert wait(lambda: ssh_answers(node.address), 5)
    assert lab.exec("node-1", rsync_to_node).returncode == 0
    assert status_of(lab, "node-2")["partitioned"] is False


def test_killed_dockerd_orphans_its_containers_and_start_stops_them(clean_lab: Lab) -> None:
    lab = clean_lab
    node = lab.node("node-3")
    # --stop-timeout 1: a restarted dockerd stops orphans with their stop timeout before it answers
    for name, policy in (("plain", "no"), ("always", "always")):
        proc = lab.exec("node-3", ["docker", "run", "-d", "--name", name, "--restart", policy, "--stop-timeout", "1",
                                   "--network", "none", "peakpack/busybox:lab", "sleep", "1000"])
        assert proc.returncode == 0, proc.stderr
    started = lab.exec("node-3", ["docker", "inspect", "-f", "{{.State.StartedAt}}", "always"]).stdout
    peakpack("lab", "fault", "--dir", str(lab.dir), "node-3", "--kill-dockerd")
    assert "not running" in lab.fault("node-3", Fault.KILL_DOCKERD)  # again: harmless
    proc = lab.exec("node-3", ["docker", "ps"])
    assert proc.returncode == 1 and "Cannot connect to the Docker daemon" in proc.stderr, proc.stderr
    row = status_of(lab, "node-3")
    assert (row["dockerd"], row["sshd"], row["containers"]) == (False, True, None)
    assert len(cgroup_pids(node)) >= 2  # both containers run on, without their daemon
    t0 = time.monotonic()
    lab.fault("node-3", Fault.START_DOCKERD)
    assert time.monotonic() - t0 < 10
    assert "already running" in lab.fault("node-3", Fault.START_DOCKERD)
    # without live-restore, the new dockerd stops what it found running; restart policies apply after
    states = lab.exec("node-3", ["docker", "inspect", "-f", "{{.Name}} {{.State.Status}} {{.State.ExitCode}}",
                                 "plain", "always"]).stdout.split("\n")
    assert states[:2] == ["/plain exited 137", "/always running 0"], states
    assert lab.exec("node-3", ["docker", "inspect", "-f", "{{.State.StartedAt}}", "always"]).stdout != started


def test_full_disk_refuses_docker_writes_and_free_brings_them_back(clean_lab: Lab) -> None:
    lab = clean_lab
    node = lab.node("node-1")
    peakpack("lab", "fault", "--dir", str(lab.dir), "node-1", "--fill-disk")
    lab.fault("node-1", Fault.FILL_DISK)  # again: harmless
    row = status_of(lab, "node-1")
    assert row["disk_full"] is True and row["disk_free_bytes"] < 1 << 20
    # the host paid nothing for it: the 8 GiB are allocated inside the node's sparse image only
    assert node.disk_image.stat().st_blocks * 512 < 1 << 30
    proc = lab.exec("node-1", ["docker", "run", "-d", "--name", "c1", "--network", "none",
                               "peakpack/busybox:lab", "sleep", "1000"])
    assert proc.returncode != 0 and "no space left on device" in proc.stderr, proc.stderr
    proc = lab.exec("node-1", ["docker", "volume", "create", "v1"])
    assert proc.returncode != 0 and "no space left on device" in proc.stderr, proc.stderr
    # what a migration's copy into this node's docker root does
    proc = lab.exec("node-2", rsync_to(lab, "/etc/services", "node-1", f"{node.docker_root}/"))
    # 11: error in file IO; its "No space left on device (28)" line is sometimes lost with the connection
    assert proc.returncode == 11, proc.stderr
    # a dockerd (re)started on a full disk exits at once: it cannot create <data-root>/tmp
    lab.fault("node-1", Fault.KILL_DOCKERD)
    with pytest.raises(LabError, match="no space left on device"):
        lab.fault("node-1", Fault.START_DOCKERD)
    lab.fault("node-1", Fault.FREE_DISK)
    peakpack("lab", "fault", "--dir", str(lab.dir), "node-1", "--free-disk")  # again: harmless
    lab.fault("node-1", Fault.START_DOCKERD)
    row = status_of(lab, "node-1")
    assert row["disk_full"] is False and row["disk_free_bytes"] > 1 << 30 and row["dockerd"] is True
    proc = lab.exec("node-1", ["docker", "run", "-d", "--name", "c1", "--network", "none",
                               "peakpack/busybox:lab", "sleep", "1000"])
    assert proc.returncode == 0, proc.stderr


def test_fault_wants_exactly_one_flag_and_a_node_of_the_lab(lab: Lab) -> None:
    for args in ((), ("--partition", "--heal")):
        proc = peakpack("lab", "fault", "--dir", str(lab.dir), "node-1", *args, check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.strip().count("\n") == 0 and "--partition, --heal, --kill-dockerd" in proc.stderr
    proc = peakpack("lab", "fault", "--dir", str(lab.dir), "node-9", "--heal", check=False)
    assert proc.returncode == 2 and "node-9" in proc.stderr and "node-1" in proc.stderr
    with pytest.raises(LabError, match="not one of"):
        lab.fault("node-1", "unplug")
