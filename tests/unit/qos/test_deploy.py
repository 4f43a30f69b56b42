"""Installing the QoS guard on a node: a file arrives whole or is not installed (its sha256 is
checked on the node before it replaces the one there), and a guard that fails to report is
reinstalled like an outdated one. The node's side runs for real in a local shell (`COPY`, and
`guard.pyz report` in a folder standing for the node's); only starting the guard is not done. The
real-lab case (a guard.pyz cut short on a node, replaced at the next observation) is
tests/integration/test_qos_deploy.py."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from peakpack.db.store import Store
from peakpack.orchestrator.act.epoch import install_guards
from peakpack.orchestrator.domain.config import demo_inventory
from peakpack.orchestrator.domain.model import ClusterSnapshot, NodeState
from peakpack.orchestrator.domain.ports import Observation, Services
from peakpack.orchestrator.observe.pressure import read_qos
from peakpack.orchestrator.remote.ssh import CommandResult
from peakpack.qos import deploy
from peakpack.qos.report import guard_archive


def copy(folder: Path, name: str, text: str, sha256: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", deploy.COPY, "sh", name, sha256], input=text, capture_output=True, text=True,
                          env={**os.environ, "PEAKPACK_QOS_DIR": str(folder)}, timeout=30)


def test_a_copy_cut_short_never_replaces_the_file_there(tmp_path: Path) -> None:
    archive = guard_archive()
    sent = base64.b64encode(archive).decode()
    whole = copy(tmp_path, "guard.pyz", sent, deploy.sha256(archive))
    assert whole.returncode == 0, whole.stderr
    assert (tmp_path / "guard.pyz").read_bytes() == archive
    changed = base64.b64encode(archive.replace(b"def ", b"def  ", 1)).decode()
    for arrived in (sent[: len(sent) // 2], sent[: len(sent) // 2 + 1], changed, ""):
        cut = copy(tmp_path, "guard.pyz", arrived, deploy.sha256(archive))
        assert cut.returncode == 1
        assert cut.stderr == (f"guard.pyz arrived incomplete or changed on the way (its sha256 is not "
                              f"{deploy.sha256(archive)}): not installed; the one before stays\n")
        assert (tmp_path / "guard.pyz").read_bytes() == archive  # the whole one stays
        assert sorted(p.name for p in tmp_path.iterdir()) == ["guard.pyz", "holds"]  # no half file left


class LocalNode:
    """An SshPool whose one node is a folder here: the guard's commands run in a local shell with
    $PEAKPACK_QOS_DIR pointing at it; starting the guard and the pressure script are answered, not
    run (no guard process, no docker)."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.ran = folder, []

    async def run(self, node: str, argv: Sequence[str], *, timeout: float = 120.0, check: bool = True,
                  input: str | None = None) -> CommandResult:
        self.ran.append(list(argv))
        script = argv[2] if len(argv) > 2 else ""
        if script == deploy.START:
            return CommandResult(0, "guard: started\n", "")
        if "docker ps" in script:
            return CommandResult(0, "", "")
        proc = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                    stderr=subprocess.PIPE,
                                                    env={**os.environ, "PEAKPACK_QOS_DIR": str(self.folder)})
        out, err = await proc.communicate(input.encode() if input is not None else None)
        result = CommandResult(proc.returncode or 0, out.decode(), err.decode())
        assert not check or result.ok, result
        return result


def test_a_guard_that_fails_to_report_is_reinstalled(tmp_path: Path) -> None:
    """A guard.pyz cut short (as an unchecked copy would leave it) cannot even report: it is
    outdated like any other, and replaced whole."""
    inv = demo_inventory()
    node = tmp_path / "node-1"
    node.mkdir()
    (node / "guard.pyz").write_bytes(guard_archive()[:3000])
    pool = LocalNode(node)
    snapshot = ClusterSnapshot(nodes=(NodeState("node-1"),), containers=())
    said: list[str] = []

    def call(coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run(coro)

    with Store.open(f"sqlite:///{tmp_path / 'pp.db'}") as store:
        read = read_qos(inv, store, pool, call, snapshot)  # type: ignore[arg-type]
        seen = Observation(snapshot, outdated_guards=tuple(read.outdated), notes=tuple(read.notes))
        services = Services(observe=lambda: seen, ops=None, settle=list, adjust_plan=lambda p, _: p,  # type: ignore[arg-type]
                            account_energy=lambda _s, _p: [],
                            install_guard=lambda n: call(deploy.install(pool, inv.node(n), inv.qos.guard)))  # type: ignore[arg-type]
        said += install_guards(store, services, seen)
        [installed] = store.qos.events(kinds=("guard_install",))
    assert (node / "guard.pyz").read_bytes() == guard_archive()
    assert installed.node == "node-1" and (installed.reason or "").startswith(
        "the guard fails to report (node node-1: the guard's report failed: "), installed.reason
    assert any(line.startswith("qos: node-1: the guard fails to report (") for line in said), said
    copied = [a for a in pool.ran if a[:3] == ["sh", "-c", deploy.COPY]]
    assert [(a[4], a[5]) for a in copied] == [("guard.pyz", deploy.sha256(guard_archive())),
                                              ("guard.json", deploy.sha256(deploy.guard_json(inv.node("node-1"),
                                                                                             inv.qos.guard)))]
