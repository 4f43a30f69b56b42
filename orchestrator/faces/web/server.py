"""Serving the page with uvicorn: in the foreground (`peakpack web`) or in a thread beside the
controller (`peakpack serve --http-port`), which stops it when the loop ends.

The socket is bound here, before uvicorn starts, so a port in use is one line naming the flag
(uvicorn itself would exit the process from inside its thread), and port 0 picks a free port
that the caller learns."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp

from ...domain.errors import PeakpackError


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PeakpackError(f"--http-port: cannot listen on {host}:{port} ({exc.strerror}); "
                            "choose another port or --http-addr") from None
    sock.listen(128)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, which also says when it begins to stop (`stopping`), so an approved plan
    being applied in the foreground page (`peakpack web`) starts no new action."""

    def __init__(self, config: uvicorn.Config, stopping: threading.Event) -> None:
        super().__init__(config)
        self.stopping = stopping

    def handle_exit(self, sig: int, frame: object) -> None:
        self.stopping.set()
        super().handle_exit(sig, frame)  # type: ignore[arg-type]


def _server(app: ASGIApp, stopping: threading.Event | None = None) -> uvicorn.Server:
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            h11_max_incomplete_event_size=16 * 1024)  # request line and headers: 16 KiB at most
    return _Server(config, stopping or threading.Event())


def run(app: ASGIApp, host: str, port: int, announce: Callable[[int], None],
        stopping: threading.Event | None = None) -> None:
    """Serve until SIGINT/SIGTERM (which set `stopping` first); `announce` gets the port once it
    is bound."""
    sock = bind(host, port)
    announce(sock.getsockname()[1])
    _server(app, stopping).run(sockets=[sock])


@contextmanager
def serving_in_background(app: ASGIApp, host: str, port: int) -> Iterator[int]:
    """Serve in a daemon thread for the duration of the `with` block, which gets the port."""
    sock = bind(host, port)
    server = _server(app)  # off the main thread uvicorn leaves the signals to the controller
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="peakpack-web", daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()
