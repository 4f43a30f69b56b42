"""A memcached client that holds ONE connection and never reconnects, as a real client of a cache
or a database does: it writes acknowledged sets one after another in a thread, and afterwards
reads every acknowledged key back on the same connection. Used by the integration tests of
moving addresses and by bench/migration_downtime.py (`--network segment`)."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass


@dataclass
class Held:
    """What the one connection saw."""

    acked: int = 0
    longest_gap_s: float = 0.0
    error: str | None = None   # why the connection ended early (None: it lasted)


class HeldConnection:
    """`with HeldConnection(host, port) as c: ...; c.stop(); c.readback()`."""

    def __init__(self, host: str, port: int, timeout: float = 120.0, pause: float = 0.005) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local = self.sock.getsockname()
        self.buf = bytearray()
        self.seen = Held()
        self.pause = pause
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, daemon=True)

    def __enter__(self) -> HeldConnection:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.sock.close()

    def _line(self) -> bytes:
        while (i := self.buf.find(b"\r\n")) < 0:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed by the server")
            self.buf += chunk
        line = bytes(self.buf[:i])
        del self.buf[:i + 2]
        return line

    def _write(self) -> None:
        last = time.monotonic()
        try:
            while not self._stop.is_set():
                n = self.seen.acked
                self.sock.sendall(b"set held%d 0 0 8\r\n%08d\r\n" % (n, n))
                if (reply := self._line()) != b"STORED":
                    raise ConnectionError(f"answered {reply!r}")
                now = time.monotonic()
                self.seen.longest_gap_s = max(self.seen.longest_gap_s, now - last)
                self.seen.acked, last = n + 1, now
                time.sleep(self.pause)
        except OSError as exc:
            self.seen.error = f"{type(exc).__name__}: {exc}"

    def wait_for(self, acked: int, seconds: float = 60.0) -> None:
        """Until `acked` writes are acknowledged (or the connection ended)."""
        deadline = time.monotonic() + seconds
        while self.seen.acked < acked and self.seen.error is None and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> Held:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(120)
        return self.seen

    def readback(self, count: int | None = None) -> int:
        """How many of the acknowledged writes (the first `count` of them) are missing or wrong,
        read on this connection."""
        lost, count = 0, self.seen.acked if count is None else count
        for start in range(0, count, 100):
            keys = [b"held%d" % i for i in range(start, min(count, start + 100))]
            self.sock.sendall(b"get " + b" ".join(keys) + b"\r\n")
            got = {}
            while (line := self._line()) != b"END":
                _, key, _, size = line.split()
                while len(self.buf) < int(size) + 2:
                    self.buf += self.sock.recv(1 << 16)
                got[key] = bytes(self.buf[:int(size)])
                del self.buf[:int(size) + 2]
            lost += sum(1 for i, k in enumerate(keys, start) if got.get(k) != b"%08d" % i)
        return lost
