"""peakpack's QoS guard: one per node, checking every second or two, and working on when the head
node or the network is gone. peakpack ships this package to each node over SSH as one archive,
`guard.pyz` (a zipapp of it and `orchestrator/domain/guard.py`, its settings: `qos/deploy.py` builds
it), and runs it as a systemd unit (in the lab: a detached process its boot hook restarts at every
power on); it needs nothing but Python >= 3.9's standard library, the local Docker engine's
socket, cgroupfs and /proc.

Containers are latency-sensitive (label `peakpack.qos=ls`, the default) or best-effort
(`peakpack.qos=be`). The guard

- gives best-effort containers the lowest CPU weight and makes them the OOM killer's first choice
  as soon as it sees them (so the kernel favours the others with no loop running);
- caps best-effort CPU, Koordinator-style, once the node's CPU use passes a watermark or a
  latency-sensitive container stalls (PSI cpu `some`, else run-queue wait) while best-effort
  containers are busy, for `breaches_to_act` checks in a row: they may use
  `capacity x be_share - latency-sensitive use` (at least `capacity x be_floor`), written as each
  container's own CFS quota (never `docker update`: nothing travels with a migrated container's
  HostConfig) and, on a node with more than one CPU, kept off at least one of its CPUs
  (Koordinator's cpuset policy: a latency-sensitive container that wakes finds a CPU no
  best-effort one holds); the cap comes back one step per clear check after `clears_to_restore` clear ones,
  and is lifted once best-effort no longer presses against it or no latency-sensitive container
  is left;
- stops the lowest-priority, largest best-effort container when the node's available memory falls
  under a watermark, or its memory.pressure `full` stays up (never a latency-sensitive one);
- never touches a container a migration holds (`STATE_DIR/holds/NAME`, written by the migrator);
- writes every action as one JSON line to `STATE_DIR/events.jsonl` (the controller reads them at
  its next observation) and its current view to `STATE_DIR/state.json`.

The decisions (`decide.py`: `CpuSuppress`, `MemoryGuard`, `split_quota`, `choose_victims`; the
parsers, `parse.py`) are pure functions of what was sampled, tested without a node; `node.py`,
`engine.py`, `events.py` and `loop.py` read and write the node. Commands (`commands.py`): run
(foreground, for systemd), start (detached), stop, status, report.
"""

#: bump when events.jsonl, state.json or `report` change shape
PROTOCOL = 1
DEFAULT_STATE_DIR = "/var/lib/peakpack/qos"
PERIOD_US = 100_000
QOS_LABEL = "peakpack.qos"
PRIORITY_LABEL = "peakpack.priority"
QOS_CLASSES = ("ls", "be")
