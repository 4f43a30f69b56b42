"""Live migration, rollback, SSH safety and pinning on the real lab (dockerd + CRIU + sshd)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.migrate.transaction import Migration
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.errors import HostKeyError
from peakpack.orchestrator.domain.states import MigrationState
from peakpack.orchestrator.remote.shell import RemoteShell

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
COUNTER = "i=0; while :; do i=$((i+1)); echo $i; sleep 0.1; done"


def peakpack(*args: str, db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "peakpack", *args, "--db", f"sqlite:///{db}"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)


def run_counter(lab: Lab, node: str, name: str, *labels: str) -> None:
    argv = ["docker", "run", "-d", "--name", name, "--network", "none"]
    for label in labels:
        argv += ["--label", label]
    proc = lab.exec(node, [*argv, "peakpack/busybox:lab", "sh", "-c", COUNTER])
    assert proc.returncode == 0, proc.stderr


def last_count(lab: Lab, node: str, name: str) -> int:
    out = lab.exec(node, ["docker", "logs", "--tail", "1", name]).stdout.split()
    return int(out[-1])


def running_on(lab: Lab, name: str) -> list[str]:
    return [n.name for n in lab.layout.nodes
            if lab.exec(n.name, ["docker", "ps", "-q", "--filter", f"name=^{name}$"]).stdout.strip()]


def test_counter_continues_on_the_target(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    run_counter(lab, "node-1", "counter")
    time.sleep(2)
    before = last_count(lab, "node-1", "counter")
    assert before >= 5
    db = tmp_path / "pp.db"
    proc = peakpack("migrate", "counter", "--to", "node-2", "--inventory", str(lab.inventory_path), "--json", db=db)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["state"] == "SUCCEEDED" and result["frozen_ms"] > 0
    assert running_on(lab, "counter") == ["node-2"]
    assert lab.exec("node-1", ["docker", "ps", "-aq", "--filter", "name=^counter$"]).stdout.strip() == ""
    time.sleep(1)
    after = last_count(lab, "node-2", "counter")
    first_on_target = int(lab.exec("node-2", ["docker", "logs", "counter"]).stdout.split()[0])
    assert first_on_target > before and after > first_on_target, (before, first_on_target, after)
    [m] = json.loads(peakpack("history", "migrations", "--json", db=db).stdout)
    assert (m["container"], m["source"], m["target"], m["state"]) == ("counter", "node-1", "node-2", "SUCCEEDED")
    assert m["bytes"] > 0 and m["started_at"] and m["finished_at"]


def test_failed_restore_rolls_back_to_the_source_with_state(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    run_counter(lab, "node-1", "fragile")
    time.sleep(2)
    before = last_count(lab, "node-1", "fragile")
    inv = load_inventory(lab.inventory_path)
    db = tmp_path / "pp.db"

    async def break_target(step: str) -> None:
        if step == "restoring":  # a real failure: the memory images never arrived on the target
            lab.exec("node-2", ["sh", "-c", "find \"$1\"/peakpack-criu -path '*/images/pages-*.img' -delete",
                                "sh", str(lab.node("node-2").dir / "docker")])

    with Store.open(f"sqlite:///{db}") as store, RemoteShell(inv) as shell:
        result = shell.call(
            Migration(shell.pool, shell.engines, store, inv, "fragile", "node-1", "node-2", hook=break_target).run()
        )
    assert result.state is MigrationState.ROLLED_BACK, result.reason
    assert running_on(lab, "fragile") == ["node-1"]
    time.sleep(1)
    assert last_count(lab, "node-1", "fragile") > before  # continued from its state, not restarted
    [m] = json.loads(peakpack("history", "migrations", "--json", db=db).stdout)
    assert m["state"] == "ROLLED_BACK" and "docker start --checkpoint" in m["reason"] and "node-2" in m["reason"]
    assert lab.exec("node-2", ["docker", "ps", "-aq", "--filter", "name=^fragile$"]).stdout.strip() == ""
    for node in ("node-1", "node-2"):  # a checkpoint is a whole memory image: none is left behind
        left = lab.exec(node, ["find", str(lab.node(node).dir / "docker" / "containers"), "-path",
                               f"*/checkpoints/peakpack-{result.migration_id}*"])
        assert left.returncode == 0 and left.stdout.strip() == "", (node, left.stdout, left.stderr)
        assert not (lab.node(node).docker_root / "peakpack-criu" / str(result.migration_id)).exists(), node


def test_changed_host_key_is_refused(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    known = lab.layout.keys / "known_hosts"
    lines = known.read_text().splitlines()
    other = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    assert other.returncode == 0
    fake_key = " ".join((tmp_path / "k.pub").read_text().split()[:2])
    address = lab.node("node-1").address
    forged = tmp_path / "known_hosts"
    forged.write_text(
        "\n".join(f"{address} {fake_key}" if line.startswith(address + " ") else line for line in lines) + "\n"
    )
    inv_text = lab.inventory_path.read_text().replace('known_hosts = "keys/known_hosts"', f'known_hosts = "{forged}"')
    inv_file = lab.dir / "forged.toml"
    inv_file.write_text(inv_text)
    inv = load_inventory(inv_file)
    with RemoteShell(inv) as shell:
        with pytest.raises(HostKeyError, match="node-1"):
            shell.run("node-1", ["true"])
        assert shell.run("node-2", ["true"]).ok  # the other nodes' keys still match
    # the planner never touches a node it cannot trust: held, with the reason, the rest planned as usual
    proc = peakpack("plan", "--inventory", str(inv_file), "--json", db=tmp_path / "pp.db")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "held: node-1: node node-1: host key does not match" in proc.stderr
    plan = json.loads(proc.stdout)
    assert "host key" in plan["held"]["node-1"]
    assert all("node-1" not in (a.get("node"), a.get("source"), a.get("target")) for a in plan["actions"])


def test_unsafe_names_never_reach_a_shell(clean_lab: Lab, tmp_path: Path) -> None:
    proc = peakpack("migrate", "x;rm -rf /", "--to", "node-2", "--inventory", str(clean_lab.inventory_path),
                    db=tmp_path / "pp.db")
    assert proc.returncode == 2 and "CONTAINER" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0


def test_pinning_separates_devils_and_is_idempotent(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    for name in ("devil-a", "devil-b"):
        run_counter(lab, "node-3", name, "peakpack.class=devil")
    run_counter(lab, "node-3", "quiet", "peakpack.class=turtle")
    db = tmp_path / "pp.db"
    first = peakpack("pin", "node-3", "--inventory", str(lab.inventory_path), "--json", db=db)
    assert first.returncode == 0, first.stderr
    changed = json.loads(first.stdout)["changed"]

    def cpus(name: str) -> set[int]:
        text = lab.exec("node-3", ["docker", "inspect", "-f", "{{.HostConfig.CpusetCpus}}", name]).stdout.strip()
        result: set[int] = set()
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            result.update(range(int(lo), int(hi or lo) + 1))
        return result

    a, b = cpus("devil-a"), cpus("devil-b")
    assert a and b and not a & b
    assert {"devil-a", "devil-b"} <= set(changed)
    second = peakpack("pin", "node-3", "--inventory", str(lab.inventory_path), "--json", db=db)
    assert json.loads(second.stdout)["changed"] == {}


def neighbour_mac(lab: Lab, node: str, address: str) -> str:
    """The MAC `node`'s own neighbour table holds for `address` on docker0 ("" if none)."""
    words = lab.exec(node, ["ip", "neigh", "show", address, "dev", "docker0"]).stdout.split()
    return words[words.index("lladdr") + 1] if "lladdr" in words else ""


