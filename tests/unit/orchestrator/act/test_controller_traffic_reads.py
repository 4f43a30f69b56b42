"""`serve` reads the conntrack tables between epochs (`Controller.read_traffic`): once
`[cluster] traffic_read_seconds` have passed since the last read or observation, never while an
epoch or an approved plan acts, never when the setting is 0, and a failed read is logged."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from peakpack.db.store import Store
from peakpack.orchestrator.act.controller import Controller, ControllerSettings
from peakpack.orchestrator.domain.config import demo_inventory, demo_snapshot
from peakpack.orchestrator.domain.ports import Observation, Services
from tests.unit.orchestrator.act.test_apply_handed_to_leader import RecordingOps


def controller(tmp_path: Path, every: int, sample: Callable[[], None]) -> tuple[Controller, io.StringIO, Store]:
    inv = demo_inventory()
    inv = replace(inv, cluster=replace(inv.cluster, traffic_read_seconds=every))
    store = Store.open(f"sqlite:///{tmp_path / 'pp.db'}")
    services = Services(observe=lambda: Observation(demo_snapshot(inv)), ops=RecordingOps(store), settle=lambda: [],  # type: ignore[arg-type]
                        adjust_plan=lambda plan, _s: plan, account_energy=lambda _s, _p: [], sample_traffic=sample)
    log = io.StringIO()
    settings = ControllerSettings(dry_run=False, time_limit_s=2, epoch_seconds=3600)
    return Controller(inv, store, settings, console=Console(file=log, width=300), services=services), log, store


def test_a_read_between_epochs_comes_when_due_and_never_while_acting(tmp_path: Path) -> None:
    reads: list[int] = []
    c, _, store = controller(tmp_path, 90, lambda: reads.append(1))
    try:
        c.read_traffic()
        assert reads == []  # just observed (the controller starts as if it had)
        c._traffic_at -= 91
        c.read_traffic()
        c.read_traffic()
        assert reads == [1]  # the read itself counts as the last one
        c._traffic_at -= 91
        acting = threading.Event()
        done = threading.Event()

        def epoch() -> None:
            with c._acting:
                acting.set()
                done.wait(5)

        t = threading.Thread(target=epoch)
        t.start()
        acting.wait(5)
        c.read_traffic()
        assert reads == [1]  # an epoch (or an approved plan) is acting: not now
        done.set()
        t.join()
        c.read_traffic()
        assert reads == [1, 1]
        c._observe()  # an observation reads the tables too: the next read waits again
        c.read_traffic()
        assert reads == [1, 1]
    finally:
        store.close()


def test_no_reads_when_the_setting_is_0_and_a_failed_read_is_logged(tmp_path: Path) -> None:
    reads: list[int] = []
    c, _, store = controller(tmp_path, 0, lambda: reads.append(1))
    c._traffic_at -= 10**6
    c.read_traffic()
    store.close()
    assert reads == []

    def fails() -> None:
        raise OSError("node-2: connection reset")

    c, log, store = controller(tmp_path, 1, fails)
    try:
        c._traffic_at -= 2
        c.read_traffic()
        assert "traffic read failed: OSError: node-2: connection reset" in log.getvalue()
        free: list[bool] = []  # the lock was let go: another thread can take it
        t = threading.Thread(target=lambda: free.append(c._acting.acquire(blocking=False) and not c._acting.release()))
        t.start()
        t.join()
        assert free == [True]
    finally:
        store.close()
