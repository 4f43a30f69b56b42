"""The migration-aware start for the search: repair the current placement, then drain nodes.

1. Repair: containers on a node they may not use, and the cheapest-to-move containers of each
   over-cap node, are re-placed (largest first) on the powered node where they cost least; when
   none fits, the most efficient node that can be woken is switched on.
2. Consolidate: try to empty powered nodes, least utilised first, into the others; keep a drain
   only if the objective falls (idle power saved > moves paid + power/contention/affinity added).
   So nothing moves unless a node can be emptied profitably: zero churn on a good placement.
3. Untangle: move devils off nodes where they share, and members of split groups, wherever
   the move alone lowers the objective (the pair or the span saved pays for the migration).
4. Join: for pairs of talking containers on different nodes, heaviest first, move one onto the
   other's node, or both onto a third with room, where that lowers the objective (the traffic
   saved pays for the moves).

Every decision is priced with `Packing.move_delta`, i.e. in the objective's own terms, and
steps 2-3 keep within the disruption budget (`Packing.within_budget`).
"""

from __future__ import annotations

import math
import time

import numpy as np

from .instance import TINY
from .packing import Packing

#: Tie-break between equally priced targets: prefer the node with the most room left (worst
#: fit), worth < 1 W. A node filled to its cap must evict at the next rise of its forecast;
#: spreading the slack cut migrations by 27% at the same energy in the simulator (docs/planner.md).
ROOM_W = 0.5


def pick_target(pack: Packing, c: int, mask: np.ndarray) -> tuple[int, float] | None:
    """The cheapest node in `mask` for c, with the objective change of moving there."""
    targets = np.flatnonzero(mask)
    if len(targets) == 0:
        return None
    inst = pack.inst
    delta = pack.move_delta(c, targets)
    spare = (inst.cpu_cap[targets] - pack.load[targets] - inst.cpu[c]) / inst.cpu_cap[targets]
    best = int(np.argmin(delta - ROOM_W * spare))
    return int(targets[best]), float(delta[best])


def wake_target(pack: Packing, c: int) -> int | None:
    """The most efficient switched-off node that c may use and fits on empty."""
    inst = pack.inst
    for n in inst.efficiency_order:
        if not pack.on[n] and inst.allowed(c)[n] and inst.fits(inst.cpu[c], inst.mem[c], n):
            return int(n)
    return None


def evictions(pack: Packing, n: int) -> list[int]:
    """Containers to take off over-cap node n: cheapest migration per CPU freed first (among
    those that would fit some other node when empty), then any that still fit are put back
    (so we do not move more than the cap requires)."""
    inst = pack.inst
    others = np.arange(inst.n_nodes) != n
    movable = [
        c
        for c in pack.members[n]
        if (inst.allowed(c) & others & inst.fits(inst.cpu[c], inst.mem[c])).any()
    ]
    members = sorted(movable, key=lambda c: (inst.mig_cost[c] / max(inst.cpu[c], TINY), c))
    cpu, mem = pack.load[n], pack.mem[n]
    out: list[int] = []
    for c in members:
        if inst.fits(cpu, mem, n):
            break
        out.append(c)
        cpu -= inst.cpu[c]
        mem -= inst.mem[c]
    for c in sorted(out, key=lambda c: -inst.mig_cost[c]):
        if inst.fits(cpu + inst.cpu[c], mem + inst.mem[c], n):
            out.remove(c)
            cpu += inst.cpu[c]
            mem += inst.mem[c]
    return out


def repair(pack: Packing) -> None:
    """Make the placement feasible as far as single moves can; a container that fits nowhere
    stays where it is (the search then tries to make room for it with CP-SAT)."""
    inst = pack.inst
    pool = pack.misplaced()
    for n in np.flatnonzero(pack.over_cap()):
        pool += [c for c in evictions(pack, int(n)) if c not in pool]
    for c in sorted(pool, key=lambda c: (-inst.cpu[c], -inst.mem[c], c)):
        mask = pack.fits(c)
        mask[pack.assign[c]] = False
        choice = pick_target(pack, c, mask)
        if choice is not None:
            pack.move(c, choice[0])
            continue
        woken = wake_target(pack, c)
        if woken is not None:
            pack.on[woken] = True
            pack.move(c, woken)


def try_drain(pack: Packing, s: int) -> bool:
    """Empty node s into the other powered nodes and switch it off, if that lowers the objective.
    Given up as soon as what the moves left could save at most cannot bring the total below 0
    (`_least_left`, exact: it only spares pricing a drain that cannot pay)."""
    inst = pack.inst
    members = sorted(pack.members[s], key=lambda c: (-inst.cpu[c], -inst.mem[c], c))
    moves, others = _least_left(pack, s, members)
    # Cheap refusal: the moves alone (their migrations, less the traffic they could join) would
    # cost more than everything s draws.
    if moves[0] >= inst.power1(s, pack.load[s]):
        return False
    total = -float(inst.watts[s, 0])  # idle power saved once s is empty and off
    done: list[int] = []
    for k, c in enumerate(members):
        mask = pack.fits(c)
        mask[s] = False
        choice = pick_target(pack, c, mask)
        if choice is None:
            break
        pack.move(c, choice[0])
        total += choice[1]
        done.append(c)
        shed = inst.power1(s, pack.load[s]) - float(inst.watts[s, 0])  # what s still draws above idle
        if total + moves[k + 1] + others[k + 1] - shed >= 0:
            break  # even the best rest of the drain would not pay
    if len(done) == len(members) and total < -1e-9:
        pack.on[s] = False
        if pack.within_budget():
            return True
        pack.on[s] = True
    for c in reversed(done):
        pack.move(c, s)
    return False


