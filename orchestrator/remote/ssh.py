"""SSH to the nodes (the only module that imports asyncssh).

One connection per node, reused by every command (asyncssh multiplexes sessions). Host keys are
always verified against the inventory's pinned known_hosts: a changed key is a HostKeyError,
never a prompt or a silent accept. Commands are argv lists joined with shlex.join. Connecting is
retried a bounded number of times; a command is never run twice: once it may have started, a
lost connection or a timeout is `OutcomeUnknown`, and callers check the facts before acting.

`shell.RemoteShell` is the synchronous facade over this pool and the Engine API pool.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import asyncssh

from ..domain.errors import HostKeyError, NodeError, OutcomeUnknown
from ..domain.model import Inventory
from ..domain.settings import KEEPALIVES_MISSED
from .login import pinned_login

T = TypeVar("T")


@dataclass(frozen=True)
class CommandResult:
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


class SshPool:
    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.remote = inventory.remote  # connect timeout, attempts and keepalives: [remote]
        self._conns: dict[str, asyncssh.SSHClientConnection] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def _connect(self, node: str) -> asyncssh.SSHClientConnection:
        spec, ssh = pinned_login(self.inventory, node)
        last: Exception | None = None
        for attempt in range(self.remote.connect_attempts):
            try:
                return await asyncio.wait_for(
                    asyncssh.connect(
                        spec.address, port=ssh.port, username=ssh.user,
                        client_keys=[str(ssh.identity_file)] if ssh.identity_file else None,
                        known_hosts=str(ssh.known_hosts), agent_path=None,
                        keepalive_interval=self.remote.keepalive_seconds, keepalive_count_max=KEEPALIVES_MISSED,
                    ),
                    self.remote.connect_timeout_seconds,
                )
            except asyncssh.HostKeyNotVerifiable as exc:
                raise HostKeyError(node, f"host key does not match {ssh.known_hosts} ({exc.reason}); "
                                         "if the node was reinstalled, update the pinned key") from None
            except asyncssh.PermissionDenied:
                raise NodeError(node, f"SSH login as {ssh.user} refused; check identity_file and the node's "
                                      "authorized_keys") from None
            except (TimeoutError, OSError, asyncssh.Error) as exc:
                last = exc
                await asyncio.sleep(0.5 * (attempt + 1))
        raise NodeError(node, f"SSH to {spec.address}:{ssh.port} failed: {_describe(last)}")

    async def connection(self, node: str) -> asyncssh.SSHClientConnection:
        lock = self._locks.setdefault(node, asyncio.Lock())
        async with lock:
            conn = self._conns.get(node)
            if conn is None or conn.is_closed():
                conn = self._conns[node] = await self._connect(node)
            return conn

    async def run(self, node: str, argv: Sequence[str], *, timeout: float = 120.0, check: bool = True,
                  input: str | None = None) -> CommandResult:
        """Run `argv` once. Only a session that never opened is tried again (the command cannot have
        started); a connection lost or a timeout once it runs is `OutcomeUnknown`: the command may
        or may not have had its effect, so the caller checks the facts instead of re-running it."""
        command = shlex.join(argv)
        for attempt in range(2):  # a pooled connection may have died since its last use
            conn = await self.connection(node)
            try:
                proc = await conn.create_process(command, stderr=asyncssh.PIPE)
                break
            except asyncssh.ChannelOpenError as exc:
                self._conns.pop(node, None)
                if attempt:
                    raise NodeError(node, f"cannot open a session: {_describe(exc)}") from None
            except (asyncssh.Error, OSError) as exc:
                self._conns.pop(node, None)
                raise OutcomeUnknown(node, f"connection lost while starting `{_short(command)}`: "
                                           f"{_describe(exc)}") from None
        try:  # awaited in this task (asyncio.timeout), not in tasks of their own (wait_for) that a
            # loop stopped at the wrong moment leaves unstarted ("coroutine ... was never awaited")
            async with asyncio.timeout(timeout):
                stdout, stderr = await proc.communicate(input)
            async with asyncio.timeout(10):
                await proc.wait_closed()
        except TimeoutError:
            proc.close()
            raise OutcomeUnknown(node, f"`{_short(command)}` did not finish within {timeout:g} s") from None
        except (asyncssh.Error, OSError) as exc:
            self._conns.pop(node, None)
            raise OutcomeUnknown(node, f"connection lost during `{_short(command)}`: {_describe(exc)}") from None
        status = proc.exit_status
        if status is None:  # the session closed without an exit status (killed, connection gone)
            raise OutcomeUnknown(node, f"`{_short(command)}` ended without an exit status")
        result = CommandResult(status, _text(stdout), _text(stderr))
        if check and not result.ok:
            last = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or [f"exit {result.exit_status}"]
            raise NodeError(node, f"`{_short(command)}` failed: {last[0]}")
        return result

    def forget(self, node: str) -> None:
        """Drop a node's connection (it was powered off, or its key changed)."""
        conn = self._conns.pop(node, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        for conn in list(self._conns.values()):
            await conn.wait_closed()
        self._conns.clear()


def _text(data: object) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else str(data)


def _short(command: str) -> str:
    """The command on one line (a script's newlines would cut the one-line error short), at most 80
    characters."""
    line = " ".join(command.split())
    return line if len(line) <= 80 else line[:77] + "..."


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
