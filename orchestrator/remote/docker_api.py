"""Each node's Docker Engine API through the docker SDK over SSH (the only module that imports
docker and paramiko).

The SDK's SSH transport opens one paramiko connection to the node and, per HTTP connection, a
session running `docker system dial-stdio`, which pipes to the engine that the node's `docker`
command reaches (on lab nodes, sshd's `SetEnv DOCKER_HOST=...`). So nothing listens on TCP and
the node's SSH login is the only credential, as for `remote.ssh`.

Host keys are pinned exactly as in `remote.ssh`: checked against the inventory's known_hosts and
nothing else. The SDK's own `SSHHTTPAdapter` can't be used as it is: its constructor connects at
once, after reading ~/.ssh/config (which may rename the host, change the user or port, add a
ProxyCommand or an identity) and the system's and user's known_hosts files. `PinnedSSHAdapter`
therefore overrides the one hook that builds the paramiko client and its connect arguments
(`_create_paramiko_client`, filling `ssh_client` and `ssh_params`, the two attributes the SDK
lists as the adapter's state), and the `docker.APIClient` is built in shell-out mode, which
opens nothing, before the pinned adapter is mounted at its `base_url` in place of its own.

SDK calls block: `EnginePool.call` runs them in a worker thread with a timeout. Failures to reach
the engine become `NodeError` (or `HostKeyError`); the engine's own answers (`EngineNotFound`,
other `EngineAPIError`: the SDK's `docker.errors.NotFound` and `APIError`) reach the caller
unchanged, or as None through `call_or_none`.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import docker
import docker.errors
import paramiko
from docker.constants import DEFAULT_DOCKER_API_VERSION, MINIMUM_DOCKER_API_VERSION
from docker.transport import SSHHTTPAdapter
from docker.utils import version_lt

from ..domain.errors import HostKeyError, NodeError
from ..domain.model import Inventory, NodeSpec, SshConfig
from ..domain.settings import RemoteSettings
from .login import pinned_login

T = TypeVar("T")

#: The engine's own error answers (docker.errors.APIError; NotFound is EngineNotFound), so that
#: callers can tell them from NodeError without importing the docker SDK.
EngineAPIError = docker.errors.APIError
EngineNotFound = docker.errors.NotFound


class _NotPinned(paramiko.SSHException):
    """The node offered a host key for which the pinned known_hosts has no line."""


class _RejectNotPinned(paramiko.MissingHostKeyPolicy):
    """Refuse, with an exception of our own, so that it can't be mistaken for another failure."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        raise _NotPinned(hostname)


