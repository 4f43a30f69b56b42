"""`peakpack lab` end to end on the real parts: nodes isolated from each other, IPMI that really
cuts a node's power, RAPL counters that follow CPU use, and a lab that refuses to be broken."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from migrate.lab import Lab
from orchestrator.config import load_inventory

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def peakpack(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=600)
    assert not check or proc.returncode == 0, proc.stderr
    return proc


def ipmitool(lab: Lab, node: str, *command: str) -> str:
    inv = load_inventory(lab.inventory_path)
    bmc = inv.node(node).bmc
    assert bmc is not None
    proc = subprocess.run(["ipmitool", "-I", "lanplus", "-C", str(bmc.cipher_suite), "-H", bmc.address,
                           "-p", str(bmc.port), "-U", bmc.username, "-f", str(bmc.password_file), *command],
                          capture_output=True, text=True, timeout=60)
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
    status = json.loads(peakpack("lab", "status", "--dir", str(lab.dir), "--json").stdout)
    assert [(s["name"], s["powered"], s["containers"]) for s in status] == [
        ("node-1", True, 0), ("node-2", True, 1), ("node-3", True, 0)]
    proc = peakpack("lab", "exec", "--dir", str(lab.dir), "node-2", "--", "docker", "inspect", "-f", "{{.State.Running}}", "c1")
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


def test_rapl_counter_follows_cpu_use(clean_lab: Lab) -> None:
    lab = clean_lab
    def watts(node: str) -> float:
        e0, t0 = energy_uj(lab, node), time.monotonic()
        time.sleep(3)
        return (energy_uj(lab, node) - e0) / 1e6 / (time.monotonic() - t0)

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
    peakpack("lab", "up", "--nodes", "1", "--dir", str(other))
    assert lab.exec("node-1", ["true"]).returncode == 0  # two labs side by side
    peakpack("lab", "down", "--dir", str(other))
    peakpack("lab", "down", "--dir", str(other))
    assert not other.exists()
