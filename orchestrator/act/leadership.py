"""Leadership: one controller acts on a store at a time.

A `Lease` wraps the store's lease row. It is taken at once (`acquire`: `serve --once`, `migrate`,
`pin` fail fast) or waited for as a hot standby (`wait`); while held it is renewed by a background
thread every ttl/3, so a long epoch never lets it expire; the store is fenced with its token, so
a controller that lost it cannot write; `lost` is set as soon as this process may lead no more.
A dead leader needs no clean-up: its lease expires, or, when it ran on this host, is taken over
at once because its process is gone.

Lease loss is detected by the clock, within the lease: a watchdog counts the lease lost one ttl
after the last renewal that was *sent* and succeeded (the database set the expiry later than
that), whether or not the renewal under way ever returns. A database that stops answering (a
PostgreSQL server that hangs, a SQLite writer holding the lock) cannot keep this process acting
past its lease; the store's own statement timeouts (`db/repos/lease.py`) only make a renewal
give up sooner.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from ..domain.errors import FencedError, StoreError
from ..domain.ports import Journal
from ..domain.records import LeaseRecord

#: Renewed every ttl/3 (every 3.3 s), a 10 s lease outlives two renewals that fail outright; a
#: renewal is one short statement. Only a renewal stuck behind another writer for longer (SQLite
#: waits up to its 10 s busy timeout) can let it lapse: then this process stops acting (fenced)
#: and a standby takes over; never two leaders.
MIN_TTL_S = 10.0
#: Long epochs still fail over within minutes: the lease does not have to last an epoch.
MAX_TTL_S = 120.0


def lease_ttl(epoch_seconds: float) -> float:
    """One epoch, clamped to [MIN_TTL_S, MAX_TTL_S]: a standby takes over a dead leader within
    4/3 ttl (expiry + one poll of ttl/3), which is within two epochs for every epoch of at least
    2/3 MIN_TTL_S (6.7 s)."""
    return max(MIN_TTL_S, min(float(epoch_seconds), MAX_TTL_S))


def _here() -> str:
    """This kernel boot and pid namespace: only within them does a pid name one process."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return "-"
    return hashlib.sha256(f"{boot}:{ns}".encode()).hexdigest()[:8]


HERE = _here()


def owner_id(role: str) -> str:
    """`serve@head:4242:<here>:<nonce>`: what an operator reads in "locked by", and enough for a
    successor on this host to tell whether the holder's process still exists."""
    return f"{role}@{socket.gethostname()}:{os.getpid()}:{HERE}:{uuid.uuid4().hex[:8]}"


