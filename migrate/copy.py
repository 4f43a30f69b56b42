"""Node-to-node copies: folders with rsync, images with `docker save | docker load`. Data never
passes through the head node; the source node pushes to the target over SSH.

Node-to-node SSH uses the peer key the node offers in $PEAKPACK_PEER_IDENTITY /
$PEAKPACK_PEER_KNOWN_HOSTS (the lab sets them), else the node's own root SSH configuration; host
keys are always checked (StrictHostKeyChecking=yes), never learnt on first use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from peakpack.orchestrator.domain.errors import NodeError
from peakpack.orchestrator.domain.model import NodeSpec
from peakpack.orchestrator.remote import SshPool

#: a peer that stops answering ends the copy within seconds (ServerAlive) instead of TCP's minutes
PEER_SSH = ('ssh ${PEAKPACK_PEER_IDENTITY:+-i $PEAKPACK_PEER_IDENTITY} '
            '${PEAKPACK_PEER_KNOWN_HOSTS:+-o UserKnownHostsFile=$PEAKPACK_PEER_KNOWN_HOSTS} '
            '-o StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=10 '
            '-o ServerAliveInterval=5 -o ServerAliveCountMax=3')

#: -aHAX: owners, modes, hard links, ACLs and xattrs (overlay2 marks opaque folders with a
#: trusted.* xattr and deleted files with 0:0 character devices, so -D via -a matters too);
#: --numeric-ids: uids as they are, the nodes' user names may differ; --modify-window=-1: compare
#: nanoseconds, so a file rewritten within the same second as the pre-copy still counts as changed;
#: --delete: files removed since the pre-copy are removed on the target too; --timeout=60: a copy
#: that moves nothing for a minute fails instead of hanging.
RSYNC_SCRIPT = (f'exec rsync -aHAX --numeric-ids --delete --modify-window=-1 --mkpath --inplace --stats --timeout=60 '
                f'-e "{PEER_SSH} $3" "$1" "$2"')
#: ssh options that keep the first connection of a migration open (`rsync(..., control=PATH)`) for
#: the ones after it: the copy while the container is frozen then saves SSH's key exchange (~0.4 s)
SHARED_CONNECTION = "-o ControlMaster=auto -o ControlPath={path} -o ControlPersist=60"

#: The image goes straight from the source's engine into the target's; pipefail so a failed save
#: is not hidden by a load that read nothing.
IMAGE_SCRIPT = f'set -o pipefail; docker save "$1" | {PEER_SSH} "$2" docker load'

_SENT = re.compile(r"^Total bytes sent:\s*([\d,.]+)", re.M)


@dataclass(frozen=True)
class Copied:
    bytes_sent: int


def login(spec: NodeSpec) -> str:
    return f"{spec.ssh.user}@{spec.address}" if spec.ssh else spec.address


async def rsync(ssh: SshPool, source: str, path: str, target: NodeSpec, dest: str, *,
                timeout: float = 1800.0, control: str | None = None) -> Copied:
    """Make `dest` on the target the same folder as `path` on the source (trailing slashes: the
    contents). Repeating it copies only what changed, which is how pre-copy and delta work.
    `control`: a socket path on the source (per migration) through which copies share one SSH
    connection to the target."""
    shared = SHARED_CONNECTION.format(path=control) if control else ""
    res = await ssh.run(source, ["bash", "-c", RSYNC_SCRIPT, "rsync", path, f"{login(target)}:{dest}", shared],
                        timeout=timeout)
    m = _SENT.search(res.stdout)
    if m is None:
        raise NodeError(source, "rsync --stats printed no 'Total bytes sent' line")
    return Copied(int(m.group(1).replace(",", "").replace(".", "")))


async def stream_image(ssh: SshPool, source: str, image: str, target: NodeSpec, *, timeout: float = 1800.0) -> None:
    """Copy an image (by ID or name) from the source's engine straight into the target's."""
    await ssh.run(source, ["bash", "-c", IMAGE_SCRIPT, "image", image, login(target)], timeout=timeout)
