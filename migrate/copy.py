"""Node-to-node copies: folders with rsync, images with `docker save | docker load`. Data never
passes through the head node; the source node pushes to the target over SSH.

Node-to-node SSH uses the peer key the node offers in $PEAKPACK_PEER_IDENTITY /
$PEAKPACK_PEER_KNOWN_HOSTS (the lab sets them), else the node's own root SSH configuration; host
keys are always checked (StrictHostKeyChecking=yes), never learnt on first use.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Sequence
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
#: that moves nothing for a minute fails instead of hanging. "$3" is the copy's stop file: the
#: script leaves its pid (its process group: sshd makes every session its own) in "$3.pid" and
#: runs only if no stop was asked before or after writing it (`STOP_SCRIPT` asks first, then
#: reads the pid), so a copy is either stopped or never starts.
RSYNC_SCRIPT = ('[ -e "$3" ] && exit 1; echo $$ > "$3.pid"; [ -e "$3" ] && exit 1; '
                f'exec rsync -aHAX --numeric-ids --delete --modify-window=-1 --mkpath --inplace --stats --timeout=60 '
                f'-e "{PEER_SSH} $4" "$1" "$2"')
#: ssh options (RSYNC_SCRIPT's "$4") that keep the first connection of a migration open
#: (`rsync(..., control=PATH)`) for the ones after it: the copy while the container is frozen
#: then saves SSH's key exchange (~0.4 s)
SHARED_CONNECTION = "-o ControlMaster=auto -o ControlPath={path} -o ControlPersist=60"
#: Stops the copies whose stop files are given: asks (touch), signals each one's process group
#: (rsync and the ssh it pushes through) if it still runs rsync, waits up to STOP_WAIT_S for them
#: to end (then SIGKILL), and removes the files. Exits 1 if one still runs.
STOP_WAIT_S = 30
STOP_SCRIPT = f"""
for f in "$@"; do touch "$f"; done
alive() {{
  for f in "$@"; do p=$(cat "$f.pid" 2>/dev/null) && grep -qa rsync "/proc/$p/cmdline" 2>/dev/null && echo "$p"; done
}}
for p in $(alive "$@"); do kill -TERM -- "-$p" 2>/dev/null; done
i=0; while [ -n "$(alive "$@")" ] && [ $i -lt {STOP_WAIT_S * 10} ]; do sleep 0.1; i=$((i+1)); done
for p in $(alive "$@"); do kill -KILL -- "-$p" 2>/dev/null; done
sleep 0.2; [ -z "$(alive "$@")" ] || exit 1
for f in "$@"; do rm -f "$f" "$f.pid"; done
"""

#: The image goes straight from the source's engine into the target's; pipefail so a failed save
#: is not hidden by a load that read nothing.
IMAGE_SCRIPT = f'set -o pipefail; docker save "$1" | {PEER_SSH} "$2" docker load'

#: the longest one copy (a folder or an image) may take; `service install` sizes its stop timeout by it
COPY_TIMEOUT_S = 1800.0

_SENT = re.compile(r"^Total bytes sent:\s*([\d,.]+)", re.M)


@dataclass(frozen=True)
class Copied:
    bytes_sent: int


def login(spec: NodeSpec) -> str:
    return f"{spec.ssh.user}@{spec.address}" if spec.ssh else spec.address


def stop_file() -> str:
    """A fresh stop file for one copy (on the source node)."""
    return f"/tmp/peakpack-rsync-{uuid.uuid4().hex}"


async def rsync(ssh: SshPool, source: str, path: str, target: NodeSpec, dest: str, *,
                timeout: float = COPY_TIMEOUT_S, stop: str | None = None, control: str | None = None) -> Copied:
    """Make `dest` on the target the same folder as `path` on the source (trailing slashes: the
    contents). Repeating it copies only what changed, which is how pre-copy and delta work.
    `stop`: its stop file (`copy_all` gives one, to stop it when a sibling fails). `control`: a
    socket path on the source (per migration) through which copies share one SSH connection to
    the target."""
    shared = SHARED_CONNECTION.format(path=control) if control else ""
    res = await ssh.run(source, ["bash", "-c", RSYNC_SCRIPT, "rsync", path, f"{login(target)}:{dest}",
                                 stop or stop_file(), shared], timeout=timeout)
    m = _SENT.search(res.stdout)
    if m is None:
        raise NodeError(source, "rsync --stats printed no 'Total bytes sent' line")
    return Copied(int(m.group(1).replace(",", "").replace(".", "")))


async def copy_all(ssh: SshPool, source: str, pairs: Sequence[tuple[str, str]], target: NodeSpec, *,
                   control: str | None = None) -> int:
    """Every (source folder, target folder) pair at once; bytes sent. When one copy fails the
    others are stopped on the source, and waited for, before the failure is raised: settling may
    then remove the target's folders without a sibling writing into them (or recreating them)."""
    stops = [stop_file() for _ in pairs]
    copies = [asyncio.ensure_future(rsync(ssh, source, a, target, b, stop=s, control=control))
              for (a, b), s in zip(pairs, stops, strict=True)]
    try:
        done = await asyncio.gather(*copies)
    except GeneratorExit:
        raise  # closed unfinished, its loop gone (a caller abandoned it): nothing can be awaited now
    except BaseException:
        for c in copies:
            c.cancel()
        await asyncio.gather(*copies, return_exceptions=True)
        await ssh.run(source, ["bash", "-c", STOP_SCRIPT, "stop", *stops], timeout=STOP_WAIT_S + 30)
        raise
    await ssh.run(source, ["sh", "-c", 'for f in "$@"; do rm -f "$f" "$f.pid"; done', "sh", *stops], check=False)
    return sum(c.bytes_sent for c in done)


async def stream_image(ssh: SshPool, source: str, image: str, target: NodeSpec, *,
                       timeout: float = COPY_TIMEOUT_S) -> None:
    """Copy an image (by ID or name) from the source's engine straight into the target's."""
    await ssh.run(source, ["bash", "-c", IMAGE_SCRIPT, "image", image, login(target)], timeout=timeout)
