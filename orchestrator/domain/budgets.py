"""Disruption budgets and maintenance windows: how much a plan may disturb, and when.

Inventory keys (validated in `config.py`, documented in inventory/example.toml):

    [budgets]
    migrations_per_epoch = 4     # migrations one plan may hold
    migrations_per_hour = 12     # over the last hour, this plan included
    migrations_per_node = 1      # at a time, touching one node (an executor limit)
    power_offs_per_hour = 2      # nodes switched off over the last hour, this plan included

    [[windows]]                  # quiet hours; any number of them
    days = "mon-fri"             # mon..sun, ranges and lists ("mon-fri", "sat,sun"), or "daily"
    start = "08:00"              # HH:MM, local time of `timezone`
    end = "18:00"                # exclusive; an end before the start runs past midnight
    what = "no-migrations"       # or "no-power-offs"
    timezone = "Europe/Berlin"   # IANA name; default UTC

In a `no-migrations` window a plan only fixes cap violations (moves containers off nodes over
the cap) and wakes nodes; it neither consolidates nor switches nodes off. In a `no-power-offs`
window it may migrate but switches nothing off. The planner is told the result as an
`Allowance` (problem data), so it plans within the limits instead of having a plan cut short.
Pure: the caller reads the clock and the last hour's counts from the store.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from enum import Enum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: the period of the hourly budgets
HOUR = timedelta(hours=1)


class WindowRule(str, Enum):
    NO_MIGRATIONS = "no-migrations"
    NO_POWER_OFFS = "no-power-offs"


@dataclass(frozen=True)
class Budgets:
    """Limits on disruption; None means no limit."""

    migrations_per_epoch: int | None = None
    migrations_per_hour: int | None = None
    migrations_per_node: int = 1
    power_offs_per_hour: int | None = None


@dataclass(frozen=True)
class Window:
    """Recurring quiet hours: on `days` (0 = Monday) from `start` to `end` in `timezone`."""

    days: frozenset[int]
    start: time
    end: time
    what: WindowRule
    timezone: str = "UTC"

    def active(self, at: datetime) -> bool:
        """Whether `at` (timezone-aware) falls inside the window. A window that runs past
        midnight belongs to the day it starts on."""
        local = at.astimezone(ZoneInfo(self.timezone))
        now, day = local.time(), local.weekday()
        if self.start < self.end:
            return day in self.days and self.start <= now < self.end
        return (day in self.days and now >= self.start) or (
            (day - 1) % 7 in self.days and now < self.end
        )

    def describe(self) -> str:
        days = ",".join(DAYS[d] for d in sorted(self.days))
        return (
            f"window {days} {self.start:%H:%M}-{self.end:%H:%M} {self.timezone}: {self.what.value}"
        )


def parse_days(text: str) -> frozenset[int]:
    """"mon-fri", "sat,sun", "mon,wed-fri" or "daily" -> weekday numbers (ValueError if not)."""
    spec = text.strip().lower()
    if spec == "daily":
        return frozenset(range(7))
    days: set[int] = set()
    for part in spec.split(","):
        ends = [p.strip() for p in part.split("-")]
        if len(ends) > 2 or any(e not in DAYS for e in ends):
            raise ValueError(
                f"{text!r} is not a day list; write e.g. \"mon-fri\", \"sat,sun\" or \"daily\""
            )
        first, last = DAYS.index(ends[0]), DAYS.index(ends[-1])
        days.update(d % 7 for d in range(first, first + (last - first) % 7 + 1))
    return frozenset(days)


def parse_clock(text: str) -> time:
    """"HH:MM" (24 h) -> time (ValueError if not)."""
    try:
        hours, minutes = text.split(":")
        if len(hours) != 2 or len(minutes) != 2:
            raise ValueError
        return time(int(hours), int(minutes))
    except ValueError:
        raise ValueError(f"{text!r} is not a time of day; write HH:MM, e.g. \"08:00\"") from None


def check_timezone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{name!r} is not a known time zone; write an IANA name, e.g. \"Europe/Berlin\""
        ) from None
    return name


@dataclass(frozen=True)
class Allowance:
    """What this epoch's plan may do. None: no limit. `consolidate` False: only cap fixes and
    wakes. Each `*_why` names the budget or window that set the limit, for explanations."""

    migrations: int | None = None
    power_offs: int | None = None
    consolidate: bool = True
    migrations_why: str = ""
    power_offs_why: str = ""
    consolidate_why: str = ""


def allowance(
    budgets: Budgets,
    windows: tuple[Window, ...],
    at: datetime,
    migrations_last_hour: int = 0,
    power_offs_last_hour: int = 0,
) -> Allowance:
    """The limits in force at `at`, given what the last hour already used."""
    migrations: int | None = None
    migrations_why = ""
    for limit, why in (
        (
            budgets.migrations_per_epoch,
            f"budget: {budgets.migrations_per_epoch} migrations per epoch",
        ),
        (
            None if budgets.migrations_per_hour is None
            else max(budgets.migrations_per_hour - migrations_last_hour, 0),
            f"budget: {budgets.migrations_per_hour} migrations per hour, "
            f"{migrations_last_hour} used in the last hour",
        ),
    ):
        if limit is not None and (migrations is None or limit < migrations):
            migrations, migrations_why = limit, why
    power_offs: int | None = None
    power_offs_why = ""
    if budgets.power_offs_per_hour is not None:
        power_offs = max(budgets.power_offs_per_hour - power_offs_last_hour, 0)
        power_offs_why = (
            f"budget: {budgets.power_offs_per_hour} power-offs per hour, "
            f"{power_offs_last_hour} used in the last hour"
        )
    consolidate, consolidate_why = True, ""
    for w in windows:
        if not w.active(at):
            continue
        if w.what is WindowRule.NO_MIGRATIONS:
            consolidate, consolidate_why = False, w.describe()
        power_offs, power_offs_why = 0, w.describe()
    return Allowance(
        migrations, power_offs, consolidate, migrations_why, power_offs_why, consolidate_why
    )


def allowance_at(
    budgets: Budgets,
    windows: tuple[Window, ...],
    at: datetime,
    disruption_since: Callable[[datetime], tuple[int, int]],
) -> Allowance:
    """`allowance` with the last hour's migrations and power-offs read through
    `disruption_since` (the store's `Store.disruption_since`)."""
    return allowance(budgets, windows, at, *disruption_since(at - HOUR))


def exceeds(allow: Allowance, migrations_from: Sequence[str], power_offs: int, over_cap: Collection[str]) -> str | None:
    """Why a plan made earlier may not run under the limits in force now (None: it may):
    `peakpack apply` asks this, since a plan waits for review while budgets fill and windows
    open. `migrations_from`: each migration's source node; `over_cap`: nodes over the cap now
    (moves off them are cap fixes, which a window allows)."""
    if not allow.consolidate and (power_offs or any(n not in over_cap for n in migrations_from)):
        return f"{allow.consolidate_why}: only cap fixes now"
    if allow.migrations is not None and len(migrations_from) > allow.migrations:
        return f"it migrates {len(migrations_from)} containers, {allow.migrations} allowed now ({allow.migrations_why})"
    if allow.power_offs is not None and power_offs > allow.power_offs:
        return f"it switches {power_offs} nodes off, {allow.power_offs} allowed now ({allow.power_offs_why})"
    return None