def _least_left(pack: Packing, s: int, members: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """For each k, lower bounds on what moving members[k:] off s changes in the objective besides
    the power s sheds: their migrations (paid, or got back for a container returning home) less
    the weight of their traffic pairs; and what they could shed in devil pairs on s and group
    spans. A target's power only grows."""
    inst, w = pack.inst, pack.inst.problem.weights
    cs = np.array(members, dtype=np.int64)
    moves = np.where(inst.orig[cs] == s, inst.mig_cost[cs], -inst.mig_cost[cs]) - inst.graph.incident[cs]
    others = -(inst.devil[cs] * w.contention_w * max(int(pack.devils[s]) - 1, 0)
               + (inst.group[cs] >= 0) * w.affinity_w)

    def suffix(x: np.ndarray) -> np.ndarray:
        return np.concatenate([np.cumsum(x[::-1])[::-1], [0.0]])

    return suffix(moves), suffix(others)


def consolidate(pack: Packing, candidates: np.ndarray | None = None, passes: int = 3) -> int:
    """Drain nodes, least utilised first, until a pass empties none; returns nodes emptied."""
    inst = pack.inst
    emptied = 0
    for _ in range(passes):
        mask = pack.on & inst.can_off & ~pack.over_cap()
        if candidates is not None:
            mask &= candidates
        nodes = np.flatnonzero(mask)
        order = nodes[np.lexsort((nodes, pack.load[nodes] / inst.cpu_cap[nodes]))]
        before = emptied
        for s in order:
            if pack.on[s] and try_drain(pack, int(s)):
                emptied += 1
        if emptied == before:
            break
    return emptied


def untangle(pack: Packing) -> int:
    """Improving moves for devils that share a node and members of split groups: a single move
    where one pays, else (devils) a swap with a turtle on a node with fewer devils."""
    inst = pack.inst
    w = inst.problem.weights
    moved = 0
    for _ in range(3):
        before = moved
        tangled: list[int] = []
        if w.contention_w > 0:
            for n in np.flatnonzero(pack.devils >= 2):
                tangled += [c for c in pack.members[n] if inst.devil[c]]
        if w.affinity_w > 0:
            for g, nodes in pack.groups.items():
                if len(nodes) > 1:
                    tangled += np.flatnonzero(inst.group == g).tolist()
        for c in sorted(set(tangled)):
            mask = pack.fits(c)
            mask[pack.assign[c]] = False
            choice = pick_target(pack, c, mask)
            if choice is not None and choice[1] < -1e-9:
                home = int(pack.assign[c])
                pack.move(c, choice[0])
                if pack.within_budget():
                    moved += 1
                else:
                    pack.move(c, home)
            elif inst.devil[c] and pack.devils[pack.assign[c]] >= 3:
                moved += 2 * swap_devil(pack, c)
        if moved == before:
            break
    return moved


#: Nodes a devil swap looks at (those with the fewest devils): enough to find room, cheap.
SWAP_CANDIDATES = 24


def swap_devil(pack: Packing, d: int) -> bool:
    """Swap devil d with a turtle of similar size on a node with at least two fewer devils,
    if both fit afterwards and the objective falls."""
    inst = pack.inst
    a = int(pack.assign[d])
    cand = np.flatnonzero(pack.on & inst.allowed(d) & (pack.devils <= pack.devils[a] - 2))
    if len(cand) == 0:
        return False
    cand = cand[np.argsort(pack.devils[cand], kind="stable")[:SWAP_CANDIDATES]]
    a_cpu, a_mem = pack.load[a] - inst.cpu[d], pack.mem[a] - inst.mem[d]  # a without d
    best: tuple[float, int, int] | None = None
    for b in cand.tolist():
        b_cpu, b_mem = pack.load[b] + inst.cpu[d], pack.mem[b] + inst.mem[d]  # b with d
        for t in pack.members[b]:
            if (
                inst.devil[t]
                or not inst.fits(a_cpu + inst.cpu[t], a_mem + inst.mem[t], a)
                or not inst.fits(b_cpu - inst.cpu[t], b_mem - inst.mem[t], b)
                or not inst.allowed(t)[a]
            ):
                continue
            first = float(pack.move_delta(d, np.array([b]))[0])
            pack.move(d, b)
            total = first + float(pack.move_delta(t, np.array([a]))[0])
            pack.move(d, a)
            if total < -1e-9 and (best is None or total < best[0]):
                best = (total, b, t)
    if best is None:
        return False
    _, b, t = best
    pack.move(d, b)
    pack.move(t, a)
    if pack.within_budget():
        return True
    pack.move(t, b)
    pack.move(d, a)
    return False


def join(pack: Packing, deadline: float = math.inf) -> int:
    """Join split pairs, heaviest first, within the budget: move one end onto the other's node,
    or both onto a third node with room for the two, whichever lowers the objective most (a move
    kept only if the objective falls). Only pairs that weigh more than moving their cheaper end
    are tried; lighter ones rarely pay alone (LNS may still join them with others). Stops at
    `deadline` (time.perf_counter)."""
    inst = pack.inst
    graph = inst.graph
    if not graph.edges:
        return 0
    worth = graph.w > np.minimum(inst.mig_cost[graph.a], inst.mig_cost[graph.b])
    split = np.flatnonzero((pack.assign[graph.a] != pack.assign[graph.b]) & worth)
    moved = 0
    for k in split[np.argsort(-graph.w[split], kind="stable")].tolist():
        a, b = int(graph.a[k]), int(graph.b[k])
        if pack.assign[a] == pack.assign[b]:
            continue
        if time.perf_counter() >= deadline:
            break
        best = _best_join(pack, a, b, float(graph.w[k]))
        if best is None:
            continue
        before = {c: int(pack.assign[c]) for c, _ in best}
        for c, t in best:
            pack.move(c, t)
        if pack.within_budget():
            moved += len(best)
        else:
            for c, home in before.items():
                pack.move(c, home)
    return moved


def _best_join(pack: Packing, a: int, b: int, weight: float) -> list[tuple[int, int]] | None:
    """The moves that join a and b at the lowest objective, if it falls: one onto the other's
    node (where it fits, or by a swap with one of that node's containers), or both onto the
    powered node with room for both that prices lowest. The pair's own weight counts once when
    both move (each move alone leaves it split)."""
    inst = pack.inst
    options: list[tuple[float, list[tuple[int, int]]]] = []
    for c, t in ((a, int(pack.assign[b])), (b, int(pack.assign[a]))):
        target = np.array([t])
        if pack.fits(c, target)[0]:
            options.append((float(pack.move_delta(c, target)[0]), [(c, t)]))
        else:
            options += _swaps(pack, c, t, partner=b if c == a else a)
    both = np.flatnonzero(pack.on & inst.allowed(a) & inst.allowed(b) & inst.fits(
        pack.load + inst.cpu[a] + inst.cpu[b], pack.mem + inst.mem[a] + inst.mem[b]))
    both = both[(both != pack.assign[a]) & (both != pack.assign[b])]
    if len(both):
        third = int(both[int(np.argmin(pack.move_delta(a, both) + pack.move_delta(b, both) - weight))])
        options.append(_price(pack, [(a, third), (b, third)]))
    best = min(options, key=lambda o: o[0], default=None)
    return best[1] if best is not None and best[0] < -1e-9 else None


#: containers of the partner's node a join tries to swap out (the cheapest to move that fit)
SWAP_TRIES = 3


def _swaps(pack: Packing, c: int, t: int, partner: int) -> list[tuple[float, list[tuple[int, int]]]]:
    """c onto node t, which has no room for it, in exchange for one of t's containers (not its
    partner) that then goes to c's node: both nodes stay within their caps."""
    inst = pack.inst
    s = int(pack.assign[c])
    xs = np.array([x for x in pack.members[t] if x != partner and inst.allowed(x)[s]], dtype=np.int64)
    if len(xs) == 0 or not inst.allowed(c)[t]:
        return []
    ok = (inst.fits(pack.load[t] - inst.cpu[xs] + inst.cpu[c], pack.mem[t] - inst.mem[xs] + inst.mem[c], t)
          & inst.fits(pack.load[s] + inst.cpu[xs] - inst.cpu[c], pack.mem[s] + inst.mem[xs] - inst.mem[c], s))
    xs = xs[ok]
    return [_price(pack, [(int(x), s), (c, t)]) for x in xs[np.argsort(inst.mig_cost[xs], kind="stable")][:SWAP_TRIES]]


def _price(pack: Packing, moves: list[tuple[int, int]]) -> tuple[float, list[tuple[int, int]]]:
    """The objective change of `moves` made in order (each priced after the ones before), and
    the moves; `pack` is left as it was."""
    homes = [(c, int(pack.assign[c])) for c, _ in moves]
    total = 0.0
    for c, t in moves:
        total += float(pack.move_delta(c, np.array([t]))[0])
        pack.move(c, t)
    for c, home in reversed(homes):
        pack.move(c, home)
    return total, moves


def start(pack: Packing, deadline: float = math.inf) -> None:
    """The search's starting point: repair, join, consolidate, untangle, join. Repair is not
    held to the migration budget (the cap comes first); what it spends counts against it. Pairs
    are joined before draining, while nodes still have room (a drain then prices the pairs it
    would split), and once more after, for what the drains made possible; joining stops at
    `deadline`."""
    repair(pack)
    if pack.migration_limit is not None:
        pack.migration_limit = max(pack.migration_limit, pack.migrations())
    join(pack, deadline)
    consolidate(pack)
    untangle(pack)
    join(pack, deadline)
