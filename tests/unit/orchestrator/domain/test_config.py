"""Every inventory and snapshot error names its field and says what to do, in one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from peakpack.orchestrator.domain.config import demo_inventory, demo_snapshot, load_inventory, parse_snapshot
from peakpack.orchestrator.domain.errors import InventoryError, SnapshotError
from peakpack.orchestrator.domain.model import NodeRole

GOOD = """
[cluster]
name = "demo"
cap = 0.70
memory_cap = 0.95
epoch_seconds = 600

[[nodes]]
name = "node-1"
address = "192.0.2.11"
cpus = 16
memory_mb = 65536
role = "worker"
power_managed = true
[nodes.power]
idle_w = 100
max_w = 250

[[nodes]]
name = "node-2"
address = "192.0.2.12"
cpus = 8
memory_mb = 32768
[nodes.power]
curve_w = [90, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190]
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "inv.toml"
    p.write_text(text)
    return p


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(InventoryError) as exc:
        load_inventory(write(tmp_path, text))
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_good_inventory_loads(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, GOOD))
    assert inv.cluster.cap == 0.70
    assert [n.name for n in inv.nodes] == ["node-1", "node-2"]
    assert inv.nodes[0].power.at(0.5) == pytest.approx(175.0)
    assert inv.nodes[1].power.at(0.25) == pytest.approx(115.0)
    assert inv.nodes[1].power_managed  # workers default to power-managed


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("cpus = 16", "cpus = 0", "nodes[0].cpus: must be >= 1"),
        ("memory_mb = 32768", "memory_mb = -1", "nodes[1].memory_mb: must be >= 1"),
        ("cap = 0.70", "cap = 1.5", "cluster.cap: must be <= 1"),
        ("cap = 0.70", "cap = 0", "cluster.cap: must be > 0"),
        ("memory_cap = 0.95", "memory_cap = 0", "cluster.memory_cap: must be > 0"),
        ('name = "node-2"', 'name = "node-1"', "nodes[1].name: 'node-1' is already used by nodes[0]"),
        ('address = "192.0.2.12"', 'address = "192.0.2.11"', "nodes[1].address: '192.0.2.11' is already used"),
        ('name = "node-2"', 'name = "x;rm -rf /"', "nodes[1].name: may contain only"),
        ('address = "192.0.2.12"', 'address = "not an address!"', "nodes[1].address: 'not an address!' is neither"),
        ("epoch_seconds = 600", "epoch_seconds = 600\ncolour = 'red'", "cluster.colour: unknown key"),
        ('role = "worker"', 'role = "boss"', "nodes[0].role: must be one of"),
        ("idle_w = 100\nmax_w = 250", "idle_w = 100", "nodes[0].power: give idle_w and max_w"),
        ("idle_w = 100\nmax_w = 250", "idle_w = 300\nmax_w = 250", "nodes[0].power: max_w must be >= idle_w"),
        ("curve_w = [90, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190]", "curve_w = [1, 2]",
         "nodes[1].power: curve_w needs 11 values"),
        ("cpus = 16", 'cpus = "many"', "nodes[0].cpus:"),
    ],
)
def test_field_errors_name_the_field(tmp_path: Path, old: str, new: str, expected: str) -> None:
    assert old in GOOD
    assert expected in error_of(tmp_path, GOOD.replace(old, new, 1))


def test_malformed_toml_reports_line(tmp_path: Path) -> None:
    msg = error_of(tmp_path, GOOD.replace("cpus = 16", "cpus = = 16"))
    assert "malformed TOML" in msg and "line 11" in msg


def test_head_node_cannot_be_power_managed(tmp_path: Path) -> None:
    text = GOOD.replace('role = "worker"', 'role = "head"')
    assert "nodes[0].power_managed: a head node can never be power-managed" in error_of(tmp_path, text)
    inv = load_inventory(write(tmp_path, text.replace("power_managed = true", "")))
    assert inv.nodes[0].role is NodeRole.HEAD and not inv.nodes[0].can_power_off


def with_node1_sections(extra: str) -> str:
    return GOOD.replace("[nodes.power]\nidle_w = 100", extra + "\n[nodes.power]\nidle_w = 100", 1)


def bmc_section(password_file: str = "secrets/n1.bmc", suite: int = 17, port: int = 623) -> str:
    return (
        f'[nodes.bmc]\naddress = "192.0.2.111"\nport = {port}\nusername = "admin"\n'
        f'password_file = "{password_file}"\ncipher_suite = {suite}\n'
    )


