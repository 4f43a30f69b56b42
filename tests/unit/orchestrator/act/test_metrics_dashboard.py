"""deploy/grafana/peakpack.json queries only metrics the controller exports, and shows every one."""

from __future__ import annotations

import json
import re

from peakpack.orchestrator.act.metrics import ControllerMetrics
from tests.support.paths import REPO

DASHBOARD = REPO / "deploy/grafana/peakpack.json"
#: The series names prometheus_client exposes per metric type.
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count"),
            "summary": ("_sum", "_count", "")}


def exported() -> dict[str, str]:
    """Series name -> its metric family's name, for every metric in orchestrator/metrics.py."""
    return {family.name + suffix: family.name
            for family in ControllerMetrics().registry.collect() for suffix in SUFFIXES[family.type]}


def queried() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs and all(p["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"])
    return {name for e in exprs for name in re.findall(r"\bpeakpack_[a-z_]+\b", e)}


def test_every_metric_the_dashboard_queries_exists() -> None:
    unknown = queried() - set(exported())
    assert not unknown, f"the dashboard queries metrics metrics.py does not export: {sorted(unknown)}"


def test_every_metric_family_has_a_panel() -> None:
    series = exported()
    shown = {series[name] for name in queried() if name in series}
    assert shown == set(series.values())
