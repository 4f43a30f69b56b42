"""How an unfinished migration is settled, from facts only: what each node shows now of the
container (running; dumped by CRIU and left stopped, intact; restored post-copy but cut off from
part of its memory; stopped; absent), what of this migration's checkpoint it holds (the metadata
of a finished dump on the source, the pages a dump sent to the target, or everything a restore
reads), or that it does not answer (and whether its BMC confirms it is off, which fences it:
nothing runs on a node without power, and nothing there starts by itself because both copies
carry restart policy "no" until the migration ends).

`decide` is pure and is the whole policy; the transaction's way out (success and failure alike)
and reconciliation (at start, every epoch, `peakpack reconcile`) both observe the two nodes, ask
`decide`, act, and observe again until the migration is settled or has to wait. It keeps two
invariants:
- at most one running copy: nothing is started or resumed while the other node might run one;
- the container's state is never destroyed before a copy runs from it: the source, dumped and
  left stopped, is removed only once the target has run for the grace period and answers on the
  published ports that answered before the migration, and a failure before that resumes it in
  place.
The transition table with the reason for each row is in docs/migration.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Copy(StrEnum):
    RUNNING = "running"
    DUMPED = "dumped"     # dumped by CRIU and left stopped, its network locked: intact, resumable in place
    PARTIAL = "partial"   # restored post-copy, but the page transfer ended early: its memory has holes
    STOPPED = "stopped"   # exists, not running (created, exited, or its node lost power)
    ABSENT = "absent"
    UNKNOWN = "unknown"   # the node does not answer, or something of this migration still runs there


class Images(StrEnum):
    """What of this migration's checkpoint a node holds."""

    NONE = "none"
    DUMP = "dump"          # the metadata of a finished dump (the source's half; its pages went to the target)
    PAGES = "pages"        # pages a dump sent here, without the metadata yet (the target's half)
    COMPLETE = "complete"  # all a restore reads (the target once the metadata was transferred)


@dataclass(frozen=True)
class Side:
    """One node's facts about the migrating container."""

    node: str
    copy: Copy
    images: Images = Images.NONE
    fenced: bool = False      # does not answer, but its BMC says it is off: nothing runs there
    #: why the copy is UNKNOWN, for the record: the node does not answer, or it answers but a
    #: checkpoint, restore or page transfer of this container is still running there
    doubt: str = "does not answer"
    #: how long a RUNNING copy has run, by its node's clock
    running_s: float = 0.0
    #: a RUNNING copy accepts connections on the published ports that answered on the source
    #: before the migration (always True for a container that publishes none)
    answers: bool = True
    #: this migration's lock, runc.conf block or CRIU daemon is on the node: settling removes them
    #: from every node that answers and runs nothing of the migration (`decide` does not read it)
    armed: bool = False

    @property
    def known(self) -> bool:
        return self.copy is not Copy.UNKNOWN

    @property
    def may_run(self) -> bool:
        """Could a copy be running there right now?"""
        return self.copy in (Copy.RUNNING, Copy.PARTIAL) or (self.copy is Copy.UNKNOWN and not self.fenced)


class Move(StrEnum):
    """What to do next; each member's comment says what it leads to."""

    WAIT = "wait"                          # IN_DOUBT: a fact that matters is unknown; change nothing
    SOAK = "soak"                          # the target runs, not yet for the grace period: look again then
    FINISH = "finish"                      # target runs: remove the source copy
    DONE_FORWARD = "done_forward"          # target runs, source clean -> SUCCEEDED
    REMOVE_TARGET = "remove_target"        # the source runs or holds the state: remove the target copy
    DONE_BACK = "done_back"                # source runs, target clean -> FAILED / ROLLED_BACK
    RESUME_SOURCE = "resume_source"        # the source is dumped and stopped, nothing else runs: resume it
    COMPLETE_TRANSFER = "complete_transfer"  # the source died after its dump: its metadata to the target
    RESTORE_TARGET = "restore_target"      # nothing runs, the target holds a complete checkpoint: restore it
    START_SOURCE_FRESH = "start_source"    # nothing runs and no checkpoint exists: state is lost
    START_TARGET_FRESH = "start_target"    # likewise, the only copy left is the target's
    LOST = "lost"                          # no copy can be run: an operator must look


@dataclass(frozen=True)
class Decision:
    move: Move
    why: str