def test_the_target_node_knows_the_restored_copy_at_once_on_its_bridge(clean_lab: Lab, tmp_path: Path) -> None:
    """A node keeps a neighbour entry for a bridge address it gave an earlier container: the copy
    restored there with the same address announces itself, so the node delivers to its MAC at once
    instead of holding a client's first packets until its next ARP try (a second later)."""
    lab = clean_lab
    lab.exec("node-1", ["docker", "run", "-d", "--name", "web", "peakpack/busybox:lab", "sh", "-c", COUNTER])
    old = "02:00:00:00:00:01"  # the earlier holder's MAC, left stale
    for host in range(2, 6):  # the first addresses node-2's docker0 hands out
        lab.exec("node-2", ["ip", "neigh", "replace", f"172.17.0.{host}", "lladdr", old, "dev", "docker0",
                            "nud", "stale"])
    db = tmp_path / "pp.db"
    proc = peakpack("migrate", "web", "--to", "node-2", "--inventory", str(lab.inventory_path), "--json", db=db)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["state"] == "SUCCEEDED"
    network = json.loads(lab.exec("node-2", ["docker", "inspect", "-f", "{{json .NetworkSettings.Networks.bridge}}",
                                             "web"]).stdout)
    assert network["IPAddress"].startswith("172.17.0.")
    assert neighbour_mac(lab, "node-2", network["IPAddress"]) == network["MacAddress"]
