"""While a migration runs, the QoS guards of both its nodes leave its container alone (no CPU cap,
no weight, no stop: qos/guard/). The marker is a file in each node's guard folder,
`holds/<container>`, holding `{"until": <epoch s>, "migration": <id>}`: a lease, so a controller
that dies mid-migration does not shield the container for longer than its `[migration]
lease_seconds`. Written before anything changes on either node and renewed with the migration's
node leases (a long pre-copy or a long IN_DOUBT must not let a guard stop a container in mid-dump),
removed once the migration is settled (an IN_DOUBT one keeps it until reconciliation settles it,
or it expires)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence

from peakpack.orchestrator.domain.errors import PeakpackError
from peakpack.orchestrator.remote import SshPool

#: the guard's folder on a node (qos/guard DEFAULT_STATE_DIR; the lab sets it per node)
QOS_DIR = '"${PEAKPACK_QOS_DIR:-/var/lib/peakpack/qos}"'
async def set_hold(ssh: SshPool, nodes: Sequence[str], container: str, migration_id: int, *, held: bool,
                   seconds: float = 900.0) -> None:
    """Write or renew (`held`, for `seconds`) or remove the hold on every node in `nodes`. A node
    that cannot be told is left as it is: the migration's own steps find out what is wrong with it,
    and a hold left behind expires."""
    marker = json.dumps({"until": round(time.time() + seconds), "migration": migration_id})
    if held:
        script = f'd={QOS_DIR}/holds; mkdir -p "$d" && printf "%s\\n" "$2" > "$d/$1.new" && mv -f "$d/$1.new" "$d/$1"'
    else:
        script = f'rm -f {QOS_DIR}/holds/"$1"'
    argv = ["sh", "-c", script, "sh", container, marker]
    results = await asyncio.gather(*(ssh.run(n, argv, timeout=30, check=False) for n in nodes),
                                   return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException) and not isinstance(r, PeakpackError):
            raise r
