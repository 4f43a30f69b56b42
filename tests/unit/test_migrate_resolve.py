"""The settling policy, row by row (docs/migration.md's transition table): what happens to a
migration given what its two nodes show. Pure: the real nodes are exercised by the fault
injection tests in tests/integration."""

from __future__ import annotations

import itertools

import pytest

from peakpack.migrate.resolve import Copy, Move, Side, decide

R, S, A, U = Copy.RUNNING, Copy.STOPPED, Copy.ABSENT, Copy.UNKNOWN


def src(copy: Copy, checkpoint: bool = False, fenced: bool = False) -> Side:
    return Side("node-1", copy, checkpoint, fenced)


def dst(copy: Copy, checkpoint: bool = False, fenced: bool = False) -> Side:
    return Side("node-2", copy, checkpoint, fenced)


@pytest.mark.parametrize("s, d, move", [
    # the target runs: finish forward, removing the source copy once the source answers
    (src(S, True), dst(R), Move.FINISH),
    (src(A), dst(R), Move.DONE_FORWARD),
    (src(U), dst(R), Move.WAIT),
    (src(U, fenced=True), dst(R), Move.WAIT),   # off: its copy stays until it boots
    # the source runs: the target copy goes, unless the target might run one too
    (src(R), dst(S, True), Move.KEEP_SOURCE),
    (src(R), dst(A), Move.DONE_BACK),
    (src(R), dst(U), Move.WAIT),
    (src(R), dst(U, fenced=True), Move.WAIT),
    # nothing runs: restore from a checkpoint, the source's first
    (src(S, True), dst(S, True), Move.RESTORE_SOURCE),
    (src(S, True), dst(A), Move.RESTORE_SOURCE),
    (src(S, True), dst(U, fenced=True), Move.RESTORE_SOURCE),  # the target is off: nothing runs there
    (src(A), dst(S, True), Move.RESTORE_TARGET),
    (src(S), dst(S, True), Move.RESTORE_TARGET),  # the source has no checkpoint: the transferred one is the state
    (src(U, fenced=True), dst(S, True), Move.RESTORE_TARGET),  # the source died after the transfer
    # a node that may run a copy blocks every start
    (src(S, True), dst(U), Move.WAIT),
    (src(U), dst(S, True), Move.WAIT),
    # no checkpoint anywhere, but the node that may hold one is off: wait for it
    (src(U, fenced=True), dst(S), Move.WAIT),
    # no checkpoint can come back: start the stopped copy, its memory state is lost
    (src(S), dst(S), Move.START_SOURCE_FRESH),
    (src(A), dst(S), Move.START_TARGET_FRESH),
    (src(A), dst(A), Move.LOST),
])
def test_transition_table(s: Side, d: Side, move: Move) -> None:
    assert decide(s, d).move is move


SIDES = [Side(n, c, cp, f) for n in ("a",) for c in Copy for cp in (False, True) for f in (False, True)
         if not (f and c is not Copy.UNKNOWN) and not (cp and c in (Copy.ABSENT, Copy.UNKNOWN))]


@pytest.mark.parametrize("s, d", list(itertools.product(SIDES, SIDES)))
def test_nothing_starts_while_another_copy_may_run(s: Side, d: Side) -> None:
    s, d = Side("node-1", s.copy, s.checkpoint, s.fenced), Side("node-2", d.copy, d.checkpoint, d.fenced)
    move = decide(s, d).move
    starts_source = move in (Move.RESTORE_SOURCE, Move.START_SOURCE_FRESH)
    starts_target = move in (Move.RESTORE_TARGET, Move.START_TARGET_FRESH)
    if starts_source:
        assert not d.may_run and s.copy is Copy.STOPPED
    if starts_target:
        assert not s.may_run and d.copy is Copy.STOPPED
    if move is Move.START_SOURCE_FRESH or move is Move.START_TARGET_FRESH:
        assert not (s.checkpoint or d.checkpoint or s.fenced or d.fenced)  # a checkpoint could still come back
    if move in (Move.FINISH, Move.KEEP_SOURCE):  # removing a copy: the other one runs
        assert (d if move is Move.FINISH else s).copy is Copy.RUNNING


def test_a_node_busy_with_a_checkpoint_or_restore_is_waited_for_with_the_reason() -> None:
    busy = Side("node-2", Copy.UNKNOWN, doubt="still runs `docker start --checkpoint peakpack-3 web`")
    d = decide(src(S, True), busy)  # restoring the source now could make two copies
    assert d.move is Move.WAIT and "node-2 still runs `docker start --checkpoint" in d.why


def test_waiting_for_an_off_node_says_how_it_ends() -> None:
    d = decide(src(U, fenced=True), dst(S))
    assert d.move is Move.WAIT and "power it on" in d.why
