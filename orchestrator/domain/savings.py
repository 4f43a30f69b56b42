"""The energy saved, as a ledger of measured figures (table savings), and the one rule that sums it.

Switching a node off saves what it would have drawn on and empty. For each node peakpack
switches off, an `off` row holds that draw, measured from the node's own counter over a short
probe right before it went off (`idle_w`, source rapl or dcmi), and the interval it stayed off:
from the end of the probe until it answered again after its wake (open while it is off). What
made that possible costs: a `migration` row is the measured energy the plan's migrations drew
above what their nodes drew before (brackets of counter reads), and a `boot` row the energy the
node drew from the probe until it answered again, measured when the same counter spans it (a
DCMI reading, or a RAPL counter that survived: the boot id did not change), else not measured,
with a model figure (boot_seconds x boot_power_w) that is shown apart and never summed with the
measured ones.

`ledger` sums rows into saved (idle power x time off, prorated over the period asked), spent
(measured costs) and net per counter source: a RAPL figure counts the CPU package, a DCMI one the
wall, so the two are never added up. Per day a saving accrues over the days it was off and a
cost counts on the day it started; per plan by the plan that switched the node off.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from .records import JsonRecord


class SavingKind(StrEnum):
    OFF = "off"  # a node switched off: idle_w x the time it stayed off is saved
    MIGRATION = "migration"  # the energy of the migrations of a plan that switched nodes off
    BOOT = "boot"  # what the node drew from its probe until it answered again after its wake


@dataclass(frozen=True)
class SavingRecord(JsonRecord):
    """One ledger row (see the module docstring). `source` names the counter every measured
    figure of the row comes from (None: nothing of it was measured); `energy_j` is a cost's
    measured energy, `model_j` a cost that could not be measured, as the model prices it."""

    kind: SavingKind
    node: str | None
    plan_id: int | None
    start: datetime
    end: datetime | None = None
    source: str | None = None
    idle_w: float | None = None
    energy_j: float | None = None
    model_j: float | None = None
    note: str | None = None
    id: int | None = None


@dataclass
class Totals:
    """Joules of one counter source: saved (gross), spent (measured costs), and the costs that
    were not measured, as the model prices them (never part of `net_j`)."""

    saved_j: float = 0.0
    spent_j: float = 0.0
    unmeasured: int = 0
    model_spent_j: float = 0.0

    @property
    def net_j(self) -> float:
        return self.saved_j - self.spent_j

    def to_json(self) -> dict[str, Any]:
        return {"saved_j": self.saved_j, "spent_j": self.spent_j, "net_j": self.net_j,
                "unmeasured_costs": self.unmeasured, "model_spent_j": self.model_spent_j}


@dataclass
class Ledger:
    """Totals per source, overall, per day (UTC date) and per plan (None: no plan known)."""

    total: dict[str, Totals] = field(default_factory=lambda: defaultdict(Totals))
    days: dict[str, dict[str, Totals]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(Totals)))
    plans: dict[int | None, dict[str, Totals]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(Totals)))
    nodes_off: int = 0  # off rows still open at `until`
    not_measured: list[str] = field(default_factory=list)  # off rows whose idle power is unknown

    def rows(self, by: str) -> list[dict[str, Any]]:
        """`by`: "total", "day" or "plan"; one JSON row per (period, source): the period is "all",
        a UTC date, or "plan N" ("no plan" for rows no plan is known of)."""
        tables: dict[str, Mapping[Any, Mapping[str, Totals]]] = {"total": {"all": self.total},
                                                                 "day": self.days, "plan": self.plans}
        groups = tables[by]

        def period(key: Any) -> str:
            return key if by != "plan" else "no plan" if key is None else f"plan {key}"

        return [{"period": period(key), "source": source, **t.to_json()}
                for key, per in sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)
                                       if by == "plan" else str(kv[0]))
                for source, t in sorted(per.items())]


def _days(start: datetime, end: datetime) -> Iterable[tuple[str, float]]:
    """(UTC date, seconds of [start, end) in it)."""
    t = start
    while t < end:
        midnight = datetime(t.year, t.month, t.day, tzinfo=t.tzinfo) + timedelta(days=1)
        stop = min(end, midnight)
        yield t.date().isoformat(), (stop - t).total_seconds()
        t = stop


def ledger(rows: Iterable[SavingRecord], until: datetime, since: datetime | None = None) -> Ledger:
    """Sum the ledger over [since, until] (see the module docstring); an open `off` row accrues
    until `until`."""
    out = Ledger()
    off_plan: dict[str, int | None] = {}
    for r in sorted(rows, key=lambda r: r.start):
        if r.kind is SavingKind.OFF:
            off_plan[r.node or ""] = r.plan_id
            if r.end is None:
                out.nodes_off += 1
            if r.idle_w is None or r.source is None:
                out.not_measured.append(f"{r.node}: idle power not measured ({r.note or 'no counter'})")
                continue
            lo, hi = max(r.start, since) if since else r.start, min(r.end or until, until)
            for day, seconds in _days(lo, hi):
                joules = r.idle_w * seconds
                for totals in (out.total, out.days[day], out.plans[r.plan_id]):
                    totals[r.source].saved_j += joules
            continue
        if (since is not None and r.start < since) or r.start > until:
            continue
        plan = r.plan_id if r.kind is SavingKind.MIGRATION else off_plan.get(r.node or "", r.plan_id)
        day = r.start.date().isoformat()
        source = r.source or "none"
        for totals in (out.total, out.days[day], out.plans[plan]):
            if r.energy_j is not None:
                totals[source].spent_j += r.energy_j
            else:
                totals[source].unmeasured += 1
                totals[source].model_spent_j += r.model_j or 0.0
    return out


def headline(book: Ledger, kilo: Callable[[float], str] = lambda j: f"{j / 1000:.1f} kJ") -> str:
    """One line for the web page and the report: per source, saved and net; the costs that were
    not measured are named apart with their model figure."""
    if not book.total and not book.not_measured:
        return "energy saved: nothing switched off yet"
    parts = [f"{kilo(t.saved_j)} saved, {kilo(t.net_j)} net of migrations and wakes ({s} counters)"
             for s, t in sorted(book.total.items()) if s != "none"]
    unmeasured = sum(t.unmeasured for t in book.total.values())
    if unmeasured:
        model = sum(t.model_spent_j for t in book.total.values())
        parts.append(f"{unmeasured} cost(s) not measured (model {kilo(model)}, not in the net)")
    if book.not_measured:
        parts.append(f"{len(book.not_measured)} node(s) off with their idle power not measured")
    if book.nodes_off:
        parts.append(f"{book.nodes_off} node(s) off now")
    return "energy saved: " + "; ".join(parts)
