"""The settling policy, row by row (docs/migration.md's transition table): what happens to a
migration given what its two nodes show. Pure: the real nodes are exercised by the fault
injection tests in tests/integration."""

from __future__ import annotations

import itertools

import pytest

from peakpack.migrate.resolve import Copy, Images, Move, Side, decide

R, D, P, S, A, U = Copy.RUNNING, Copy.DUMPED, Copy.PARTIAL, Copy.STOPPED, Copy.ABSENT, Copy.UNKNOWN
NO, DUMP, PAGES, ALL = Images.NONE, Images.DUMP, Images.PAGES, Images.COMPLETE
GRACE = 5.0


def src(copy: Copy, images: Images = NO, fenced: bool = False) -> Side:
    return Side("node-1", copy, images, fenced)


def dst(copy: Copy, images: Images = NO, fenced: bool = False, running_s: float = 60.0, answers: bool = True) -> Side:
    return Side("node-2", copy, images, fenced, running_s=running_s, answers=answers)


@pytest.mark.parametrize("s, d, move", [
    # the target runs: finish forward, removing the source copy once the source answers
    (src(S, DUMP), dst(R), Move.FINISH),
    (src(A), dst(R), Move.DONE_FORWARD),
    (src(U), dst(R), Move.WAIT),
    (src(U, fenced=True), dst(R), Move.WAIT),   # off: its copy stays until it boots
    # source stopped (dumped), target running: removed once the target ran the grace period
    (src(D, DUMP), dst(R, running_s=GRACE), Move.FINISH),
    (src(D, DUMP), dst(R, running_s=1.0), Move.SOAK),
    # ... and answers on the ports that answered before; one that does not is removed, the source resumes
    (src(D, DUMP), dst(R, running_s=1.0, answers=False), Move.SOAK),
    (src(D, DUMP), dst(R, running_s=GRACE, answers=False), Move.REMOVE_TARGET),
    (src(A), dst(R, answers=False), Move.DONE_FORWARD),  # the source is gone already: nothing to go back to
    # the source runs: the target copy goes, unless the target might run one too
    (src(R), dst(S, ALL), Move.REMOVE_TARGET),
    (src(R), dst(A), Move.DONE_BACK),
    (src(R), dst(U), Move.WAIT),
    (src(R), dst(U, fenced=True), Move.WAIT),
    # source stopped (dumped), target not running: resume the source in place
    (src(D, DUMP), dst(S, PAGES), Move.RESUME_SOURCE),
    (src(D, DUMP), dst(S, ALL), Move.RESUME_SOURCE),   # resuming beats a restore: nothing moves
    (src(D), dst(A), Move.RESUME_SOURCE),
    (src(D, DUMP), dst(U, fenced=True), Move.RESUME_SOURCE),  # the target is off: nothing runs there
    # source stopped (dumped), target unknown: it may run there
    (src(D, DUMP), dst(U), Move.WAIT),
    # post-copy cut short: the target's memory has holes, the dumped source has it all
    (src(D, DUMP), dst(P), Move.REMOVE_TARGET),
    (src(R), dst(P), Move.REMOVE_TARGET),
    (src(U), dst(P), Move.WAIT),
    (src(U, fenced=True), dst(P), Move.LOST),
    (src(S), dst(P), Move.LOST),
    # the source's memory is gone: restore the target from a complete checkpoint
    (src(A), dst(S, ALL), Move.RESTORE_TARGET),
    (src(S), dst(S, ALL), Move.RESTORE_TARGET),
    (src(U, fenced=True), dst(S, ALL), Move.RESTORE_TARGET),  # the source died after the transfer
    # ... or first complete its transfer: the source died after its dump, before the metadata moved
    (src(S, DUMP), dst(S, PAGES), Move.COMPLETE_TRANSFER),
    (src(U, fenced=True), dst(S, PAGES), Move.WAIT),  # its disk holds the metadata: power it on
    # a node that may run a copy blocks every start
    (src(U), dst(S, ALL), Move.WAIT),
    (src(S, DUMP), dst(U), Move.WAIT),
    # no checkpoint anywhere, but the node that may hold one is off: wait for it
    (src(U, fenced=True), dst(S), Move.WAIT),
    # no checkpoint can come back: start the stopped copy, its memory state is lost
    (src(S), dst(S), Move.START_SOURCE_FRESH),
    (src(S), dst(S, PAGES), Move.START_SOURCE_FRESH),  # pages without a finished dump are no state
    (src(R), dst(D), Move.WAIT),  # dumped by someone else: never touched
    (src(A), dst(S), Move.START_TARGET_FRESH),
    (src(A), dst(A), Move.LOST),
])
def test_transition_table(s: Side, d: Side, move: Move) -> None:
    assert decide(s, d, GRACE).move is move


