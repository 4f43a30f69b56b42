"""`peakpack reconcile`: settle, by hand, what the controller would settle at its next epoch:
unfinished or in-doubt migrations, power actions left ONGOING. Prints what it found and did, and the
migration leases on the nodes that nobody renews any more (with their age and owner).

Unlike `migrate` and `pin`, it is not refused what an unsettled migration holds: settling is what
it does there, by the same table as the controller (`faces.wiring.live_settling`), and nothing else
(no migration begun, no cpuset, no power switched, no plan run), so it is no back door around
the hold."""

from __future__ import annotations

import json
import sys

from .common import DbOpt, JsonOpt, RequiredInventory, interruptible, load_inventory, manual_lease, open_store, out


def reconcile(
    inventory: RequiredInventory,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Settle unfinished migrations and power actions from what the nodes show (never assumed).
    Ctrl-C or SIGTERM lets the migration being settled end, settles nothing more, and reports."""
    from peakpack.migrate.batch import stale_leases  # lazy: start-up speed (each command loads only what it uses)
    from peakpack.power.ipmi import power_probe

    from ...remote.shell import RemoteShell  # lazy: start-up speed (each command loads only what it uses)
    from ..wiring import live_settling  # lazy: start-up speed (each command loads only what it uses)

    inv = load_inventory(inventory)
    with (open_store(db) as store, manual_lease(store, "reconcile") as lease, interruptible(lease) as stop,
          RemoteShell(inv) as shell):
        found = [f"migration {m.id} ({m.container} {m.source} -> {m.target}): {m.state.value}"
                 for m in store.migrations.unfinished()]
        found += [f"power event {e.id} ({e.action} {e.node}): ONGOING" for e in store.power.events(state="ONGOING")]
        done = live_settling(inv, store, shell, stop_requested=stop)()
        probe = power_probe(inv)  # a node its BMC says is off holds no lease anyone could renew
        stale = shell.call(stale_leases(shell.pool, [n for n in inv.node_names if probe(n) is not False]))
    if json_out:
        sys.stdout.write(json.dumps({"found": found, "done": done, "stale": stale}) + "\n")
        stop.exit_if_asked()
        return
    out.print(f"found {len(found)} unfinished: " + ("nothing to do" if not found else ""), highlight=False)
    for line in found:
        out.print(f"  {line}", markup=False, highlight=False)
    for line in done:
        out.print(f"did: {line}", markup=False, highlight=False)
    for line in stale:
        out.print(line, markup=False, highlight=False)
    stop.exit_if_asked()
