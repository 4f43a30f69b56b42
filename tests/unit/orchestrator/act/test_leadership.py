"""Leadership on SQLite and a real PostgreSQL server: the lease is renewed in the background
through a long epoch, a standby takes over within two ttl of a dead leader and fences it, a
controller reconciles before it acts, and two `serve` processes (one killed) hand over."""

from __future__ import annotations

import io
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from peakpack.db.store import Store
from peakpack.orchestrator.act.controller import Controller, ControllerSettings
from peakpack.orchestrator.act.leadership import MAX_TTL_S, MIN_TTL_S, Lease, lease_ttl
from peakpack.orchestrator.domain.config import demo_inventory, demo_snapshot
from peakpack.orchestrator.domain.errors import FencedError, StoreError
from peakpack.orchestrator.domain.ports import Observation, Services
from tests.support.fakes import fake_services
from tests.support.paths import REPO
from tests.support.postgres import drop_schema, server_pids

TTL = 1.0  # seconds: renewal every 1/3 s


@pytest.fixture()
def pg_url(postgres_url: str) -> Iterator[str]:
    """The module's PostgreSQL server, emptied after each test."""
    yield postgres_url
    with Store.open(postgres_url) as s:
        drop_schema(s)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store on each backend; several handles (controllers) open it."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'pp.db'}"
    return str(request.getfixturevalue("pg_url"))


def test_the_ttl_is_one_epoch_within_bounds() -> None:
    assert lease_ttl(5) == MIN_TTL_S and lease_ttl(12) == 12.0 and lease_ttl(3600) == MAX_TTL_S
    for epoch in range(7, 4000):  # expiry plus one standby poll (ttl/3): within two epochs
        assert 4 / 3 * lease_ttl(epoch) <= 2 * epoch, epoch


def test_acquire_fails_fast_naming_the_holder(url: str) -> None:
    with Store.open(url) as a, Store.open(url) as b:
        with Lease(a, 60, role="serve") as leader:
            first = leader.token
            assert first is not None and leader.owner.startswith("serve@")
            with pytest.raises(StoreError, match=rf"^--db: this store is locked by controller "
                                                 rf"{re.escape(leader.owner)} \(lease until [0-9: -]+ UTC\); "
                                                 r"stop it first or use another --db$"):
                Lease(b, 60, role="migrate").acquire()
        with Lease(b, 60, role="migrate") as manual:  # released on exit: free at once
            assert manual.token == first + 1


def test_renewal_keeps_the_lease_through_a_long_epoch(url: str) -> None:
    with Store.open(url) as a, Store.open(url) as b:
        leader = Lease(a, TTL)
        token = leader.acquire()
        standby = Lease(b, TTL)
        end = time.monotonic() + 4 * TTL  # an epoch four ttl long that never touches the lease
        while time.monotonic() < end:
            assert not standby.try_acquire()
            time.sleep(TTL / 4)
        assert not leader.lost.is_set()
        a.pinning.record("node-1", "web-1", "0-1")  # its writes still land
        leader.release()
        assert standby.try_acquire() and standby.token == token + 1
        standby.release()


def test_a_standby_takes_over_within_two_ttl_and_fences_the_dead_leader(url: str) -> None:
    logs: list[str] = []
    with Store.open(url) as a, Store.open(url) as b:
        leader = Lease(a, TTL)
        token = leader.acquire()
        standby = Lease(b, TTL, log=logs.append)
        stop = threading.Event()
        took: list[float] = []
        waiting = threading.Thread(target=lambda: standby.wait(stop) and took.append(time.monotonic()))
        waiting.start()
        try:
            time.sleep(1.5 * TTL)
            assert not took  # the leader renews: the standby waits
            leader._halt.set()  # the leader hangs (or its host died): no renewal, no release
            died = time.monotonic()
            waiting.join(5 * TTL)
        finally:
            stop.set()
            waiting.join()
        assert took and took[0] - died <= 2 * TTL
        assert standby.token == token + 1
        assert any(line.startswith(f"standby: {leader.owner} leads until ") for line in logs), logs
        assert f"standby: took over from {leader.owner} (lease token {token + 1})" in logs
        with pytest.raises(FencedError, match=rf"controller {re.escape(standby.owner)} took over "
                                              rf"\(lease token {token + 1} > {token}\); this one stops"):
            a.pinning.record("node-1", "web-1", "0-1")
        b.pinning.record("node-1", "web-1", "2-3")
        assert [p["cpuset"] for p in a.pinning.history()] == ["2-3"]
        standby.release()


def test_a_leader_learns_at_its_next_renewal_that_another_took_over(url: str) -> None:
    with Store.open(url) as a, Store.open(url) as b:
        leader = Lease(a, TTL)
        token = leader.acquire()
        taken = b.lease.acquire("serve@elsewhere:1:x:y", 60, replacing=leader.owner)  # e.g. a partition
        assert taken == token + 1
        assert leader.lost.wait(2 * TTL)
        assert leader.lost_reason == f"controller serve@elsewhere:1:x:y took over (lease token {taken} > {token})"
        with pytest.raises(FencedError, match="lease lost"):
            leader.check()
        leader.release()  # frees nothing that is not its own
        assert b.lease.holder().holder == "serve@elsewhere:1:x:y"


