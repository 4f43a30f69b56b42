"""The settings an inventory may change, each declared once: its default, its bounds (the
`Annotated` constraint the inventory is checked against when its section sets it: `config.py`
validates these dataclasses themselves) and, in its comment, what it means.

The planner's defaults are the settings the simulator measured (docs/simulator.md); an
inventory's `[planner]` section overrides them key by key (`peakpack config show` prints the
effective values and where each came from). Costs are energies, not watts, so the same settings
mean the same thing at any epoch length: the planner divides them by the epoch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, ConfigDict, Field

from . import inputs
from .inputs import Bounds


def within(bounds: Bounds) -> Any:
    """`bounds` as the constraint an inventory's value must meet (pydantic's `Field`)."""
    return Field(**bounds.pydantic())


#: how an inventory's section is read into one of these dataclasses: an unknown key is refused,
#: and so are inf and nan (valid TOML floats, but no setting is infinite)
CHECKED = ConfigDict(extra="forbid", allow_inf_nan=False)


@dataclass(frozen=True)
class ForecastSettings:
    """How a container's CPU demand for the coming epochs is predicted from its history.

    The mean of the last `window_seconds` of per-epoch samples plus `k_std` standard deviations,
    or, when `quantile` is set, that quantile of them instead. A consolidation should last at
    least the window, so it is planned against it, not against the last sample's noise.
    """

    __pydantic_config__: ClassVar[ConfigDict] = CHECKED

    window_seconds: Annotated[float, within(inputs.POSITIVE_SECONDS)] = 7200.0
    quantile: Annotated[float, within(Bounds(0, 1))] | None = None
    k_std: Annotated[float, within(Bounds(0, 100))] = 0.0

    def __post_init__(self) -> None:
        if self.quantile is not None and self.k_std:
            raise ValueError("give quantile or k_std (mean + k_std x std), not both")


@dataclass(frozen=True)
class QosCapSettings:
    """A lower CPU cap for a node whose latency-sensitive containers stalled (docs/qos.md).

    A node whose most stalled latency-sensitive container was ready but not running (PSI cpu
    `some`, else run-queue wait) more than `stall_share` of an observed interval plans under a cap
    `cap_step` lower at the next epoch, one more step for each such interval in a row, down to
    `min_cap`; after `clear_epochs` clear intervals in a row it gets one step back. Lowered at
    once, raised slowly: hysteresis, so a node does not flap between two caps.
    """

    __pydantic_config__: ClassVar[ConfigDict] = CHECKED

    stall_share: Annotated[float, within(inputs.SHARE)] = 0.10
    cap_step: Annotated[float, within(inputs.SHARE)] = 0.10
    min_cap: Annotated[float, within(inputs.SHARE)] = 0.40
    clear_epochs: Annotated[int, within(Bounds(1, 10_000, integer=True))] = 3


@dataclass(frozen=True)
class PlannerSettings:
    """Everything the planner is told besides the cluster itself (inventory `[planner]`)."""

    __pydantic_config__: ClassVar[ConfigDict] = CHECKED

    cap: Annotated[float, within(inputs.SHARE)] = 0.70  # CPU load per node, share of its cores
    memory_cap: Annotated[float, within(inputs.SHARE)] = 0.95  # memory per node, share of its MB
    #: energy of one migration: about what source and target draw while 1.7 GB copies at
    #: 62.5 MB/s (28 s); plus the part that grows with the memory copied
    migration_j: Annotated[float, within(Bounds(0, 1e9, "J"))] = 4500.0
    migration_j_per_gb: Annotated[float, within(Bounds(0, 1e9, "J"))] = 1800.0
    #: epochs a node switched off is expected to stay off (its idle power counts this many times)
    off_epochs: Annotated[float, within(Bounds(1, 1e6))] = 1.5
    #: what one GB between containers on two different nodes costs, in joules: the NICs, the
    #: switches and the network stacks it crosses (and, at the operator's choice, a price for its
    #: latency); 0: the traffic graph plays no part. Charged over the forecast window
    #: (`traffic_horizon_s`), since a pair joined keeps its saving for as long as it keeps talking
    traffic_j_per_gb: Annotated[float, within(Bounds(0, 1e9, "J"))] = 100.0
    forecast: ForecastSettings = field(default_factory=ForecastSettings)
    #: the solver's work per plan, in CP-SAT's deterministic seconds (about a second of one core
    #: each; the same count on every run): where a search stops, so the same input gives the
    #: same plan (docs/planner.md "Determinism")
    work_limit: Annotated[float, within(inputs.SOLVER_WORK)] = 2.0
    #: wall-clock seconds after which a solve stops anyway: a safety net for a starved machine;
    #: a plan it stopped says so, as another run may then differ
    time_limit_s: Annotated[float, within(inputs.SOLVER_SECONDS)] = 10.0
    #: CP-SAT workers for the whole model of a small cluster; more than one run CP-SAT's
    #: interleaved portfolio, deterministic but slower here (docs/planner.md "Determinism")
    workers: Annotated[int, within(Bounds(1, 1024, integer=True))] = 1
    relative_gap: Annotated[float, within(Bounds(0, 1, hi_open=True))] = 0.01  # stop once proven within 1% of optimal
    #: a container that moved within the forecast window does not move again unless the cap
    #: forces it
    hysteresis: bool = True
    # -- power decisions (also accepted as `[power_policy]`); see orchestrator/decide/planner/rules.py
    #: a node woken, or that became empty by itself, this recently is not switched off
    grace_seconds: Annotated[float, within(inputs.SECONDS)] = 600.0
    spare_nodes: Annotated[int, within(inputs.COUNT)] = 0  # empty powered nodes kept on as spare capacity
    boot_seconds: Annotated[float, within(inputs.SECONDS)] = 180.0  # power-on until the node answers SSH
    boot_power_w: Annotated[float, within(inputs.WATTS)] | None = None  # draw while booting; None: its max_w
    #: a node not answering after this is quarantined
    wake_timeout_seconds: Annotated[float, within(inputs.POSITIVE_SECONDS)] = 300.0
    #: `[planner.qos]`: the cap of a node whose latency-sensitive containers stalled
    qos: QosCapSettings = field(default_factory=QosCapSettings)

    def off_horizon_s(self, epoch_seconds: float) -> float:
        """How long a node switched off now is expected to stay off: what a boot must pay for."""
        return self.off_epochs * epoch_seconds

    def traffic_horizon_s(self) -> float:
        """How long a pair's forecast traffic is charged for: the forecast window, over which the
        forecast holds and hysteresis keeps a moved container where it went."""
        return self.forecast.window_seconds

    def by_key(self) -> dict[str, Any]:
        """Every setting by its inventory key (`forecast.window_seconds` for `[planner.forecast]`,
        `qos.stall_share` for `[planner.qos]`)."""
        flat = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in NESTED}
        for section in NESTED:
            value = getattr(self, section)
            flat.update({f"{section}.{f.name}": getattr(value, f.name) for f in fields(value)})
        return flat


#: the sub-tables of `[planner]`, each a settings dataclass of its own
NESTED = ("forecast", "qos")


#: the label that keeps a container out of post-copy (`MigrationSettings.post_copy`)
CRITICAL_LABEL = "peakpack.critical"


def _congestion_name(value: str) -> str:
    """A name the kernel could know (TCP_CA_NAME_MAX is 16 with its NUL), or "" for the node's own."""
    if not re.fullmatch(r"[a-z0-9_]{0,15}", value):
        raise ValueError("must be a TCP congestion control's name as the kernel spells it (lower-case letters, "
                         "digits and '_', at most 15: e.g. cubic, reno, bbr) or \"\" for each node's own")
    return value


