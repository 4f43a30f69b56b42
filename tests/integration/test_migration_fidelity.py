"""Live migration of containers operators actually run, on the real lab: a published port, a named
volume, files in the writable layer, env, labels, restart policy, a user-defined bridge network
and a memory limit all arrive; an open TCP connection is closed and the client reconnects; what
cannot move is refused with its reason and never planned. Nothing is mocked."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from db.store import MigrationState, Store
from lab import Lab
from migrate.handler import Migration
from orchestrator.config import load_inventory
from orchestrator.remote import RemoteShell

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
IMAGE = "peakpack/busybox:lab"
#: httpd serves a page the shell rewrites from its in-memory counter; `id` tells a restarted
#: process (new id, counter from 1) from a restored one (same id, counter larger)
SERVICE = ('id=$RANDOM; i=0; mkdir -p /www; echo in-layer > /layer.txt; httpd -f -p 80 -h /www & '
           'while :; do i=$((i+1)); echo "$id $i" > /www/index.html; sleep 0.2; done')


def peakpack(*args: str, db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args, "--db", f"sqlite:///{db}"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)


def sh(lab: Lab, node: str, *argv: str) -> str:
    proc = lab.exec(node, list(argv))
    assert proc.returncode == 0, f"{node}: {' '.join(argv)}: {proc.stderr}"
    return proc.stdout


def page(lab: Lab, node: str, tries: int = 50) -> tuple[int, int]:
    """(process id, counter) served on the node's address, port 8080."""
    url = f"http://{lab.node(node).address}:8080/"
    for _ in range(tries):
        try:
            ident, count = urllib.request.urlopen(url, timeout=5).read().decode().split()
            return int(ident), int(count)
        except (OSError, ValueError):
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer")


def inspect(lab: Lab, node: str, name: str) -> dict[str, Any]:
    [d] = json.loads(sh(lab, node, "docker", "inspect", name))
    return d


def start_service(lab: Lab, node: str, name: str = "web", *extra: str) -> None:
    sh(lab, node, "docker", "network", "create", "--subnet", "172.30.0.0/24", "appnet")
    sh(lab, node, "docker", "volume", "create", "--label", "owner=shop", "appdata")
    sh(lab, node, "docker", "run", "--rm", "-v", "appdata:/data", IMAGE, "sh", "-c", "echo in-volume > /data/v.txt")
    sh(lab, node, "docker", "run", "-d", "--name", name, "--network", "appnet", "--network-alias", "shop",
       "-p", "8080:80", "-v", "appdata:/data", "-e", "GREETING=hello", "--label", "team=shop",
       "--restart", "unless-stopped", "--memory", "64m", "--hostname", "web-host", *extra, IMAGE, "sh", "-c", SERVICE)


