"""How an unfinished migration is settled, from facts only: what each node shows now (its copy of
the container running, stopped or absent; a complete checkpoint of this migration or not), or
that it does not answer (and whether its BMC confirms it is off, which fences it: nothing runs
on a node without power, and nothing there starts by itself because both copies carry restart
policy "no" until the migration ends).

`decide` is pure and is the whole policy; the handler's failure path and reconciliation (at
start, every epoch, `peakpack reconcile`) both observe the two nodes, ask `decide`, act, and
observe again until the migration is settled or has to wait. It keeps two invariants:
- at most one running copy: nothing is started while the other node might run one;
- the latest checkpointed state is never destroyed before a copy runs from it: a checkpoint
  goes only with a copy that no longer needs it (the source container after the target runs).
The transition table with the reason for each row is in docs/migration.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Copy(StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"   # exists, not running (created, checkpointed, or its node lost power)
    ABSENT = "absent"
    UNKNOWN = "unknown"   # the node does not answer


@dataclass(frozen=True)
class Side:
    """One node's facts about the migrating container."""

    node: str
    copy: Copy
    checkpoint: bool = False  # a complete checkpoint of this migration is on this node
    fenced: bool = False      # does not answer, but its BMC says it is off: nothing runs there
    #: why the copy is UNKNOWN, for the record: the node does not answer, or it answers but a
    #: checkpoint or restore of this container is still running there (its state is half-made)
    doubt: str = "does not answer"

    @property
    def known(self) -> bool:
        return self.copy is not Copy.UNKNOWN

    @property
    def may_run(self) -> bool:
        """Could a copy be running there right now?"""
        return self.copy is Copy.RUNNING or (self.copy is Copy.UNKNOWN and not self.fenced)


class Move(StrEnum):
    """What to do next; each member's docstring-comment says what it leads to."""

    WAIT = "wait"                          # IN_DOUBT: a fact that matters is unknown; change nothing
    FINISH = "finish"                      # target runs: remove the source copy and checkpoints
    DONE_FORWARD = "done_forward"          # target runs, source clean -> SUCCEEDED
    KEEP_SOURCE = "keep_source"            # source runs: remove the target copy
    DONE_BACK = "done_back"                # source runs, target clean -> FAILED / ROLLED_BACK
    RESTORE_SOURCE = "restore_source"      # nothing runs: restore the source from its checkpoint
    RESTORE_TARGET = "restore_target"      # nothing runs, the source is gone or fenced: restore the target
    START_SOURCE_FRESH = "start_source"    # nothing runs and no checkpoint exists: state is lost
    START_TARGET_FRESH = "start_target"    # likewise, the only copy left is the target's
    LOST = "lost"                          # no copy anywhere: an operator must look


@dataclass(frozen=True)
class Decision:
    move: Move
    why: str


def decide(src: Side, dst: Side) -> Decision:
    """The next step for a migration whose source and target show `src` and `dst`."""
    if dst.copy is Copy.RUNNING:
        if src.copy is Copy.ABSENT:
            return Decision(Move.DONE_FORWARD, f"runs on {dst.node}, nothing left on {src.node}")
        if not src.known:
            return Decision(Move.WAIT, f"runs on {dst.node}; its stopped copy on {src.node} goes when "
                                       f"{src.node} can be judged ({src.doubt})")
        return Decision(Move.FINISH, f"runs on {dst.node}")
    if src.copy is Copy.RUNNING:
        if dst.copy is Copy.ABSENT:
            return Decision(Move.DONE_BACK, f"runs on {src.node}, nothing left on {dst.node}")
        if dst.copy is Copy.UNKNOWN:
            return Decision(Move.WAIT, f"runs on {src.node}; {dst.node} {dst.doubt}"
                                       + (" (off)" if dst.fenced else ""))
        return Decision(Move.KEEP_SOURCE, f"runs on {src.node}")
    # nothing is known to run; starting anything needs both sides known or fenced
    for side in (src, dst):
        if side.may_run:
            return Decision(Move.WAIT, f"{side.node} {side.doubt}: a copy may run there")
    if src.copy is Copy.STOPPED and src.checkpoint:
        return Decision(Move.RESTORE_SOURCE, f"stopped on {src.node} with its checkpoint")
    if dst.copy is Copy.STOPPED and dst.checkpoint:
        return Decision(Move.RESTORE_TARGET, f"stopped on {dst.node} with the transferred checkpoint")
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
