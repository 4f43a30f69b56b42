#!/usr/bin/env python3
"""Holds ONE TCP connection to each given ADDRESS:PORT (an echo server) and keeps talking on it,
never reconnecting, until SIGTERM or SIGINT; then prints, per connection, whether it was kept,
how many requests it answered and its longest pause. The quickstart runs it against its lab
containers (on the lab's segment network) across their migrations.

    hold-connections.py NAME=ADDRESS:PORT ...
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time

stop = threading.Event()


def hold(name: str, address: str, port: int, report: dict[str, str]) -> None:
    answered, longest, last = 0, 0.0, time.monotonic()
    try:
        with socket.create_connection((address, port), timeout=60) as s, s.makefile("rb") as replies:
            while not stop.is_set():
                s.sendall(b"ping %d\n" % answered)
                if replies.readline() != b"ping %d\n" % answered:
                    raise ConnectionError("closed or answered wrong")
                now = time.monotonic()
                longest, last, answered = max(longest, now - last), now, answered + 1
                stop.wait(0.2)
        how = "kept"
    except OSError as exc:
        how = f"LOST ({type(exc).__name__}: {exc})"
    report[name] = (f"{name} ({address}:{port}): one connection {how}, {answered} requests answered on it, "
                    f"longest pause {longest:.1f} s")


def main() -> None:
    report: dict[str, str] = {}
    threads = []
    for arg in sys.argv[1:]:
        name, _, target = arg.partition("=")
        address, _, port = target.rpartition(":")
        threads.append(threading.Thread(target=hold, args=(name, address, int(port), report)))
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads) and not stop.is_set():
        stop.wait(0.5)
    stop.set()
    for t in threads:
        t.join()
    for name in sorted(report):
        print(report[name], flush=True)


if __name__ == "__main__":
    main()