def test_a_service_container_moves_with_everything_it_has(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    start_service(lab, "node-1")
    ident, before = page(lab, "node-1")
    time.sleep(1)
    source = inspect(lab, "node-1", "web")
    inv = load_inventory(lab.inventory_path)

    async def write_at_the_last_moment(step: str) -> None:
        if step == "checkpointing":  # after the pre-copy, just before the freeze
            sh(lab, "node-1", "docker", "exec", "web", "sh", "-c", "echo last-second > /last.txt; rm /layer.txt; "
               "echo in-layer-again > /layer.txt; echo more >> /data/v.txt")

    with RemoteShell(inv) as shell, Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        result = shell.call(Migration(shell.pool, shell.engines, store, inv, "web", "node-1", "node-2",
                                      hook=write_at_the_last_moment).run())
        steps = {s.step: s for s in store.migration_steps(result.migration_id)}
    assert result.state is MigrationState.SUCCEEDED, result.reason
    assert steps["precopy"].bytes and steps["transferring"].bytes

    same, after = page(lab, "node-2")
    assert same == ident and after > before  # the same process, its counter continued
    assert sh(lab, "node-2", "docker", "exec", "web", "cat", "/layer.txt", "/last.txt", "/data/v.txt").split() == [
        "in-layer-again", "last-second", "in-volume", "more"]
    target = inspect(lab, "node-2", "web")
    assert target["Config"] == source["Config"]  # image, command, env, labels, hostname, ports, ...
    given = {k: v for k, v in source["HostConfig"].items() if k != "CpusetCpus"}
    assert {k: target["HostConfig"].get(k) for k in given} == given  # restart, memory, ports, binds, ...
    assert set(target["NetworkSettings"]["Networks"]) == {"appnet"}
    assert "shop" in target["NetworkSettings"]["Networks"]["appnet"]["Aliases"]
    assert target["Image"] == source["Image"]
    assert target["State"]["Running"] and target["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"

    # nothing of it is left on the source, and no checkpoint on either node
    assert sh(lab, "node-1", "docker", "ps", "-aq", "--filter", "name=^web$").strip() == ""
    assert "appdata" not in sh(lab, "node-1", "docker", "volume", "ls", "-q").split()
    root = json.loads(sh(lab, "node-2", "docker", "info", "--format", "{{json .DockerRootDir}}"))
    left = sh(lab, "node-2", "sh", "-c", f"ls -A {root}/containers/{target['Id']}/checkpoints 2>/dev/null || true")
    assert left.strip() == ""
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://{lab.node('node-1').address}:8080/", timeout=3)


def test_an_open_connection_is_closed_and_the_client_reconnects(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    start_service(lab, "node-1")
    ident, before = page(lab, "node-1")
    client = socket.create_connection((lab.node("node-1").address, 8080), timeout=120)
    client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # headers not finished: httpd keeps the connection open
    time.sleep(0.5)
    proc = peakpack("migrate", "web", "--to", "node-2", "--inventory", str(lab.inventory_path), "--json",
                    db=tmp_path / "pp.db")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["state"] == "SUCCEEDED"
    try:
        client.settimeout(30)
        closed = client.recv(1024) == b""
    except (ConnectionResetError, TimeoutError, OSError):
        closed = True
    finally:
        client.close()
    assert closed  # the old connection did not survive (tcp-close); the client has to reconnect...
    same, after = page(lab, "node-2")  # ...to the node the container moved to
    assert same == ident and after > before


def test_what_cannot_move_is_refused_and_never_planned(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    db = tmp_path / "pp.db"
    sh(lab, "node-3", "mkdir", "-p", "/tmp/peakpack-bind-test")
    sh(lab, "node-3", "docker", "run", "-d", "--name", "bound", "-v", "/tmp/peakpack-bind-test:/x",
       "--label", "peakpack.cpu=0.1", "--label", "peakpack.memory_mb=16", IMAGE, "sleep", "3600")
    proc = peakpack("migrate", "bound", "--to", "node-1", "--inventory", str(lab.inventory_path), db=db)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "bind-mounts /tmp/peakpack-bind-test" in proc.stderr and "peakpack.shared-paths=true" in proc.stderr
    assert sh(lab, "node-3", "docker", "ps", "-q", "--filter", "name=^bound$").strip()
    assert sh(lab, "node-1", "docker", "ps", "-aq").strip() == ""

    plan = json.loads(peakpack("plan", "--inventory", str(lab.inventory_path), "--json", "--time-limit", "2",
                               db=db).stdout)
    assert [r["container"] for r in plan["immovable"]] == ["bound"]
    assert "bound" not in {a.get("container") for a in plan["actions"]}
    assert "node-3" not in {a.get("node") for a in plan["actions"] if a["kind"] == "power_off"}


def test_bad_requests_change_nothing(clean_lab: Lab, tmp_path: Path) -> None:
    lab = clean_lab
    db = tmp_path / "pp.db"
    start_service(lab, "node-1")
    sh(lab, "node-2", "docker", "run", "-d", "--name", "squatter", "-p", "8080:80", IMAGE, "httpd", "-f", "-p", "80")
    cases = {
        ("web", "node-2"): "port 8080/tcp is already published on node-2",
        ("nosuch", "node-2"): "CONTAINER: nosuch runs on no node",
        ("web", "node-9"): "--to: node-9 is not in",
    }
    for (name, to), words in cases.items():
        proc = peakpack("migrate", name, "--to", to, "--inventory", str(lab.inventory_path), db=db)
        assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert sh(lab, "node-1", "docker", "ps", "-q", "--filter", "name=^web$").strip()
    assert sh(lab, "node-2", "docker", "ps", "-a", "--format", "{{.Names}}").split() == ["squatter"]
    assert "appdata" not in sh(lab, "node-2", "docker", "volume", "ls", "-q").split()


def test_the_exact_image_follows_even_when_its_name_moved_on(clean_lab: Lab, tmp_path: Path) -> None:
    """The source's tag may name another build by now (a rebuild, or an image an earlier migration
    brought): the target gets the image the container runs, by ID, under the container's name."""
    lab = clean_lab
    sh(lab, "node-1", "docker", "run", "-d", "--name", "old", "--network", "none", IMAGE, "sleep", "3600")
    runs = inspect(lab, "node-1", "old")["Image"]
    sh(lab, "node-1", "docker", "run", "--name", "rebuild", IMAGE, "touch", "/rebuilt")
    sh(lab, "node-1", "docker", "commit", "rebuild", IMAGE)  # the name now points to a new build
    try:
        assert inspect(lab, "node-1", IMAGE)["Id"] != runs
        proc = peakpack("migrate", "old", "--to", "node-2", "--inventory", str(lab.inventory_path), "--json",
                        db=tmp_path / "pp.db")
        assert proc.returncode == 0, proc.stderr
        moved = inspect(lab, "node-2", "old")
        assert moved["Image"] == runs and moved["Config"]["Image"] == IMAGE and moved["State"]["Running"]
    finally:  # the lab's image name back to what every node started with
        sh(lab, "node-1", "docker", "tag", runs, IMAGE)