LEADER = """
import sys, time
from peakpack.db.store import Store
from peakpack.orchestrator.act.leadership import Lease
lease = Lease(Store.open(sys.argv[1]), 60.0)
print(lease.acquire(), flush=True)
time.sleep(600)
"""


def test_a_killed_leader_on_this_host_is_replaced_without_waiting(url: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", LEADER, url], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        token = int(proc.stdout.readline())  # type: ignore[union-attr]
        with Store.open(url) as b:
            successor = Lease(b, 60.0)
            assert not successor.try_acquire()
            proc.kill()
            assert not successor.try_acquire()  # not reaped yet: a zombie counts as alive
            proc.wait(30)
            assert successor.try_acquire()  # its pid is gone: no need to wait out its 60 s
            assert successor.token == token + 1
            successor.release()
    finally:
        proc.kill()
        proc.wait()


def test_a_standby_controller_reconciles_before_it_acts_and_fences_the_old_one(tmp_path: Path) -> None:
    inv = demo_inventory()
    snap = demo_snapshot(inv)
    url = f"sqlite:///{tmp_path / 'pp.db'}"
    settings = ControllerSettings(dry_run=False, time_limit_s=2, epoch_seconds=3600, lease_ttl_s=TTL)
    events: list[str] = []
    with Store.open(url) as a_store, Store.open(url) as b_store:
        def services(store: Store, record: bool) -> Services:
            def observe() -> Observation:
                if record:
                    events.append("observe")
                return Observation(snap)

            def reconcile() -> list[str]:
                if record:
                    events.append("reconcile")
                return ["action 7 (power_on): finished from what the nodes show"]

            return replace(fake_services(store, snap), observe=observe, settle=reconcile)

        log = io.StringIO()
        old = Controller(inv, a_store, settings, console=Console(file=io.StringIO()), services=services(a_store, False))
        old.start()
        new = Controller(inv, b_store, settings, console=Console(file=log, width=300), services=services(b_store, True))
        seen: dict[str, object] = {}

        def scenario() -> None:
            try:
                time.sleep(1.5 * TTL)
                seen["standing by"] = list(events)
                old.lease._halt.set()  # the old leader hangs in a long action: it renews no more
                deadline = time.monotonic() + 60
                while not b_store.plans.history() and time.monotonic() < deadline:
                    time.sleep(0.1)
            finally:
                new.stop()

        helper = threading.Thread(target=scenario)
        helper.start()
        new.run_forever()
        helper.join()
        assert seen["standing by"] == []  # nothing observed, reconciled or planned while standing by
        assert events[:2] == ["reconcile", "observe"]
        text = log.getvalue()
        assert "standby: took over from" in text and "reconcile: action 7" in text and "stopped" in text
        with pytest.raises(FencedError, match="took over"):
            old.run_epoch()  # it wakes up: its first write is refused
        assert len(b_store.plans.history()) == 1
        old.finish()


def test_a_leader_that_lost_the_lease_stands_by_and_leads_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pp.db'}"
    settings = ControllerSettings(dry_run=True, demo=True, time_limit_s=1, epoch_seconds=3600, lease_ttl_s=TTL)
    log = io.StringIO()
    with Store.open(url) as store, Store.open(url) as other:
        controller = Controller(demo_inventory(), store, settings, console=Console(file=log, width=300))

        def scenario() -> None:
            try:
                assert wait_for(lambda: store.plans.history(), 60)
                other.lease.acquire("serve@elsewhere:1:x:y", 2 * TTL, replacing=controller.owner)  # a usurper
                assert wait_for(lambda: "standby: took over from serve@elsewhere" in log.getvalue(), 20 * TTL)
                assert wait_for(lambda: len(store.plans.history()) == 2, 60)
            finally:
                controller.stop()

        helper = threading.Thread(target=scenario)
        helper.start()
        controller.run_forever()
        helper.join()
    lines = log.getvalue().splitlines()
    expected = ["leading demo", "lease lost: controller serve@elsewhere:1:x:y took over (lease token 2 > 1)",
                "lease lost: waiting for the action in flight", "standing by again",
                "standby: serve@elsewhere:1:x:y leads until", "standby: took over from serve@elsewhere:1:x:y",
                "leading demo", "epoch: plan 2", "stopped"]
    at = 0
    for e in expected:  # in this order
        at = next((i for i in range(at, len(lines)) if lines[i].startswith(e)), -1) + 1
        assert at, (e, lines)


def serve(url: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    args = ["serve", "--inventory", str(REPO / "inventory" / "demo.toml"),
            "--snapshot", str(REPO / "inventory" / "demo-snapshot.json"), "--dry-run", "--time-limit", "1", *extra]
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "peakpack", *args], cwd=REPO, stderr=out,
                                stdout=subprocess.DEVNULL, env={**os.environ, "PEAKPACK_DB": url, "COLUMNS": "300"})


