"""Installing, updating and reading each node's QoS guard over SSH.

The guard is one file (`guard.pyz`, an archive of the `guard` package: `report.guard_archive`; the
standard library only) copied to the node's state folder
(`$PEAKPACK_QOS_DIR`, default /var/lib/peakpack/qos) with its settings (`guard.json`, from the
inventory's `[qos]` and the node's declared CPUs and memory), then started the way the node starts
services: a systemd unit `peakpack-guard.service` (restart always), or on a lab node, which has no
systemd, a script in its boot folder (`$PEAKPACK_BOOT_DIR`) that the lab runs at every power on,
and a detached process now. Three SSH commands per node; each file replaces the one there only once
its sha256 matches on the node (`COPY`); a running guard keeps its copy until the new one replaces
it, and the new one carries on from the quotas it finds.

What the guard reports, and what peakpack would install, is `report.py` (observation reads it).
"""

from __future__ import annotations

import base64

from peakpack.orchestrator.domain.guard import GuardSettings
from peakpack.orchestrator.domain.model import Inventory, NodeSpec
from peakpack.orchestrator.remote import SshPool
from peakpack.orchestrator.remote.shell import RemoteShell

from .report import ARCHIVE, STATE_DIR, guard_archive, guard_json, sha256

UNIT = "peakpack-guard.service"

#: replaces a file of the guard's folder atomically with stdin (base64: the archive is binary; $1:
#: its name), only once what arrived has the sha256 it was sent with ($2): a copy cut short (a
#: dropped connection ends the input as its end would) never replaces a whole file with a part
COPY = f"""d={STATE_DIR}; mkdir -p "$d/holds" || exit 1
base64 -d > "$d/$1.new" 2>/dev/null || [ -f "$d/$1.new" ] || exit 1
if ! printf '%s  %s\\n' "$2" "$d/$1.new" | sha256sum -c --status; then
  rm -f "$d/$1.new"
  echo "$1 arrived incomplete or changed on the way (its sha256 is not $2): not installed; the one before stays" >&2
  exit 1
fi
mv -f "$d/$1.new" "$d/$1"
"""

#: starts (or restarts) the guard as the node starts its services; prints one line saying how
START = f"""set -e
d={STATE_DIR}
rm -f "$d/guard.py"  # the single-file guard of before the archive (a running one is stopped below)
py=$(command -v python3) || {{ echo "python3 is missing; install it (the guard needs Python >= 3.9)" >&2; exit 1; }}
if [ -n "$PEAKPACK_BOOT_DIR" ]; then
  mkdir -p "$PEAKPACK_BOOT_DIR"
  b="$PEAKPACK_BOOT_DIR/50-peakpack-guard"
  printf '#!/bin/sh\\nexec %s %s/{ARCHIVE} start --state-dir %s\\n' "$py" "$d" "$d" > "$b.new"
  chmod 755 "$b.new"
  mv -f "$b.new" "$b"
  "$py" "$d/{ARCHIVE}" stop --state-dir "$d" >/dev/null
  "$py" "$d/{ARCHIVE}" start --state-dir "$d"
elif [ -d /run/systemd/system ]; then
  cat > /etc/systemd/system/{UNIT}.new <<UNIT
[Unit]
Description=peakpack QoS guard (best-effort CPU suppress, memory eviction)
After=docker.service
Wants=docker.service

[Service]
ExecStart=$py $d/{ARCHIVE} run --state-dir $d
Restart=always
RestartSec=2
OOMScoreAdjust=-900
Nice=-5

[Install]
WantedBy=multi-user.target
UNIT
  mv -f /etc/systemd/system/{UNIT}.new /etc/systemd/system/{UNIT}
  systemctl daemon-reload
  systemctl enable {UNIT} >/dev/null 2>&1
  systemctl restart {UNIT}
  echo "guard: systemd unit {UNIT} (re)started"
else
  echo "neither systemd nor a lab boot folder (PEAKPACK_BOOT_DIR): nothing would start the guard at boot" >&2
  exit 1
fi
"""


async def install(ssh: SshPool, spec: NodeSpec, settings: GuardSettings) -> str:
    """Copy the guard and its settings to the node and (re)start it; one line saying how."""
    node = spec.name
    for name, data in ((ARCHIVE, guard_archive()), ("guard.json", guard_json(spec, settings).encode())):
        await ssh.run(node, ["sh", "-c", COPY, "sh", name, sha256(data)], input=base64.b64encode(data).decode(),
                      timeout=60)
    started = await ssh.run(node, ["sh", "-c", START], timeout=120)
    return (started.stdout.strip().splitlines() or ["guard: started"])[-1]


class GuardInstaller:
    """`Services.install_guard`: install or update one node's guard now (one line saying how)."""

    def __init__(self, inventory: Inventory, shell: RemoteShell) -> None:
        self.inventory, self.shell = inventory, shell

    def __call__(self, node: str) -> str:
        result: str = self.shell.call(install(self.shell.pool, self.inventory.node(node), self.inventory.qos.guard))
        return result
