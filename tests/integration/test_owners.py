"""A service that Debian's docker-compose (1.29) runs, on the real lab: peakpack refuses to move it
in one line and changes nothing; opted in (`peakpack.migrate=true`) it moves with its state, and
the documented deploy path (`peakpack compose up`) updates it where it now runs, never starting a
second copy on the node it left; the operator's plain `docker-compose up` there does start one, and
then `peakpack plan` and the controller's log name compose and the fix, and the deploy path
refuses. Nothing is mocked: the lab's nodes run their own dockerd, and compose talks to each
through the `DOCKER_HOST` its sshd sets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from peakpack.lab import Lab
from tests.integration.test_migration_fidelity import REPO, node_state, sh

pytestmark = pytest.mark.integration
#: a counter in memory, written to a file each 0.2 s: "ID N" (a restored process keeps its ID and goes
#: on counting; a process started again has a new ID and counts from 1). It exits on SIGTERM, as a
#: service does: a shell as pid 1 ignores it, and compose's recreate then waited its 10 s for each
COUNTER = ('trap "exit 0" TERM; id=$$RANDOM; i=0; while :; do i=$$((i+1)); echo "$$id $$i" > /tmp/n; sleep 0.2; '
           'done')


def peakpack(*args: str, db: Path) -> subprocess.CompletedProcess[str]:
    """The command line, its lines unwrapped (the reasons checked here are longer than a terminal)."""
    return subprocess.run([sys.executable, "-m", "peakpack", *args, "--db", f"sqlite:///{db}"], capture_output=True,
                          text=True, cwd=REPO, timeout=600, env={**os.environ, "COLUMNS": "2000"})


def project(folder: Path, *, opt_in: bool, release: str = "1") -> None:
    """The shop project's compose file: one service with a restart policy and a named volume."""
    labels = '    labels:\n      peakpack.migrate: "true"\n' if opt_in else ""
    folder.mkdir(exist_ok=True)
    (folder / "docker-compose.yml").write_text(
        'version: "2.4"\nservices:\n  counter:\n    image: peakpack/busybox:lab\n    restart: unless-stopped\n'
        f'    environment:\n      RELEASE: "{release}"\n{labels}'
        f"    command: [\"sh\", \"-c\", {json.dumps(COUNTER)}]\n    volumes:\n      - data:/data\n"
        "volumes:\n  data:\n")


def compose_up(lab: Lab, node: str, folder: Path) -> None:
    """What an operator's deploy, cron job or boot script runs on one node."""
    sh(lab, node, "sh", "-c", f"cd {folder} && docker-compose -p shop up -d")


def count(lab: Lab, node: str) -> tuple[int, int]:
    ident, n = sh(lab, node, "docker", "exec", "shop_counter_1", "cat", "/tmp/n").split()
    return int(ident), int(n)


def shop_on(lab: Lab, node: str) -> list[str]:
    """The ids of the project's containers on a node, stopped ones too."""
    label = "label=com.docker.compose.project=shop"
    return sh(lab, node, "docker", "ps", "-aq", "--no-trunc", "--filter", label).split()


def test_a_compose_service_moves_only_opted_in_and_its_deploys_follow_it(clean_lab: Lab, tmp_path: Path) -> None:
    lab, db, folder = clean_lab, tmp_path / "pp.db", tmp_path / "shop"
    inventory = ["--inventory", str(lab.inventory_path)]
    project(folder, opt_in=False)
    compose_up(lab, "node-1", folder)

    before = [node_state(lab, n) for n in ("node-1", "node-2")]
    proc = peakpack("migrate", "shop_counter_1", "--to", "node-2", *inventory, db=db)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert (f"managed by docker compose project shop (node-1:{folder}); its next `up` there would start it again; "
            "label it `peakpack.migrate=true` once the project runs from every node") in proc.stderr
    assert [node_state(lab, n) for n in ("node-1", "node-2")] == before
    plan = json.loads(peakpack("plan", *inventory, "--json", "--time-limit", "2", db=db).stdout)
    [row] = [r for r in plan["immovable"] if r["container"] == "shop_counter_1"]
    assert row["node"] == "node-1" and row["reason"] == proc.stderr.strip().split("cannot be live-migrated: ", 1)[1]

    project(folder, opt_in=True)
    compose_up(lab, "node-1", folder)  # the label is new configuration: compose recreates the container
    ident, first = count(lab, "node-1")
    proc = peakpack("migrate", "shop_counter_1", "--to", "node-2", *inventory, "--json", db=db)
    assert proc.returncode == 0 and json.loads(proc.stdout)["state"] == "SUCCEEDED", proc.stderr
    moved = shop_on(lab, "node-2")
    assert shop_on(lab, "node-1") == [] and len(moved) == 1
    assert count(lab, "node-2")[0] == ident and count(lab, "node-2")[1] > first  # its state came along

    deploy = peakpack("compose", "up", "-p", "shop", *inventory, "--json", db=db)  # nothing changed in the files
    assert deploy.returncode == 0, deploy.stderr
    assert [(n["node"], n["services"], n["ok"]) for n in json.loads(deploy.stdout)["nodes"]] == [
        ("node-2", ["counter"], True)]
    assert shop_on(lab, "node-1") == [] and shop_on(lab, "node-2") == moved and count(lab, "node-2")[0] == ident

    project(folder, opt_in=True, release="2")  # a new release: recreated where it runs, on node-2 only
    deploy = peakpack("compose", "up", "-p", "shop", *inventory, db=db)
    assert deploy.returncode == 0 and "node-2: up -d --no-deps counter: done" in deploy.stdout, deploy.stderr
    assert shop_on(lab, "node-1") == [] and len(shop_on(lab, "node-2")) == 1 and shop_on(lab, "node-2") != moved
    assert sh(lab, "node-2", "docker", "exec", "shop_counter_1", "sh", "-c", "echo $RELEASE").strip() == "2"

    compose_up(lab, "node-1", folder)  # the operator's own `up` on the node it left: a second copy
    assert len(shop_on(lab, "node-1")) == 1
    proc = peakpack("plan", *inventory, "--time-limit", "2", db=db)
    why = (f"container shop_counter_1 runs on both node-1 and node-2: docker compose project shop "
           f"(node-1:{folder}) started it again on node-1; keep one copy (`docker rm -f shop_counter_1` on the node "
           "whose copy goes; the one on node-1 is the newer")
    assert f"held: node-1: {why}" in proc.stderr and f"held: node-2: {why}" in proc.stderr, proc.stderr
    assert "then deploy the project through `peakpack compose up -p shop`, never `up` on one node" in proc.stderr
    served = peakpack("serve", *inventory, "--dry-run", "--once", "--time-limit", "2", db=db)
    assert f"held: node-1, node-2: {why}" in served.stderr, served.stderr
    refused = peakpack("compose", "up", "-p", "shop", *inventory, db=db)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "service counter of shop has containers on node-1 and node-2" in refused.stderr