def gone(holder: str) -> bool:
    """True when `holder` ran in this boot and pid namespace and its process has exited: it can
    write nothing more, so its lease may be taken without waiting for it to expire. A reused pid
    or a zombie looks alive: then the lease is simply waited for."""
    try:
        _, pid, here, _ = holder.rsplit(":", 3)
        number = int(pid)
    except ValueError:
        return False
    if here != HERE or HERE == "-":
        return False
    try:
        os.kill(number, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def describe(holder: LeaseRecord | None) -> str:
    if holder is None:
        return "another controller"
    return f"controller {holder.holder} (lease until {holder.expires_at:%Y-%m-%d %H:%M:%S} UTC)"


class Lease:
    """The store's controller lease for one owner; use `acquire`/`wait`, then `release`."""

    def __init__(self, store: Journal, ttl_s: float, *, role: str = "serve", owner: str | None = None,
                 log: Callable[[str], None] = lambda _: None) -> None:
        if ttl_s <= 0:
            raise ValueError(f"lease ttl must be > 0 s, not {ttl_s}")
        self.store, self.ttl_s, self.log = store, ttl_s, log
        self.owner = owner or owner_id(role)
        self.token: int | None = None
        self.lost = threading.Event()
        self.lost_reason = ""
        self._halt = threading.Event()
        self._renewer: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        self._expires = 0.0  # time.monotonic() when the lease may have lapsed

    # -- taking it ------------------------------------------------------------------------------

    def try_acquire(self) -> bool:
        """Take the lease if it is free, expired, or held by a process of this host that is gone."""
        if self.token is not None and not self.lost.is_set():
            return True
        current = self.store.lease.holder()
        dead = current.holder if current is not None and gone(current.holder) else None
        asked = time.monotonic()
        token = self.store.lease.acquire(self.owner, self.ttl_s, replacing=dead)
        if token is None:
            return False
        if dead is not None:
            self.log(f"took over the lease of {dead}, which is no longer running")
        self._hold(token, asked)
        return True

    def acquire(self) -> int:
        """Take the lease now, or fail with one line naming the holder."""
        if not self.try_acquire():
            raise StoreError(f"--db: this store is locked by {describe(self.store.lease.holder())}; "
                             "stop it first or use another --db")
        assert self.token is not None
        return self.token

    def wait(self, stop: threading.Event) -> bool:
        """Hot standby: poll every ttl/3 until the lease is ours (True) or `stop` is set (False)."""
        seen: str | None = None
        while not stop.is_set():
            try:
                if self.try_acquire():
                    if seen is not None:
                        self.log(f"standby: took over from {seen} (lease token {self.token})")
                    return True
                current = self.store.lease.holder()
            except StoreError as exc:  # the database is away for a moment: keep standing by
                self.log(f"standby: {exc}")
                current = None
            if current is not None and current.holder != seen:
                self.log(f"standby: {current.holder} leads until {current.expires_at:%Y-%m-%d %H:%M:%S} UTC")
                seen = current.holder
            stop.wait(self.ttl_s / 3)
        return False

    def _hold(self, token: int, asked: float) -> None:
        self.token = token
        self.store.fence(token)
        self.lost.clear()
        self.lost_reason = ""
        self._halt = threading.Event()
        self._expires = asked + self.ttl_s
        self._renewer = threading.Thread(target=self._renew, args=(token, self._halt),
                                         name="peakpack-lease", daemon=True)
        self._watchdog = threading.Thread(target=self._watch, args=(self._halt,), name="peakpack-lease-watch",
                                          daemon=True)
        self._renewer.start()
        self._watchdog.start()

    # -- keeping it -----------------------------------------------------------------------------

    def _renew(self, token: int, halt: threading.Event) -> None:
        """Every ttl/3, whatever the epoch is doing; each success moves the watchdog's deadline to
        one ttl after it was sent. A renewal that fails is retried; one that never returns leaves
        the deadline where it was, and the watchdog calls the lease lost."""
        while not halt.wait(self.ttl_s / 3):
            sent = time.monotonic()
            try:
                ok = self.store.lease.renew(self.owner, token, self.ttl_s)
                current = None if ok else self.store.lease.holder()
            except Exception as exc:  # noqa: BLE001 - any failure to reach the database is retried
                if not halt.is_set():
                    self.log(f"lease: renewal failed, retrying: {exc}")
                continue
            if halt.is_set():  # lost (or released) while this renewal waited: it changes nothing
                return
            if not ok:
                who = f"controller {current.holder}" if current is not None else "another controller"
                self.lose(f"{who} took over (lease token {current.token if current else '?'} > {token})")
                return
            self._expires = sent + self.ttl_s

    def _watch(self, halt: threading.Event) -> None:
        """Count the lease lost at its deadline, whatever a renewal still waits for."""
        while not halt.wait(max(0.0, min(self._expires - time.monotonic(), self.ttl_s / 10))):
            if time.monotonic() >= self._expires:
                self.lose(f"not renewed for {self.ttl_s:g} s (the database did not answer in time)")
                return

    def lose(self, reason: str) -> None:
        """Lead no more: stop renewing and set `lost` (the renewal failed, or a write was fenced)."""
        self._halt.set()
        if not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()
            self.log(f"lease lost: {reason}")

    def check(self) -> None:
        """Raise FencedError once the lease is lost: called before every epoch and execution."""
        if self.lost.is_set():
            raise FencedError(f"lease lost: {self.lost_reason}")

    # -- giving it back -------------------------------------------------------------------------

    def release(self) -> None:
        """Stop renewing and free the lease if it is still ours; the store stays fenced with the
        old token, so nothing this process still writes can land after a successor took over.
        Bounded: a database that does not answer keeps this process at most a ttl (the lease
        then simply expires on its own)."""
        self._halt.set()
        for thread in (self._renewer, self._watchdog):  # a renewal stuck on the database is left behind:
            if thread is not None:                      # halted, its answer changes nothing
                thread.join(self.ttl_s / 3)
        self._renewer = self._watchdog = None
        token, self.token = self.token, None
        if token is None:
            return
        failed: list[str] = []

        def free() -> None:
            try:
                self.store.lease.release(self.owner, token)
            except StoreError as exc:
                failed.append(str(exc))

        releasing = threading.Thread(target=free, name="peakpack-lease-release", daemon=True)
        releasing.start()
        releasing.join(self.ttl_s / 3)
        if failed or releasing.is_alive():
            why = failed[0] if failed else "the database did not answer"
            self.log(f"lease: not released ({why}); it expires within {self.ttl_s:g} s")

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
