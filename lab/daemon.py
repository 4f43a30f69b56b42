"""The lab's hardware emulation, one detached process per lab (`python -m peakpack.lab.daemon DIR`):

- one IPMI BMC per node (pyghmi's `Bmc` server on UDP, spoken to with `ipmitool -I lanplus`);
  chassis power off/soft really kills the node's containers, dockerd and sshd, power on starts
  them again;
- one powercap RAPL zone per node (`energy_uj`, `max_energy_range_uj`, `name`) whose counter
  advances with the node's container CPU time (cgroup v1 cpuacct) through its power curve,
  wraps at `max_energy_range_uj` like the real one, and stands still while the node is off.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

import pyghmi.ipmi.bmc as bmc

from .layout import LabLayout, NodeLayout
from .node import CGROUP_ROOT, powered, start_node, stop_node

#: Real package-0 zones wrap at 2^32 uJ-ish values; ours is small enough that long runs wrap.
MAX_ENERGY_RANGE_UJ = 262_143_328_850
SAMPLE_SECONDS = 0.5


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class NodeBmc(bmc.Bmc):
    def __init__(self, node: NodeLayout, address: str, password: str) -> None:
        super().__init__({"admin": password}, port=0, address=address)
        # pyghmi keys sessions by self.port: use the port the kernel gave us.
        self.port = self.serversocket.getsockname()[1]
        self.node = node
        self._busy = threading.Lock()
        write_atomic(node.dir / "bmc.port", f"{self.port}\n")

    def get_power_state(self) -> str:
        return "on" if powered(self.node) else "off"

    def _switch(self, on: bool) -> None:
        def work() -> None:
            with self._busy:
                try:
                    (start_node if on else stop_node)(self.node)
                except Exception:  # noqa: BLE001 - a daemon must outlive one failed switch
                    traceback.print_exc()

        self.node.power_file.write_text("on\n" if on else "off\n")  # the chassis answers at once
        threading.Thread(target=work, daemon=True).start()

    def power_on(self) -> None:
        if not powered(self.node):
            self._switch(True)

    def power_off(self) -> None:
        if powered(self.node):
            self._switch(False)

    def power_shutdown(self) -> None:  # "soft": the OS shuts down; here as abrupt as off
        self.power_off()

    def power_cycle(self) -> None:
        self.power_off()
        self.power_on()

    def power_reset(self) -> None:
        self.power_cycle()


class RaplZone:
    def __init__(self, node: NodeLayout, cpus: int, idle_w: float, max_w: float) -> None:
        self.node, self.cpus, self.idle_w, self.max_w = node, cpus, idle_w, max_w
        zone = node.rapl_zone
        zone.mkdir(parents=True, exist_ok=True)
        write_atomic(zone / "name", "package-0\n")
        write_atomic(zone / "max_energy_range_uj", f"{MAX_ENERGY_RANGE_UJ}\n")
        energy = zone / "energy_uj"
        self.energy_uj = int(energy.read_text()) if energy.exists() else 0
        write_atomic(energy, f"{self.energy_uj}\n")
        self.last_cpu_ns = self.cpu_ns()
        self.last_t = time.monotonic()

    def cpu_ns(self) -> int:
        try:
            return int((CGROUP_ROOT / "cpuacct" / self.node.cgroup / "cpuacct.usage").read_text())
        except (OSError, ValueError):
            return 0

    def tick(self) -> None:
        now, cpu = time.monotonic(), self.cpu_ns()
        dt = now - self.last_t
        busy_s = max(0, cpu - self.last_cpu_ns) / 1e9
        self.last_t, self.last_cpu_ns = now, cpu
        if not powered(self.node) or dt <= 0 or self.node.rapl_hidden.exists():
            return  # off, or a node without a counter (`Lab.rapl_counter`): the counter stands still
        util = min(1.0, busy_s / (dt * self.cpus))
        watts = self.idle_w + (self.max_w - self.idle_w) * util
        self.energy_uj = (self.energy_uj + int(watts * dt * 1e6)) % MAX_ENERGY_RANGE_UJ
        write_atomic(self.node.rapl_zone / "energy_uj", f"{self.energy_uj}\n")


def rapl_loop(zones: list[RaplZone]) -> None:
    while True:
        for z in zones:
            try:
                z.tick()
            except OSError:
                traceback.print_exc()
        time.sleep(SAMPLE_SECONDS)


def wake_io_thread(address: str, port: int) -> None:
    """pyghmi's IO thread selects on the sockets it knew when it started, for up to 300 s: a
    short datagram to the first BMC wakes it so it also listens on the BMCs bound after it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"\x01", (address, port))


def main(folder: str) -> None:
    lab = LabLayout.load(Path(folder))
    if lab is None:
        sys.exit(f"{folder}: not a lab folder")
    bmcs = [NodeBmc(n, lab.host_address, (lab.dir / "secrets" / f"{n.name}.bmc").read_text().strip())
            for n in lab.nodes]
    zones = [RaplZone(n, lab.cpus, lab.idle_w, lab.max_w) for n in lab.nodes]
    threading.Thread(target=rapl_loop, args=(zones,), daemon=True).start()
    wake_io_thread(lab.host_address, bmcs[0].port)
    write_atomic(lab.dir / "labd.ready", "ready\n")
    bmcs[0].listen(timeout=1)


if __name__ == "__main__":
    main(sys.argv[1])
