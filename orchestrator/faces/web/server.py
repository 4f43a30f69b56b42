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
from starlette.applications import Starlette

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


def _server(app: Starlette) -> uvicorn.Server:
    return uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))


def run(app: Starlette, host: str, port: int, announce: Callable[[int], None]) -> None:
    """Serve until SIGINT/SIGTERM; `announce` gets the port once it is bound."""
    sock = bind(host, port)
    announce(sock.getsockname()[1])
    _server(app).run(sockets=[sock])


@contextmanager
def serving_in_background(app: Starlette, host: str, port: int) -> Iterator[int]:
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