class PinnedSSHAdapter(SSHHTTPAdapter):
    """The SDK's SSH transport, logging in with the inventory's user, port and identity only and
    accepting only the host key pinned in the inventory's known_hosts. Connects on construction,
    like its base class; a refused host key is a HostKeyError naming the node."""

    def __init__(self, spec: NodeSpec, ssh: SshConfig, *, remote: RemoteSettings,
                 timeout: float) -> None:
        self.spec = spec
        self.ssh = ssh
        self.remote = remote
        try:
            super().__init__(ssh_url(spec.address, ssh), timeout=timeout)
        except BaseException as exc:
            if getattr(self, "ssh_client", None) is not None:
                self.ssh_client.close()  # a refused host key leaves the transport open
            if isinstance(exc, paramiko.SSHException):
                raise self._explain(exc) from None
            raise

    def _create_paramiko_client(self, base_url: str) -> None:
        client = paramiko.SSHClient()
        # the adapter-local key set: neither load_system_host_keys() nor a file to save into
        client.get_host_keys().load(str(self.ssh.known_hosts))
        client.set_missing_host_key_policy(_RejectNotPinned())
        self.ssh_client = client
        self.ssh_params = {
            "hostname": self.spec.address,
            "port": self.ssh.port,
            "username": self.ssh.user,
            "key_filename": str(self.ssh.identity_file) if self.ssh.identity_file else None,
            "look_for_keys": self.ssh.identity_file is None,  # as asyncssh does in remote.ssh
            "allow_agent": False,
            "timeout": self.remote.connect_timeout_seconds,
            "banner_timeout": self.remote.connect_timeout_seconds,
            "auth_timeout": self.remote.connect_timeout_seconds,
        }

    def _connect(self) -> None:
        """Connect over a socket that gives up on a peer gone quiet: paramiko sends keepalives
        every `keepalive_seconds`, and TCP_USER_TIMEOUT drops the connection once data has gone
        unacknowledged for `dead_after_seconds`, so a call to a partitioned node fails then
        instead of waiting for its own timeout. A new socket each time (the SDK reconnects
        through this hook)."""
        sock = socket.create_connection((self.spec.address, self.ssh.port), self.remote.connect_timeout_seconds)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT,
                            int(self.remote.dead_after_seconds * 1000))
            self.ssh_client.connect(**self.ssh_params, sock=sock)
        except BaseException:
            sock.close()
            raise
        self.ssh_client.get_transport().set_keepalive(max(1, round(self.remote.keepalive_seconds)))

    def _explain(self, exc: paramiko.SSHException) -> Exception:
        node, known_hosts = self.spec.name, self.ssh.known_hosts
        if isinstance(exc, paramiko.BadHostKeyException):
            return HostKeyError(node, f"host key does not match the one pinned in {known_hosts}; "
                                      "if the node was reinstalled, update its line there")
        if isinstance(exc, _NotPinned):
            return HostKeyError(node, f"no host key for {exc} in {known_hosts}; add the node's key "
                                      "there (checked out of band)")
        if isinstance(exc, paramiko.AuthenticationException):
            return NodeError(node, f"SSH login as {self.ssh.user} refused; check identity_file and "
                                   "the node's authorized_keys")
        return exc

    @property
    def connected(self) -> bool:
        """False once the node closed the connection (rebooted, sshd restarted)."""
        transport = self.ssh_client.get_transport() if self.ssh_client else None
        return transport is not None and transport.is_active()