def make_secret(tmp_path: Path, mode: int = 0o600, text: str = "s3cret\n") -> None:
    (tmp_path / "secrets").mkdir(exist_ok=True)
    f = tmp_path / "secrets" / "n1.bmc"
    f.write_text(text)
    os.chmod(f, mode)


def test_bmc_paths_are_relative_to_the_inventory(tmp_path: Path) -> None:
    make_secret(tmp_path)
    inv = load_inventory(write(tmp_path, with_node1_sections(bmc_section())))
    assert inv.nodes[0].bmc is not None
    assert inv.nodes[0].bmc.password_file == (tmp_path / "secrets" / "n1.bmc").resolve()


@pytest.mark.parametrize(
    ("setup", "section", "expected"),
    [
        ("none", bmc_section(), "nodes[0].bmc.password_file: file"),
        ("world", bmc_section(), "readable by group/others; run chmod 600"),
        ("empty", bmc_section(), "is empty"),
        ("ok", bmc_section(suite=0), "nodes[0].bmc.cipher_suite: suite 0"),
        ("ok", bmc_section(suite=2), "nodes[0].bmc.cipher_suite: suite 2"),
        ("ok", bmc_section(port=70000), "nodes[0].bmc.port: must be <= 65535"),
        ("ok", '[nodes.ssh]\nport = 0\n', "nodes[0].ssh.port: must be >= 1"),
        ("ok", '[nodes.ssh]\nidentity_file = "keys/none"\n', "nodes[0].ssh.identity_file: file"),
        ("ok", '[nodes.ssh]\nuser = "root; reboot"\n', "nodes[0].ssh.user:"),
    ],
)
def test_bmc_and_ssh_errors(tmp_path: Path, setup: str, section: str, expected: str) -> None:
    if setup != "none":
        make_secret(tmp_path, mode=0o644 if setup == "world" else 0o600, text="" if setup == "empty" else "pw")
    assert expected in error_of(tmp_path, with_node1_sections(section))


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="--inventory: cannot read"):
        load_inventory(tmp_path / "nope.toml")


def test_embedded_demo_is_valid() -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    assert len(snap.containers) > 0
    assert snap.powered() == frozenset(inv.node_names)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"containers": [{"name": "a1", "node": "nowhere", "cpu": 1, "memory_mb": 1}]},
         "containers[0].node: 'nowhere' is not in the inventory"),
        ({"containers": [{"name": "a1", "node": "node-1", "cpu": -1, "memory_mb": 1}]},
         "containers[0].cpu: must be >= 0"),
        ({"containers": [{"name": "a1", "node": "node-1", "cpu": 1, "memory_mb": 1, "class": "angel"}]},
         "containers[0].class: must be one of"),
        ({"containers": [{"name": "a1", "node": "node-1", "cpu": 1, "memory_mb": 1}] * 2},
         "containers[1].name: 'a1' appears twice"),
        ({"nodes": [{"name": "node-1", "powered": False}],
          "containers": [{"name": "a1", "node": "node-1", "cpu": 1, "memory_mb": 1}]},
         "containers[0].node: 'node-1' is powered off"),
        ({"nodes": [{"name": "ghost"}]}, "nodes[0].name: 'ghost' is not in the inventory"),
        ({"containers": [{"name": "x;rm -rf /", "node": "node-1", "cpu": 1, "memory_mb": 1}]},
         "containers[0].name: may contain only"),
        ({"containers": [{"name": "a1", "node": "node-1", "cpu": 1, "memory_mb": 1, "ports": ["80/tcp", "99999/udp"]}]},
         "containers[0].ports: '99999/udp' is not a port; give an integer from 1 to 65535 and its protocol, "
         "e.g. 8080/udp"),
        ({"containers": [{"name": "a1", "node": "node-1", "cpu": 1, "memory_mb": 1, "ports": ["0/tcp"]}]},
         "containers[0].ports: '0/tcp' is not a port"),
    ],
)
def test_snapshot_errors(tmp_path: Path, data: dict, expected: str) -> None:
    inv = load_inventory(write(tmp_path, GOOD))
    with pytest.raises(SnapshotError) as exc:
        parse_snapshot(data, inv)
    assert expected in str(exc.value)