@dataclass(frozen=True)
class MigrationSettings:
    """How a live migration runs (inventory `[migration]`; docs/migration.md, "The transaction").

    Memory goes straight to a CRIU page server on the target while Docker keeps owning the
    container; the source stays dumped and stopped, intact, until the target has run for
    `grace_seconds`, and any failure before that resumes it in place.
    """

    #: how long the target must run before the source's stopped copy is removed: an application
    #: that dies on its closed connections right after the restore is resumed on the source
    #: instead of having lost its memory
    __pydantic_config__: ClassVar[ConfigDict] = CHECKED

    grace_seconds: Annotated[float, within(Bounds(0, 86400, "s"))] = 5.0
    #: post-copy (off by default): the target is restored before its memory arrives and fetches
    #: its pages from the stopped source while it runs, so the frozen time stops growing with
    #: memory. The risk: from the restore until the last page has arrived the container's memory
    #: is split over two nodes. A failure of either node or of the link between them then rolls
    #: the container back to the source, and whatever it did on the target meanwhile (writes it
    #: acknowledged to clients) is lost; if the source itself is lost in that window, the
    #: container is lost. Containers labelled `peakpack.critical=true` never migrate this way.
    post_copy: bool = False
    #: a dump still running (post-copy: pages still being served) after this many seconds plus one
    #: per 20 MB of the container's memory is aborted on the source, which CRIU then resumes; a
    #: network partition would otherwise stall it for good (CRIU's transfer has no timeout)
    dump_timeout_seconds: Annotated[float, within(Bounds(0, 86400, "s", lo_open=True))] = 60.0
    #: page servers listen on the target on a port from `page_server_port` up to
    #: `page_server_port + page_server_ports - 1`: nodes must reach each other on these
    page_server_port: Annotated[int, within(Bounds(1024, 65535, integer=True))] = 27000
    page_server_ports: Annotated[int, within(Bounds(1, 64512, integer=True))] = 1000
    #: a command run on the head node (`sh -c`, in the inventory's folder) after every settled
    #: migration, with a JSON document on its standard input saying the container, the nodes, its
    #: addresses and ports before and after, and how it ended, so the load balancer, DNS or service
    #: registry in front of the nodes follows it; "" runs nothing (docs/migration.md, "Telling the
    #: network's other parts")
    on_moved: Annotated[str, Field(max_length=4096)] = ""
    #: the command is killed after this long; a hook that fails or hangs never undoes a migration
    on_moved_timeout_seconds: Annotated[float, within(inputs.HOOK_SECONDS)] = 30.0
    #: a migration's lease on each of its nodes (`/etc/criu/peakpack.lock`, with the store's fencing
    #: token) and the QoS guards' hold on its container last this long unless renewed; they are
    #: renewed every sixth of it while the migration runs and at every settling round, and released
    #: once it is settled. A lease past its expiry is stale: its controller died or lost its way
    lease_seconds: Annotated[float, within(inputs.LEASE_SECONDS)] = 900.0
    #: TLS on every page stream (migrate/tls.py): a cluster CA kept in `tls_dir` issues each node a
    #: certificate; false sends a container's memory in clear to whoever listens on the path
    #: (docs/migration.md, "Threat model")
    tls: bool = True
    #: where the cluster CA's key and certificate live; None: `tls/` beside the inventory file (or
    #: in the user's data folder without one: `migrate.tls.ca_folder`)
    tls_dir: Path | None = None
    #: the TCP congestion control of the page streams' connections (CRIU's --tcp-congestion, which
    #: scripts/criu-patches/0004 adds): BBR, a common default, has TCP pace every packet with a timer
    #: of its own where no fq qdisc is on the way, which on virtual machines made a 1 GB TLS page
    #: stream take 1.6x as long (docs/migration.md, "Where the freeze's seconds go"); "" keeps each
    #: node's own. A node whose kernel lacks it is refused at preflight; where a node's CRIU lacks
    #: the option the streams keep the nodes' own, and the migration's journal says so
    page_stream_congestion: Annotated[str, AfterValidator(_congestion_name)] = "cubic"

    def __post_init__(self) -> None:
        if self.page_server_port + self.page_server_ports - 1 > 65535:
            raise ValueError(f"page_server_port + page_server_ports goes past 65535 ({self.page_server_port} + "
                             f"{self.page_server_ports}); lower one of them")

    @property
    def renew_every_s(self) -> float:
        return self.lease_seconds / 6

    def dump_deadline_s(self, memory_mb: float) -> float:
        """Seconds a dump of `memory_mb` may take before it is aborted."""
        return self.dump_timeout_seconds + memory_mb / 20.0


@dataclass(frozen=True)
class RemoteSettings:
    """How peakpack reaches its nodes, over SSH and the Engine API (inventory `[remote]`).

    A node that stops answering (partitioned, powered off, hung) is only found by a timeout: a
    connection is given up after `connect_timeout_seconds`, tried `connect_attempts` times; an
    open one once it has gone `3 x keepalive_seconds` without an answer (SSH keepalives on the
    command connection; keepalives and TCP_USER_TIMEOUT on the Engine API's). The defaults suit
    a real network; a lab on one host's loopback sets seconds (`peakpack lab up` does).
    """

    __pydantic_config__: ClassVar[ConfigDict] = CHECKED

    connect_timeout_seconds: Annotated[float, within(inputs.REMOTE_SECONDS)] = 10.0
    connect_attempts: Annotated[int, within(inputs.CONNECT_ATTEMPTS)] = 3
    keepalive_seconds: Annotated[float, within(inputs.REMOTE_SECONDS)] = 5.0

    @property
    def dead_after_seconds(self) -> float:
        """How long an open connection may go without an answer before it counts as lost."""
        return KEEPALIVES_MISSED * self.keepalive_seconds


#: keepalives in a row without an answer after which a connection counts as lost
KEEPALIVES_MISSED = 3
