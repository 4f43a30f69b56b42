"""Options and helpers shared by every `peakpack` sub-command module.

Every option is checked while the command line is parsed, before the command does anything: its
numbers by the `Bounds` of `domain/inputs.py` (`bounded`), its names by the name rules there
(`checked`), its paths by kind (an existing file, a folder, a file to write). What can only be
checked by reading it (an inventory, a snapshot, a store URL) is checked first thing by the
command, with the same one-line errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from ...domain import inputs

out = Console()
err = Console(stderr=True)


def field_of(param: typer.CallbackParam) -> str:
    """How the operator names a parameter: its flag (`--time-limit`) or its metavar (`PLAN_ID`)."""
    flags = [o for o in param.opts if o.startswith("--")]
    return flags[0] if flags else str(getattr(param, "metavar", None) or (param.name or "VALUE").upper())


def bounded(bounds: inputs.Bounds) -> Callable[[typer.CallbackParam, Any], Any]:
    """A typer callback holding a number to `bounds` (finite, in range; the one-line error names
    the flag)."""

    def check(param: typer.CallbackParam, value: Any) -> Any:
        return value if value is None else bounds.check(value, field_of(param))

    return check


def checked(rule: Callable[[Any, str], Any]) -> Callable[[typer.CallbackParam, Any], Any]:
    """A typer callback applying a rule of `inputs` (a container, node, user or host name, a
    folder, a file to write) to a parameter's value."""

    def check(param: typer.CallbackParam, value: Any) -> Any:
        return value if value is None else rule(value, field_of(param))

    return check


def since_duration(text: str) -> timedelta:
    """`--since`: a duration (inputs.parse_duration)."""
    return inputs.parse_duration(text, flag="--since")


DbOpt = Annotated[
    Optional[str],
    typer.Option(
        "--db",
        help="Store URL (sqlite:///FILE or postgresql://...); default: a SQLite file in the "
        "user's data dir, or $PEAKPACK_DB.",
        envvar="PEAKPACK_DB",
    ),
]
InventoryOpt = Annotated[
    Optional[Path],
    typer.Option("--inventory", "-i", exists=True, dir_okay=False,
                 help="Inventory TOML; default: the embedded demo cluster."),
]
RequiredInventory = Annotated[
    Path, typer.Option("--inventory", "-i", exists=True, dir_okay=False, help="Inventory TOML of the cluster.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
SinceOpt = Annotated[
    Optional[timedelta],
    typer.Option("--since", parser=since_duration, metavar="DURATION",
                 help="Only the last DURATION, e.g. 30m, 2h, 7d."),
]
TimeLimitOpt = Annotated[
    Optional[float],
    typer.Option("--time-limit", callback=bounded(inputs.SOLVER_SECONDS),
                 help="Wall-clock safety net of the solver, in seconds (its work limit decides where it "
                 "stops); default: the inventory's \\[planner].time_limit_s."),
]
ContainerArg = Annotated[str, typer.Argument(metavar="CONTAINER", callback=checked(inputs.container_name))]
NodeArg = Annotated[str, typer.Argument(metavar="NODE", callback=checked(inputs.node_name))]
PlanIdArg = Annotated[int, typer.Argument(metavar="PLAN_ID", callback=bounded(inputs.ID),
                                          help="A stored plan's id (`peakpack history plans`).")]


def load_inventory(path: str | Path) -> Any:
    """`config.load_inventory`, imported on use: pydantic and the inventory schema stay off the
    start-up of commands that never read an inventory (and of `--help`)."""
    from ...domain.config import load_inventory as load  # lazy: start-up speed (each command loads only what it uses)

    return load(path)


def demo_inventory() -> Any:
    """`config.demo_inventory`, imported on use (see `load_inventory`)."""
    from ...domain.config import demo_inventory as demo  # lazy: start-up speed (each command loads only what it uses)

    return demo()


def open_store(url: str | None) -> Any:
    """The store is imported lazily so commands that never touch it stay fast."""
    from peakpack.db.store import Store  # lazy: start-up speed (each command loads only what it uses)

    return Store.open(url)


def since_time(ago: timedelta | None) -> datetime | None:
    """`--since 2h` -> the UTC instant two hours ago (None: all history)."""
    return None if ago is None else datetime.now(UTC) - ago


def manual_lease(store: Any, role: str) -> Any:
    """The controller lease for a command that acts on nodes by hand (migrate, pin, reconcile):
    refused at once while a controller leads, renewed in the background however long it runs."""
    from ...act.leadership import MIN_TTL_S, Lease  # lazy: start-up speed (each command loads only what it uses)

    return Lease(store, MIN_TTL_S, role=role, log=lambda text: err.print(text, markup=False, highlight=False))


def refuse_unsettled(store: Any, field: str, *, container: str | None = None, node: str | None = None,
                     subject: str | None = None) -> None:
    """Refuse, in one line, a container or node that an unsettled migration holds (`decide.solve.
    held_by_unsettled`, the rule the planner holds them by); called under the lease, so no migration
    begins between the check and the act. `subject`: how the line names what is held (default: the
    container or node)."""
    from ...decide.solve import held_by_unsettled  # lazy: start-up speed (each command loads only what it uses)
    from ...domain.errors import PeakpackError

    why = held_by_unsettled(store.migrations.unfinished(), containers=[container] if container else [],
                            nodes=[node] if node else [])
    if why is not None:
        raise PeakpackError(f"{field}: {subject or container or node} is held: {why}; settle it first with "
                            "`peakpack reconcile --inventory FILE` (it waits until both its nodes answer), then retry")


class Interrupt:
    """What `interruptible` yields: whether the work should stop (a signal, or the lease lost)."""

    def __init__(self, lease: Any = None) -> None:
        self.lease = lease
        self.signals: list[int] = []

    def __call__(self) -> bool:
        return bool(self.signals) or (self.lease is not None and self.lease.lost.is_set())

    def exit_if_asked(self) -> None:
        """After the command reported what it did: exit 128 + the signal, as an interrupted
        command does."""
        if self.signals:
            import signal  # lazy: start-up speed (each command loads only what it uses)

            err.print(f"stopped ({signal.Signals(self.signals[0]).name})", markup=False, highlight=False)
            raise typer.Exit(128 + self.signals[0])


@contextmanager
def interruptible(lease: Any = None) -> Iterator[Interrupt]:
    """For the commands that act on nodes by hand: Ctrl-C and SIGTERM do not abort at once (which
    would leave a frozen container behind) but ask the work in flight to stop; the `Interrupt`
    this yields is also true once `lease` (when given; `apply` holds its own) is lost. The command
    settles what it started, reports it, then calls `exit_if_asked`."""
    import signal  # lazy: start-up speed (each command loads only what it uses)

    stop = Interrupt(lease)

    def ask(signum: int, _frame: Any) -> None:
        if not stop.signals:
            err.print(f"{signal.Signals(signum).name}: settling what is in flight, then stopping (starting nothing "
                      "new)", markup=False, highlight=False)
        stop.signals.append(signum)

    previous = {s: signal.signal(s, ask) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
