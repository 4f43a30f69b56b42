"""The page-server path on the real lab (migrate/criu.py): memory goes straight to a CRIU page server
on the target, the source is dumped and left stopped until the target has run for the grace
period, and every failure before that resumes the source in place. The workload is
tests/support/memhold.c: its whole memory is state (a checksum it keeps of a pseudo-random fill),
plus an id and a counter it prints. Nothing is mocked; the tests assert state and placement, never
time. Every test also checks that the migration left each node's /etc/criu as it found it (no
runc.conf block, no lease but a settled one's tombstone) and no CRIU folder or daemon behind."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from peakpack.db.store import Store
from peakpack.lab import Lab
from peakpack.lab.node import docker
from peakpack.migrate.transaction import Migration, MigrationResult
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.settings import CRITICAL_LABEL, MigrationSettings
from peakpack.orchestrator.domain.states import MigrationState
from peakpack.orchestrator.remote.shell import RemoteShell
from peakpack.power.ipmi import power_probe
from tests.support.labs import criu_daemons

pytestmark = pytest.mark.integration
IMAGE = "peakpack/busybox:lab"
NAME = "memhold"
SOURCE = os.path.join(os.path.dirname(__file__), "..", "support", "memhold.c")
#: a short grace period keeps these tests short; the one test of the grace period sets its own
FAST = MigrationSettings(grace_seconds=1.0)


@pytest.fixture(scope="module")
def memhold(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = tmp_path_factory.mktemp("memhold") / "memhold"
    subprocess.run(["gcc", "-O2", "-static", "-o", str(binary), SOURCE], check=True)
    return binary


@pytest.fixture()
def criu_lab(clean_lab: Lab) -> Iterator[Lab]:
    """The session's lab; afterwards, whatever the test did, no node carries this module's CRIU
    leftovers (runc.conf as seeded, no lock, no migration folder, no page server)."""
    confs = {n.name: (n.etc_criu / "runc.conf").read_bytes() for n in clean_lab.layout.nodes}
    yield clean_lab
    for n in clean_lab.layout.nodes:
        assert (n.etc_criu / "runc.conf").read_bytes() == confs[n.name], n.name
        lease = n.etc_criu / "peakpack.lock"  # none, or the tombstone of a settled migration
        assert not lease.exists() or lease.read_text().endswith(" settled\n"), (n.name, lease.read_text())
        left = list((n.docker_root / "peakpack-criu").glob("*/*")) if (n.docker_root / "peakpack-criu").exists() else []
        assert left == [], (n.name, left)
    assert criu_daemons(clean_lab) == []


def start(lab: Lab, binary: Path, mb: int, *docker_args: str, node: str = "node-1") -> tuple[int, int]:
    """memhold holding `mb` MB on `node`, with the operator's restart policy; returns (id, count)
    once it counts."""
    layout = lab.node(node)
    docker(layout, "create", "--name", NAME, "--network", "none", "--restart", "unless-stopped", *docker_args,
           IMAGE, "/memhold", str(mb))
    docker(layout, "cp", str(binary), f"{NAME}:/memhold")
    docker(layout, "start", NAME)
    deadline = time.monotonic() + 300
    while not (state := counter(lab, node)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert state, docker(layout, "logs", NAME).stderr
    return state


def counter(lab: Lab, node: str) -> tuple[int, int] | None:
    lines = docker(lab.node(node), "logs", "--tail", "1", NAME).stdout.split("\n")
    words = lines[-2].split() if len(lines) > 1 else []
    return (int(words[0]), int(words[1])) if len(words) == 2 and words[0] != "check" else None


def intact(lab: Lab, node: str) -> str:
    """Ask the process on `node` to read all its memory again; its answer: "same" or "differs"."""
    layout = lab.node(node)
    seen = docker(layout, "logs", NAME).stdout.count("check ")
    docker(layout, "kill", "-s", "USR1", NAME)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        logs = docker(layout, "logs", NAME).stdout.splitlines()
        checks = [line.split() for line in logs if line.startswith("check ")]
        if len(checks) > seen:
            return checks[-1][2]
        time.sleep(0.2)
    return "no answer"


def copies(lab: Lab) -> dict[str, str]:
    """node -> 'running' / 'stopped' for every node that has the container."""
    found = {}
    for n in lab.layout.nodes:
        state = docker(n, "inspect", "-f", "{{.State.Running}}", NAME, check=False)
        if state.returncode == 0:
            found[n.name] = "running" if state.stdout.strip() == "true" else "stopped"
    return found


def assert_runs_once_with_its_state(lab: Lab, node: str, before: tuple[int, int]) -> None:
    assert copies(lab) == {node: "running"}
    time.sleep(0.5)  # let it print at least once more where it now runs
    now = counter(lab, node)
    assert now is not None and now[0] == before[0] and now[1] > before[1], (before, now)  # same process, went on
    assert intact(lab, node) == "same"
    policy = docker(lab.node(node), "inspect", "-f", "{{.HostConfig.RestartPolicy.Name}}", NAME).stdout.strip()
    assert policy == "unless-stopped"


def migrate(lab: Lab, db: Path, hook: Callable[[str], Awaitable[None]] | None = None,
            settings: MigrationSettings = FAST) -> MigrationResult:
    inv = load_inventory(lab.inventory_path)
    with RemoteShell(inv) as shell, Store.open(f"sqlite:///{db}") as store:
        return shell.call(Migration(shell.pool, shell.engines, store, inv, NAME, "node-1", "node-2", hook=hook,
                                    bmc_power=power_probe(inv), settings=settings).run())


def steps(db: Path, migration_id: int) -> dict[str, str]:
    with Store.open(f"sqlite:///{db}") as store:
        return {s.step: s.detail or "" for s in store.migrations.steps(migration_id)}


def test_512_mb_of_memory_arrive_intact(criu_lab: Lab, memhold: Path, tmp_path: Path) -> None:
    lab = criu_lab
    before = start(lab, memhold, 512)
    result = migrate(lab, tmp_path / "pp.db")
    assert result.state is MigrationState.SUCCEEDED, result.reason
    assert_runs_once_with_its_state(lab, "node-2", before)
    said = steps(tmp_path / "pp.db", result.migration_id)["preflight"]
    # the runc.conf line reached the dump through runc, and the page server's arguments took it too
    assert "pages to the target" in said and "page streams over cubic" in said


def test_containerds_work_folder_for_the_checkpoint_goes_with_the_migration(criu_lab: Lab, memhold: Path,
                                                                            tmp_path: Path) -> None:
    """`docker checkpoint create` leaves dockerd's and containerd's work folders (/tmp/ctrd-checkpoint*
    with a descriptors.json, ctd-checkpoint*) behind on the source, successful ones included: the
    migration notes them and removes them when it is settled."""
    lab = criu_lab
    start(lab, memhold, 16)
    seen: dict[str, list[Path]] = {}

    async def note(step: str) -> None:
        if step == "verifying":  # dumped and restored: each node noted the folders in the migration's
            for n in ("node-1", "node-2"):
                for noted in (lab.node(n).docker_root / "peakpack-criu").glob("*/leftovers"):
                    seen.setdefault("folders", []).extend(Path(p) for p in noted.read_text().split())

    result = migrate(lab, tmp_path / "pp.db", note)
    assert result.state is MigrationState.SUCCEEDED, result.reason
    assert any(f.name.startswith("ctrd-checkpoint") for f in seen["folders"]), seen
    assert not [f for f in seen["folders"] if f.exists()]


def test_a_failure_after_the_dump_resumes_the_source_in_place(criu_lab: Lab, memhold: Path, tmp_path: Path) -> None:
    """The source is dumped and stopped, then the target's disk is full: the metadata and the files
    cannot land there. The source, which still holds all of its memory, is resumed where it is."""
    lab = criu_lab
    before = start(lab, memhold, 32)

    async def fill_target(step: str) -> None:
        if step == "transferring":
            lab.fault("node-2", "fill-disk")

    try:
        result = migrate(lab, tmp_path / "pp.db", fill_target)
    finally:
        lab.fault("node-2", "free-disk")
    assert result.state is MigrationState.ROLLED_BACK, result.reason
    assert_runs_once_with_its_state(lab, "node-1", before)


def test_a_page_server_dying_mid_transfer_resumes_the_source(criu_lab: Lab, memhold: Path, tmp_path: Path) -> None:
    """The target's page server stops reading while the dump streams pages to it (the dump blocks
    on a full socket) and is then killed: the dump fails and the source carries on as it was."""
    lab = criu_lab
    before = start(lab, memhold, 64)
    target = lab.node("node-2")
    killed: list[str] = []

    def kill_page_server_once_the_dump_streams() -> None:
        [pidfile] = target.docker_root.glob("peakpack-criu/*/page-server.pid")
        group = int(pidfile.read_text())
        os.killpg(group, signal.SIGSTOP)
        port = next(line.split()[1] for line in (lab.node("node-1").etc_criu / "runc.conf").read_text().splitlines()
                    if line.startswith("port "))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not lab.exec("node-2", ["ss", "-Htn", "state", "established",
                                                                      f"sport = :{port}"]).stdout.strip():
            time.sleep(0.05)
        killed.append(port)
        os.killpg(group, signal.SIGKILL)

    async def break_transfer(step: str) -> None:
        if step == "checkpointing":  # the page server listens from arming on
            threading.Thread(target=kill_page_server_once_the_dump_streams, daemon=True).start()

    result = migrate(lab, tmp_path / "pp.db", break_transfer)
    assert killed, "the page server was never reached"
    assert result.state is MigrationState.ROLLED_BACK, result.reason
    assert "checkpoint" in (result.reason or ""), result.reason
    assert_runs_once_with_its_state(lab, "node-1", before)


def test_a_target_that_dies_within_the_grace_period_hands_back_to_the_source(criu_lab: Lab, memhold: Path,
                                                                             tmp_path: Path) -> None:
    """The target was restored and ran, then died (as an application may on its closed
    connections): the source, kept dumped and stopped for the grace period, resumes in place."""
    lab = criu_lab
    before = start(lab, memhold, 32)

    async def kill_target(step: str) -> None:
        if step == "settling":  # verified running; the grace period starts
            docker(lab.node("node-2"), "kill", NAME)

    result = migrate(lab, tmp_path / "pp.db", kill_target, MigrationSettings(grace_seconds=30.0))
    assert result.state is MigrationState.ROLLED_BACK, result.reason
    assert_runs_once_with_its_state(lab, "node-1", before)


def test_the_source_stays_until_the_target_has_run_for_the_grace_period(criu_lab: Lab, memhold: Path,
                                                                        tmp_path: Path) -> None:
    """While the target runs within the grace period, the source is still there, dumped and
    stopped (Docker calls it running; its processes are stopped); afterwards it is gone."""
    lab = criu_lab
    before = start(lab, memhold, 16)
    seen: dict[str, object] = {}

    async def look(step: str) -> None:
        if step == "settling":
            src = docker(lab.node("node-1"), "inspect", "-f", "{{.State.Running}} {{.State.Pid}}", NAME).stdout.split()
            seen["source"] = src[0]
            seen["stopped"] = Path(f"/proc/{src[1]}/status").read_text().split("State:")[1].split()[0]
            seen["target"] = copies(lab).get("node-2")

    result = migrate(lab, tmp_path / "pp.db", look, MigrationSettings(grace_seconds=3.0))
    assert result.state is MigrationState.SUCCEEDED, result.reason
    assert seen == {"source": "true", "stopped": "T", "target": "running"}
    assert_runs_once_with_its_state(lab, "node-2", before)


def test_post_copy_moves_a_counter_and_all_of_its_memory(criu_lab: Lab, memhold: Path, tmp_path: Path) -> None:
    lab = criu_lab
    before = start(lab, memhold, 64)
    result = migrate(lab, tmp_path / "pp.db", settings=MigrationSettings(grace_seconds=1.0, post_copy=True))
    assert result.state is MigrationState.SUCCEEDED, result.reason
    assert_runs_once_with_its_state(lab, "node-2", before)
    journal = steps(tmp_path / "pp.db", result.migration_id)
    assert "post-copy" in journal["preflight"] and "every page arrived" in journal["verifying"]
    assert "page streams over cubic" in journal["preflight"]  # the lazy dump and the lazy-pages daemon took it


def test_a_post_copy_transfer_cut_never_leaves_two_live_copies(criu_lab: Lab, memhold: Path, tmp_path: Path) -> None:
    """The target runs from the pages it has when its page transfer is cut (its lazy-pages daemon
    killed): CRIU then switches the source back to alive by itself, but the source was frozen in a
    cgroup of its own once its dump was ready, so it does not run while the target does; settling
    removes the target (its memory has holes) and resumes the source with all of its memory."""
    lab = criu_lab
    before = start(lab, memhold, 64)
    seen: dict[str, object] = {}

    async def cut_the_transfer(step: str) -> None:
        if step == "verifying":  # restored on node-2; the source serves the rest of its pages
            subprocess.run(["pkill", "-KILL", "-f", f"criu lazy-pages .*{lab.node('node-2').docker_root}/"])
            time.sleep(1.5)  # the source's CRIU has lost its page transfer and resumed the source by now
            first = counter(lab, "node-1")
            time.sleep(1.0)
            seen["source moved"] = counter(lab, "node-1") != first
            seen["target"] = copies(lab).get("node-2")

    result = migrate(lab, tmp_path / "pp.db", cut_the_transfer, MigrationSettings(grace_seconds=1.0, post_copy=True))
    assert seen == {"source moved": False, "target": "running"}  # one live copy, never two
    assert result.state is MigrationState.ROLLED_BACK, result.reason
    assert_runs_once_with_its_state(lab, "node-1", before)


def test_post_copy_is_never_used_for_a_critical_container(criu_lab: Lab, memhold: Path, tmp_path: Path) -> None:
    lab = criu_lab
    before = start(lab, memhold, 16, "--label", f"{CRITICAL_LABEL}=true")
    result = migrate(lab, tmp_path / "pp.db", settings=MigrationSettings(grace_seconds=1.0, post_copy=True))
    assert result.state is MigrationState.SUCCEEDED, result.reason
    assert_runs_once_with_its_state(lab, "node-2", before)
    assert "post-copy is never used" in steps(tmp_path / "pp.db", result.migration_id)["preflight"]


def test_a_process_not_root_is_refused_in_one_line_where_root_lacks_cap_sys_resource(criu_lab: Lab,
                                                                                     tmp_path: Path) -> None:
    lab = criu_lab
    docker(lab.node("node-1"), "run", "-d", "--name", NAME, "--network", "none", "--user", "1000:1000", IMAGE,
           "sleep", "3600")
    cap_eff = lab.exec("node-1", ["awk", "/^CapEff/ {print $2}", "/proc/self/status"]).stdout.strip()
    result = migrate(lab, tmp_path / "pp.db")
    if int(cap_eff, 16) >> 24 & 1:  # root may read anyone's rlimits there: CRIU can dump it
        assert result.state is MigrationState.SUCCEEDED, result.reason
        return
    assert result.refused and result.state is MigrationState.FAILED
    assert result.reason is not None and "\n" not in result.reason
    assert result.reason.startswith(f"{NAME}: its process ") and "runs as uid 1000 gid 1000" in result.reason
    assert "node-1 lacks CAP_SYS_RESOURCE" in result.reason
    assert copies(lab) == {"node-1": "running"}  # nothing changed


def test_a_target_that_stops_answering_on_its_port_hands_back_to_the_source(criu_lab: Lab, tmp_path: Path) -> None:
    """The restored copy runs but its server is gone: it answered on its published port before the
    migration, so the source, kept for the grace period, is resumed and answers again."""
    lab = criu_lab
    docker(lab.node("node-1"), "run", "-d", "--name", NAME, "-p", "8090:80", IMAGE, "sh", "-c",
           "mkdir /www && echo hello > /www/index.html && httpd -p 80 -h /www && exec sleep 3600")

    def answer(node: str) -> str:
        return lab.exec(node, ["sh", "-c", "wget -qO- -T 3 http://127.0.0.1:8090/ || true"]).stdout.strip()

    assert answer("node-1") == "hello"

    async def kill_server(step: str) -> None:
        if step == "settling":  # verified running; the grace period starts
            docker(lab.node("node-2"), "exec", NAME, "killall", "httpd")

    result = migrate(lab, tmp_path / "pp.db", kill_server, MigrationSettings(grace_seconds=2.0))
    assert result.state is MigrationState.ROLLED_BACK, result.reason
    assert "does not answer" in (result.reason or "")
    assert copies(lab) == {"node-1": "running"} and answer("node-1") == "hello"
