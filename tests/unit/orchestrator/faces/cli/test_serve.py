"""`serve --epoch-seconds` is one epoch everywhere: the loop, the forecast, the migration weights,
the off horizon and the break-even rule all read the inventory's, so the flag replaces it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import peakpack.orchestrator.act.controller
from peakpack.orchestrator.decide.planner.problem import Weights
from peakpack.orchestrator.decide.planner.rules import Remembered, off_refusal
from peakpack.orchestrator.faces.cli.common import load_inventory
from peakpack.orchestrator.faces.cli.serve import serve
from tests.support.paths import REPO

DEMO = REPO / "inventory" / "demo.toml"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def served(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **flags: Any) -> tuple[Any, Any]:
    """(inventory, controller settings) that `serve --once --dry-run` hands its controller."""
    seen: list[tuple[Any, Any]] = []

    class Spy:
        def __init__(self, inventory: Any, store: Any, settings: Any, **_: Any) -> None:
            seen.append((inventory, settings))

        def run_once(self) -> None:
            pass

    monkeypatch.setattr(peakpack.orchestrator.act.controller, "Controller", Spy)
    serve(inventory=DEMO, snapshot=REPO / "inventory" / "demo-snapshot.json", dry_run=True, once=True,
          db=f"sqlite:///{tmp_path / 'pp.db'}", **flags)
    [got] = seen
    return got


def test_the_epoch_flag_replaces_the_inventorys_epoch_for_everything(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    file = load_inventory(DEMO)
    assert file.cluster.epoch_seconds == 600
    inv, settings = served(monkeypatch, tmp_path, epoch_seconds=60)
    assert settings.epoch_seconds == inv.cluster.epoch_seconds == 60
    assert replace(inv, cluster=replace(inv.cluster, epoch_seconds=600)) == file  # nothing else changed
    # what the planner derives from it follows: a migration costs 10x the watts over a 60 s epoch,
    # and the off horizon (1.5 epochs) is 90 s, shorter than a worker's break-even
    weights = Weights.from_settings(inv.planner, inv.cluster.epoch_seconds)
    assert weights.migration_cost(0) == pytest.approx(10 * Weights.from_settings(file.planner, 600).migration_cost(0))
    worker = next(n for n in inv.nodes if n.power_managed)
    assert off_refusal(worker, inv.planner, inv.cluster.epoch_seconds, Remembered(), NOW) is not None
    assert off_refusal(worker, file.planner, file.cluster.epoch_seconds, Remembered(), NOW) is None

    inv, settings = served(monkeypatch, tmp_path)
    assert inv == file and settings.epoch_seconds == 600