def decide(src: Side, dst: Side, grace_s: float = 0.0) -> Decision:
    """The next step for a migration whose source and target show `src` and `dst`; the target
    must have run `grace_s` before the source's dumped copy, which could still resume, goes."""
    if dst.copy is Copy.RUNNING:
        if src.copy is Copy.ABSENT:
            return Decision(Move.DONE_FORWARD, f"runs on {dst.node}, nothing left on {src.node}")
        if not src.known:
            return Decision(Move.WAIT, f"runs on {dst.node}; its stopped copy on {src.node} goes when "
                                       f"{src.node} can be judged ({src.doubt})")
        if src.copy is Copy.DUMPED and dst.running_s < grace_s:
            return Decision(Move.SOAK, f"runs on {dst.node} for {dst.running_s:.1f} s; the stopped copy on "
                                       f"{src.node} is kept until it has run {grace_s:g} s")
        if src.copy is Copy.DUMPED and not dst.answers:
            return Decision(Move.REMOVE_TARGET, f"runs on {dst.node} but does not answer on the ports it answered "
                                                f"on before; {src.node} still holds it, dumped and stopped")
        return Decision(Move.FINISH, f"runs on {dst.node}")
    if dst.copy is Copy.PARTIAL:
        if src.copy in (Copy.DUMPED, Copy.RUNNING):
            return Decision(Move.REMOVE_TARGET, f"post-copy to {dst.node} ended before every page arrived; "
                                                f"{src.node} still holds all of its memory")
        if src.copy is Copy.UNKNOWN and not src.fenced:
            return Decision(Move.WAIT, f"post-copy to {dst.node} ended before every page arrived; {src.node}, "
                                       f"which holds the rest of its memory, {src.doubt}")
        return Decision(Move.LOST, f"post-copy to {dst.node} ended before every page arrived and the copy on "
                                   f"{src.node} that held the rest of its memory is gone; the copy on {dst.node} "
                                   "runs without those pages")
    if dst.copy is Copy.DUMPED:  # a migration never dumps its target: someone else did; keep it as it is
        return Decision(Move.WAIT, f"{dst.node} shows a copy a CRIU dump left stopped, which this migration "
                                   "never makes there: an operator must look (resume or remove it)")
    if src.copy is Copy.RUNNING:
        if dst.copy is Copy.ABSENT:
            return Decision(Move.DONE_BACK, f"runs on {src.node}, nothing left on {dst.node}")
        if dst.copy is Copy.UNKNOWN:
            return Decision(Move.WAIT, f"runs on {src.node}; {dst.node} {dst.doubt}"
                                       + (" (off)" if dst.fenced else ""))
        return Decision(Move.REMOVE_TARGET, f"runs on {src.node}")
    if src.copy is Copy.DUMPED:
        if dst.may_run:
            return Decision(Move.WAIT, f"dumped and stopped on {src.node}; {dst.node} {dst.doubt}: a copy may "
                                       "run there")
        return Decision(Move.RESUME_SOURCE, f"dumped and stopped on {src.node}, intact; not running on {dst.node}"
                                            + (" (off)" if dst.fenced else ""))
    # the source's memory is gone (stopped, absent) or unknown; nothing is known to run
    for side in (src, dst):
        if side.may_run:
            return Decision(Move.WAIT, f"{side.node} {side.doubt}: a copy may run there")
    if dst.copy is Copy.STOPPED and dst.images is Images.COMPLETE:
        return Decision(Move.RESTORE_TARGET, f"stopped on {dst.node} with the transferred checkpoint")
    if dst.copy is Copy.STOPPED and dst.images is Images.PAGES and src.copy is Copy.STOPPED \
            and src.images is Images.DUMP:
        return Decision(Move.COMPLETE_TRANSFER, f"{src.node} stopped after its dump: the dump's metadata goes to "
                                                f"{dst.node}, which holds its pages")
    for side in (src, dst):
        if side.fenced:
            return Decision(Move.WAIT, f"{side.node} is off and its disk may hold the checkpoint: power it on "
                                       "(the controller wakes a power-managed node that is not quarantined)")
    if src.copy is Copy.STOPPED:
        return Decision(Move.START_SOURCE_FRESH, f"stopped on {src.node} and no checkpoint survives: "
                                                 "started fresh, its memory state is lost")
    if dst.copy is Copy.STOPPED:
        return Decision(Move.START_TARGET_FRESH, f"stopped on {dst.node} and no checkpoint survives: "
                                                 "started fresh, its memory state is lost")
    return Decision(Move.LOST, f"on neither {src.node} nor {dst.node}")