def wait_for(check: Callable[[], object], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def test_two_serves_on_postgresql_hand_over_when_the_leader_is_killed(pg_url: str, tmp_path: Path) -> None:
    """Epochs of 4 s, lease of 2 s: the standby must store a plan within two epochs of the kill."""
    epoch = 4.0
    with Store.open(pg_url) as store:
        first_log, second_log = tmp_path / "leader.log", tmp_path / "standby.log"
        leader = serve(pg_url, first_log, "--epoch-seconds", str(int(epoch)), "--lease-ttl", "2")
        standby: subprocess.Popen[bytes] | None = None
        try:
            assert wait_for(lambda: store.plans.history(), 60), first_log.read_text()
            standby = serve(pg_url, second_log, "--epoch-seconds", str(int(epoch)), "--lease-ttl", "2")
            assert wait_for(lambda: "standby: serve@" in second_log.read_text(), 60), second_log.read_text()
            time.sleep(epoch)
            assert "epoch:" not in second_log.read_text()  # one controller acts at a time
            leader.kill()  # left unreaped, so to the standby it looks alive: the lease must expire
            killed = time.monotonic()
            time.sleep(0.3)
            before = len(store.plans.history())
            assert wait_for(lambda: len(store.plans.history()) > before, 4 * epoch), second_log.read_text()
            assert time.monotonic() - killed <= 2 * epoch
            text = second_log.read_text()
            assert "standby: took over from serve@" in text and "epoch: plan" in text
            assert store.lease.holder() is not None and store.lease.holder().holder in text
            standby.send_signal(signal.SIGTERM)
            assert standby.wait(60) == 0 and "stopped" in second_log.read_text()
            assert store.lease.holder() is None  # released on a clean stop
        finally:
            for proc in (leader, standby):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                if proc is not None:
                    proc.wait()


def test_racing_serve_once_on_sqlite_gives_one_line_not_a_traceback(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pp.db'}"
    Store.open(url).close()  # the schema exists before the race
    logs = [tmp_path / f"serve-{i}.log" for i in range(3)]
    procs = [serve(url, log, "--once") for log in logs]
    codes = [p.wait(120) for p in procs]
    texts = [log.read_text() for log in logs]
    assert 0 in codes and set(codes) <= {0, 2}, texts
    for code, text in zip(codes, texts):
        assert "Traceback" not in text
        if code == 2:
            assert text.count("\n") == 1 and "error: --db: this store is locked by controller serve@" in text


def test_manual_migrate_and_pin_take_the_lease_and_give_it_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pp.db'}"
    inventory = str(REPO / "inventory" / "demo.toml")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "peakpack", *args, "-i", inventory, "--db", url],
                              capture_output=True, text=True, cwd=REPO, timeout=120)

    with Store.open(url) as store:
        token = store.lease.acquire("serve@head:1:x:y", 60)
        assert token is not None
        for args in (["pin", "node-1"], ["migrate", "web-1", "--to", "node-2"]):
            refused = run(*args)
            assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
            assert refused.stderr.startswith("error: --db: this store is locked by controller serve@head:1:x:y (")
        store.lease.release("serve@head:1:x:y", token)
        failed = run("pin", "node-1")  # takes the lease, then fails on the (absent) node
        assert failed.returncode == 2 and "locked" not in failed.stderr
        assert store.lease.holder() is None and store.lease.acquire("next", 60) == token + 2  # pin held token + 1


def test_a_postgresql_lease_is_lost_within_its_ttl_when_the_database_stops_answering(pg_url: str) -> None:
    """The server hangs (SIGSTOP: no answer, no error, not even its own timeouts): the leader must
    count its lease lost by the clock, within one ttl of its last renewal, and stop acting; a
    renewal stuck on the socket must not keep it leading (it used to: forever)."""
    ttl = 2.0
    with Store.open(pg_url) as store:
        lease = Lease(store, ttl)
        lease.acquire()
        time.sleep(ttl / 2)  # renewing
        pids = server_pids(pg_url)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            assert lease.lost.wait(2 * ttl)
            assert time.monotonic() - stopped <= ttl * 1.1, time.monotonic() - stopped
            with pytest.raises(FencedError, match="lease lost: not renewed for 2 s"):
                lease.check()
            released = time.monotonic()
            lease.release()  # bounded too: the database still does not answer
            assert time.monotonic() - released <= 1.2 * ttl
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)


def test_a_sqlite_lease_is_lost_within_its_ttl_while_another_writer_holds_the_lock(tmp_path: Path) -> None:
    """Another writer holds the database's lock (a long transaction, a stalled disk): the renewal
    waits; the lease is lost within one ttl, not after SQLite's 10 s busy timeout."""
    ttl = 2.0
    url = f"sqlite:///{tmp_path / 'pp.db'}"
    with Store.open(url) as store:
        lease = Lease(store, ttl)
        lease.acquire()
        time.sleep(ttl / 2)
        blocker = sqlite3.connect(tmp_path / "pp.db", timeout=0, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # the write lock, held
        locked = time.monotonic()
        try:
            assert lease.lost.wait(2 * ttl)
            assert time.monotonic() - locked <= ttl * 1.1, time.monotonic() - locked
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        lease.release()
