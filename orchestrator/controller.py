"""The epoch loop: observe -> plan -> journal -> (execute) -> record, driven by APScheduler.

The controller owns no logic of its own: it wires the observer (or a snapshot file), the pure
planner, the store and, outside dry runs, the executors.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from rich.console import Console

from .config import demo_snapshot, load_snapshot
from .model import ClusterSnapshot, Inventory
from .plan import Plan
from .planning import make_plan


@dataclass(frozen=True)
class ControllerSettings:
    dry_run: bool = True
    policy: str = "peakpack"
    time_limit_s: float = 10.0
    epoch_seconds: int = 600
    snapshot_path: Path | None = None
    demo: bool = False


class Controller:
    def __init__(
        self,
        inventory: Inventory,
        store: Any,
        settings: ControllerSettings,
        console: Console | None = None,
    ) -> None:
        self.inventory = inventory
        self.store = store
        self.settings = settings
        self.console = console or Console(stderr=True)
        self._stop = threading.Event()

    def observe(self) -> ClusterSnapshot:
        """The snapshot file is re-read every epoch, so an operator can update it in place."""
        if self.settings.snapshot_path is not None:
            return load_snapshot(self.settings.snapshot_path, self.inventory)
        if self.settings.demo:
            return demo_snapshot(self.inventory)
        from .observe import observe_cluster

        return observe_cluster(self.inventory)

    def run_epoch(self) -> Plan:
        snapshot = self.observe()
        plan = make_plan(
            self.inventory,
            snapshot,
            policy=self.settings.policy,
            time_limit_s=self.settings.time_limit_s,
            dry_run=self.settings.dry_run,
        )
        plan_id = self.store.save_plan(plan, inventory=self.inventory.cluster.name, snapshot=snapshot)
        plan = replace(plan, plan_id=plan_id)
        self.console.print(
            f"epoch: plan {plan_id} with {len(plan.actions)} action(s), "
            f"{plan.before.power_w:.0f} W -> {plan.after.power_w:.0f} W"
            + (" (dry run)" if plan.dry_run else "")
        )
        return plan

    def _epoch_job(self) -> None:
        try:
            self.run_epoch()
        except Exception as exc:  # one bad epoch must not kill the service
            self.console.print(f"epoch failed: {exc}", markup=False)

    def stop(self, *_: object) -> None:
        self._stop.set()

    def run_forever(self) -> None:
        """Epochs until SIGTERM/SIGINT; the epoch in flight is allowed to finish."""
        scheduler = BackgroundScheduler()
        scheduler.add_job(
            self._epoch_job,
            "interval",
            seconds=self.settings.epoch_seconds,
            max_instances=1,
            coalesce=True,
            next_run_time=_now(),
        )
        previous = {s: signal.signal(s, self.stop) for s in (signal.SIGTERM, signal.SIGINT)}
        scheduler.start()
        self.console.print(
            f"serving {self.inventory.cluster.name}: one epoch every {self.settings.epoch_seconds}s"
        )
        try:
            self._stop.wait()
        finally:
            self.console.print("stopping: waiting for the epoch in flight")
            scheduler.shutdown(wait=True)
            for s, handler in previous.items():
                signal.signal(s, handler)
            self.console.print("stopped")


def _now() -> Any:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)