SIDES = [Side(n, c, i, f, running_s=t, answers=a) for n in ("a",) for c in Copy for i in Images for f in (False, True)
         for t in (0.0, 60.0) for a in (True, False)
         if not (f and c is not Copy.UNKNOWN) and not (i is not Images.NONE and c in (Copy.ABSENT, Copy.UNKNOWN))]


@pytest.mark.parametrize("s, d", list(itertools.product(SIDES, SIDES)))
def test_nothing_starts_while_another_copy_may_run(s: Side, d: Side) -> None:
    s = Side("node-1", s.copy, s.images, s.fenced, running_s=s.running_s)
    d = Side("node-2", d.copy, d.images, d.fenced, running_s=d.running_s, answers=d.answers)
    move = decide(s, d, GRACE).move
    if move in (Move.RESUME_SOURCE, Move.START_SOURCE_FRESH):
        assert not d.may_run and s.copy in (Copy.DUMPED, Copy.STOPPED)
    if move in (Move.RESTORE_TARGET, Move.START_TARGET_FRESH):
        assert not s.may_run and s.copy is not Copy.DUMPED and d.copy is Copy.STOPPED
    if move in (Move.START_SOURCE_FRESH, Move.START_TARGET_FRESH):  # a checkpoint could still come back
        assert not (s.copy is Copy.DUMPED or d.images is Images.COMPLETE or s.fenced or d.fenced)
        assert not (s.images is Images.DUMP and d.images is Images.PAGES)
    if move is Move.FINISH:  # removing the source: the target runs, and has for the grace period if
        assert d.copy is Copy.RUNNING  # the source could still resume
        assert s.copy is not Copy.DUMPED or d.running_s >= GRACE
    if move is Move.FINISH and s.copy is Copy.DUMPED:
        assert d.answers
    if move is Move.REMOVE_TARGET:  # removing the target: the source runs or holds the whole state, and
        assert s.copy in (Copy.RUNNING, Copy.DUMPED)  # a running target goes only if it stopped answering
        assert d.copy is not Copy.RUNNING or (s.copy is Copy.DUMPED and not d.answers and d.running_s >= GRACE)


def test_a_node_busy_with_a_checkpoint_or_restore_is_waited_for_with_the_reason() -> None:
    busy = Side("node-2", Copy.UNKNOWN, doubt="still runs `docker start --checkpoint peakpack-3 web`")
    d = decide(src(D, DUMP), busy)  # resuming the source now could make two copies
    assert d.move is Move.WAIT and "node-2 still runs `docker start --checkpoint" in d.why


def test_waiting_for_an_off_node_says_how_it_ends() -> None:
    d = decide(src(U, fenced=True), dst(S))
    assert d.move is Move.WAIT and "power it on" in d.why


def test_soaking_says_how_long_the_target_has_run() -> None:
    d = decide(src(D, DUMP), dst(R, running_s=1.25), GRACE)
    assert d.move is Move.SOAK and "1.2 s" in d.why and "5 s" in d.why
