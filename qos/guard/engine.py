"""The local Docker engine over its unix socket: what runs, and stopping a container."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.unix_path)
        self.sock = sock


class Engine:
    """The node's own engine only: the guard needs nothing from the network."""

    def __init__(self, docker_host: str) -> None:
        if not docker_host.startswith("unix://"):
            raise SystemExit(f"DOCKER_HOST: {docker_host!r} is not unix://PATH; the guard talks to the local engine")
        self.path = docker_host[len("unix://"):]

    def call(self, method: str, url: str, timeout: float = 10) -> Any:
        conn = _UnixConnection(self.path, timeout)
        try:
            conn.request(method, url, headers={"Host": "docker"})
            resp = conn.getresponse()
            body = resp.read()
            if resp.status >= 300:
                raise OSError(f"{method} {url}: {resp.status} {body[:200].decode(errors='replace').strip()}")
            return json.loads(body) if body.strip() else None
        finally:
            conn.close()

    def running(self) -> list[dict[str, Any]]:
        return self.call("GET", "/containers/json")

    def inspect(self, cid: str) -> dict[str, Any]:
        return self.call("GET", f"/containers/{cid}/json")

    def stop(self, cid: str) -> None:
        """At once (t=0): a `--restart always` container stays stopped, until the controller starts it."""
        self.call("POST", f"/containers/{cid}/stop?t=0", timeout=30)