class EnginePool:
    """One Docker Engine API client per node, connected on first use and reused by every call.

    Thread-safe: `run` blocks and may be called from any thread; `call` is its asyncio form.
    A client that failed to reach its engine is dropped, so the next call reconnects.
    """

    def __init__(self, inventory: Inventory, *, request_timeout: float = 60.0) -> None:
        self.inventory = inventory
        self.request_timeout = request_timeout  # the SDK's per-request socket timeout
        self._clients: dict[str, tuple[docker.APIClient, PinnedSSHAdapter]] = {}
        self._lock = threading.Lock()
        self._node_locks: dict[str, threading.Lock] = {}

    def run(self, node: str, fn: Callable[[docker.APIClient], T]) -> T:
        """`fn(api)` with the node's client, blocking. Raises NodeError when the engine can't be
        reached; docker.errors.APIError (NotFound, Conflict, ...) when it answered with one."""
        api = self._client(node)
        try:
            return fn(api)
        except docker.errors.APIError:
            raise  # an HTTP error is an OSError too: keep the engine's answers from the next clause
        except (OSError, paramiko.SSHException) as exc:
            self._drop(node, api)
            raise NodeError(node, f"Docker Engine API over SSH failed: {describe(exc)}") from None

    async def call(self, node: str, fn: Callable[[docker.APIClient], T], *,
                   timeout: float = 60.0) -> T:
        """`run` in a worker thread, bounded by `timeout` (connecting included). On expiry the
        node's client is dropped: closing its SSH connection also ends the stuck worker thread."""
        try:
            return await asyncio.wait_for(asyncio.to_thread(self.run, node, fn), timeout)
        except TimeoutError:
            self.forget(node)
            raise NodeError(node, f"Engine API call did not finish within {timeout:g} s") from None

    async def call_or_none(self, node: str, fn: Callable[[docker.APIClient], T], *,
                           timeout: float = 60.0) -> T | None:
        """`call`, with None for the engine's 404 (no such container, image, network, volume)."""
        def or_none(api: docker.APIClient) -> T | None:
            try:
                return fn(api)
            except docker.errors.NotFound:
                return None

        return await self.call(node, or_none, timeout=timeout)

    async def inspect_container_or_none(self, node: str, container: str, *,
                                        timeout: float = 30.0) -> dict[str, Any] | None:
        """The container's inspect document, or None if the node's engine has no such container."""
        return await self.call_or_none(node, lambda api: api.inspect_container(container),
                                       timeout=timeout)

    def forget(self, node: str) -> None:
        """Close and drop a node's client (it was powered off, or its key changed)."""
        with self._lock:
            entry = self._clients.pop(node, None)
        if entry is not None:
            entry[0].close()

    def close(self) -> None:
        with self._lock:
            entries = list(self._clients.values())
            self._clients.clear()
        for api, _ in entries:
            api.close()

    def _client(self, node: str) -> docker.APIClient:
        with self._lock:
            node_lock = self._node_locks.setdefault(node, threading.Lock())
        with node_lock:  # one connect per node at a time; other nodes are not held up
            entry = self._clients.get(node)
            if entry is not None and entry[1].connected:
                return entry[0]
            if entry is not None:
                self._drop(node, entry[0])
            entry = self._connect(node)
            with self._lock:
                self._clients[node] = entry
            return entry[0]

    def _connect(self, node: str) -> tuple[docker.APIClient, PinnedSSHAdapter]:
        spec, ssh = pinned_login(self.inventory, node)
        try:
            adapter = PinnedSSHAdapter(spec, ssh, remote=self.inventory.remote, timeout=self.request_timeout)
        except (OSError, paramiko.SSHException) as exc:
            where = f"{spec.address}:{ssh.port}"
            raise NodeError(node, f"SSH to {where} failed: {describe(exc)}") from None
        try:
            # the probe shares the adapter and is left unclosed: closing it would close the adapter
            probe = self._mounted(adapter, MINIMUM_DOCKER_API_VERSION)
            server = probe.version(api_version=False)["ApiVersion"]
            return self._mounted(adapter, negotiated_version(server)), adapter
        except (OSError, paramiko.SSHException, docker.errors.DockerException, KeyError) as exc:
            adapter.close()
            raise NodeError(node, "no Docker Engine API through `docker system dial-stdio`: "
                                  f"{describe(exc)}; check that `docker version` works in an SSH "
                                  "session on the node") from None

    def _mounted(self, adapter: PinnedSSHAdapter, version: str) -> docker.APIClient:
        # use_ssh_client: the constructor's own adapter then opens nothing; it is replaced at once
        api = docker.APIClient(base_url=ssh_url(adapter.spec.address, adapter.ssh),
                               version=version, timeout=self.request_timeout, use_ssh_client=True)
        api.mount(api.base_url, adapter)
        return api

    def _drop(self, node: str, api: docker.APIClient) -> None:
        """Drop `api` if it is still the node's client (another thread may have replaced it)."""
        with self._lock:
            entry = self._clients.get(node)
            if entry is None or entry[0] is not api:
                return
            del self._clients[node]
        api.close()


def ssh_url(address: str, ssh: SshConfig) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"ssh://{ssh.user}@{host}:{ssh.port}"


def negotiated_version(server: str) -> str:
    """The engine's API version, capped at the newest this SDK knows (as the docker CLI does);
    e.g. dockerd 20.10 speaks 1.41 and refuses requests for newer versions."""
    return server if version_lt(server, DEFAULT_DOCKER_API_VERSION) else DEFAULT_DOCKER_API_VERSION


def describe(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


__all__ = ["EngineAPIError", "EngineNotFound", "EnginePool", "PinnedSSHAdapter",
           "negotiated_version", "ssh_url"]
