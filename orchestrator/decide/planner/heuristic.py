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
5. Homecoming: a container the steps above moved whose own node still runs and has room goes
   back where that lowers the objective (its move bought a join or a drain that a later step
   undid, or its partner followed it home).

Every decision is priced with `Packing.move_delta`, i.e. in the objective's own terms, and
steps 2-3 keep within the disruption budget (`Packing.within_budget`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from .budget import Budget
from .graph import flat_ranges, sorted_unique, stable_order
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
    cap = inst.cpu_cap[targets]
    spare = (cap - pack.load[targets] - inst.cpu[c]) / cap
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
    for c in sorted(pool, key=inst.size_rank.__getitem__):
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


def try_drain(pack: Packing, s: int, bounds: PassBounds | None = None) -> bool:
    """Empty node s into the other powered nodes and switch it off, if that lowers the objective.
    Given up as soon as what the moves left could save at most cannot bring the total below 0
    (`_least_left`, exact: it only spares pricing a drain that cannot pay). A pair split by a move,
    whose other end is still on s and no longer fits on the node the moved one went to, can never
    join again in this drain (the targets' loads only grow): its weight is added back to that
    bound. `bounds`: the traffic part of those bounds, computed for a whole pass of `consolidate`."""
    inst = pack.inst
    members = sorted(pack.members[s], key=inst.size_rank.__getitem__)
    moves, others, later = _least_left(pack, s, members, bounds)
    # Cheap refusal: the moves alone (their migrations, less the traffic they could join) would
    # cost more than everything s draws.
    if moves[0] >= inst.power1(s, pack.load[s]):
        return False
    total = -float(inst.watts[s, 0])  # idle power saved once s is empty and off
    done: list[int] = []
    stuck, stuck_of = 0.0, dict[int, float]()  # pairs split for good so far (see below), and by the end still on s
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
        if later:  # c's pairs with containers still on s: those that cannot follow it to its node
            stuck -= stuck_of.pop(k, 0.0)  # never join again, whatever `moves` allowed them
            t = choice[0]
            for j, weight in later.get(k, ()):
                p = members[j]
                if not (inst.allowed(p)[t] and inst.fits(pack.load[t] + inst.cpu[p], pack.mem[t] + inst.mem[p], t)):
                    stuck += weight
                    stuck_of[j] = stuck_of.get(j, 0.0) + weight
        if total + moves[k + 1] + others[k + 1] - shed + stuck >= 0:
            break  # even the best rest of the drain would not pay
    if len(done) == len(members) and total < -1e-9:
        pack.on[s] = False
        if pack.within_budget():
            if bounds is not None:
                bounds.moved(pack, done)
            return True
        pack.on[s] = True
    for c in reversed(done):
        pack.move(c, s)
    return False


def _least_left(pack: Packing, s: int, members: list[int], bounds: PassBounds | None = None
                ) -> tuple[np.ndarray, np.ndarray, dict[int, list[tuple[int, float]]]]:
    """For each k, lower bounds on what moving members[k:] off s (in that order) changes in the
    objective besides the power s sheds: their migrations (paid, or got back for a container
    returning home, if it has room there now) plus what their traffic pairs can change (`_traffic_least`); and what they
    could shed in devil pairs on s and group spans. A target's power only grows; with a traffic
    graph, by at least `_power_floor` per unit of CPU it takes. Also, per member (by its place),
    its pairs with members after it: (their place, weight)."""
    inst, w = pack.inst, pack.inst.problem.weights
    cs = np.array(members, dtype=np.int64)
    home = inst.orig[cs]
    back = pack.fits_at(cs, home)  # room at home now: targets only fill up during a drain
    moves = np.where(home == s, inst.mig_cost[cs], np.where(back, -inst.mig_cost[cs], 0.0))
    later: dict[int, list[tuple[int, float]]] = {}
    if inst.graph.edges:  # (without pairs, the arithmetic is the graph-blind planner's, bit for bit)
        kept = bounds.get(s) if bounds is not None else None
        least, later = kept if kept is not None else _traffic_least(pack, s, cs)
        floor = bounds.floor if bounds is not None else _power_floor(pack, s)
        moves = moves + least + floor * inst.cpu[cs]
    others = -(inst.devil[cs] * w.contention_w * max(int(pack.devils[s]) - 1, 0)
               + (inst.group[cs] >= 0) * w.affinity_w)

    def suffix(x: np.ndarray) -> np.ndarray:
        return np.concatenate([np.cumsum(x[::-1])[::-1], [0.0]])

    return suffix(moves), suffix(others), later


def _power_floor(pack: Packing, s: int) -> float:
    """Watts per unit of CPU that any powered node but s at least adds when it takes a container
    (`Instance.least_slope`; 0 when a cap above 1 lets a load pass the cores, where curves end)."""
    inst = pack.inst
    on = pack.on.copy()
    on[s] = False
    return float(inst.least_slope[on].min()) if inst.cap <= 1.0 and on.any() else 0.0


def _traffic_least(pack: Packing, s: int, cs: np.ndarray) -> tuple[np.ndarray, dict[int, list[tuple[int, float]]]]:
    """For each container of node s, drained in the order of `cs`, the least its move changes in
    traffic (W) when it is made: a pair with a container moved after it splits (+ its weight; both
    ends are on s until then), a pair with one moved before it may join again (- its weight), and
    of its pairs outside s at most those on one powered node it fits on now join (it lands on one
    node; they stay put, and the other nodes' loads only grow until the drain ends).
    Summed over a suffix, the pairs inside it cancel: what is left is what the suffix may still
    join of the pairs the moves before it split, and of the pairs outside s. Also the pairs inside
    s, by the place of their end drained first: (the other's place, weight)."""
    inst = pack.inst
    row, nbr, eid = inst.graph.gather(cs)
    weight, where = inst.graph.w[eid], pack.assign[nbr]
    inside = where == s
    order = np.argsort(cs, kind="stable")
    rank = order[np.searchsorted(cs[order], nbr[inside])]  # the partner's place in the drain
    mine = row[inside]
    first = rank > mine
    least = np.bincount(mine, np.where(first, weight[inside], -weight[inside]), minlength=len(cs)).astype(float)
    later: dict[int, list[tuple[int, float]]] = {}
    for j, p, x in zip(mine[first].tolist(), rank[first].tolist(), weight[inside][first].tolist()):
        later.setdefault(j, []).append((p, x))
    out = ~inside
    if out.any():  # only nodes it may go to now: targets fill up during a drain, never empty
        out &= pack.fits_at(cs[row], where)
    if out.any():
        keys, at = np.unique(row[out] * inst.n_nodes + where[out], return_inverse=True)
        per_node = np.bincount(at, weight[out])
        best = np.zeros(len(cs))
        np.maximum.at(best, keys // inst.n_nodes, per_node)
        least -= best
    return least, later


class PassBounds:
    """`_traffic_least` of every node of a consolidation pass, computed at once (numpy over all
    their containers) and kept while it stays exact: until a drain that succeeds moves one of the
    node's containers' partners or puts a container on it (the node is then priced as usual).
    Drains that fail leave everything where it was; the only other change, targets filling up,
    leaves it a valid bound. With the least `Instance.least_slope` of the powered nodes (powered
    nodes only go off during a pass)."""

    def __init__(self, pack: Packing, nodes: np.ndarray):
        inst, graph = pack.inst, pack.inst.graph
        self.floor = float(inst.least_slope[pack.on].min()) if inst.cap <= 1.0 and pack.on.any() else 0.0
        self.stale = np.zeros(inst.n_nodes, dtype=bool)
        on_nodes = np.zeros(inst.n_nodes, dtype=bool)
        on_nodes[nodes] = True
        cs = inst.largest_first[on_nodes[pack.assign[inst.largest_first]]]
        cs = cs[stable_order(pack.assign[cs], inst.n_nodes)]  # by node, then as try_drain drains
        node = pack.assign[cs]
        self.start = np.searchsorted(node, np.arange(inst.n_nodes + 1))
        rank = np.empty(inst.n_containers, dtype=np.int64)
        rank[cs] = np.arange(len(cs)) - self.start[node]  # place in its node's drain
        row, nbr, eid = graph.gather(cs)
        weight, where = graph.w[eid], pack.assign[nbr]
        inside = where == node[row]
        first = inside & (rank[nbr] > rank[cs[row]])
        self.least = np.bincount(row[inside], np.where(first, weight, -weight)[inside], minlength=len(cs)).astype(float)
        out = ~inside
        out[out] = pack.fits_at(cs[row[out]], where[out])
        if out.any():
            keys, at = np.unique(row[out] * inst.n_nodes + where[out], return_inverse=True)
            best = np.zeros(len(cs))
            np.maximum.at(best, keys // inst.n_nodes, np.bincount(at, weight[out]))
            self.least -= best
        self.pair_row, self.pair_to, self.pair_w = row[first], rank[nbr[first]], weight[first]

    def get(self, s: int) -> tuple[np.ndarray, dict[int, list[tuple[int, float]]]] | None:
        """Node s's `_traffic_least`, or None if a drain since moved what it depends on."""
        if self.stale[s]:
            return None
        lo, hi = self.start[s], self.start[s + 1]
        a, b = np.searchsorted(self.pair_row, [lo, hi])
        later: dict[int, list[tuple[int, float]]] = {}
        for j, p, x in zip((self.pair_row[a:b] - lo).tolist(), self.pair_to[a:b].tolist(), self.pair_w[a:b].tolist()):
            later.setdefault(j, []).append((p, x))
        return self.least[lo:hi], later

    def moved(self, pack: Packing, containers: list[int]) -> None:
        """After a drain moved `containers`: their nodes, and those of their partners, change."""
        cs = np.asarray(containers, dtype=np.int64)
        self.stale[pack.assign[cs]] = True
        self.stale[pack.assign[pack.inst.graph.gather(cs)[1]]] = True


def consolidate(pack: Packing, candidates: np.ndarray | None = None, passes: int = 3) -> int:
    """Drain nodes, least utilised first, until a pass empties none; returns nodes emptied.
    A node whose drain failed with no drain succeeding since is not tried again: it would fail
    the same way (a drain that fails changes nothing)."""
    inst = pack.inst
    emptied = 0
    failed_at = np.full(inst.n_nodes, -1)  # emptied when the node's drain last failed
    for _ in range(passes):
        mask = pack.on & inst.can_off & ~pack.over_cap() & (failed_at != emptied)
        if candidates is not None:
            mask &= candidates
        nodes = np.flatnonzero(mask)
        order = nodes[np.lexsort((nodes, pack.load[nodes] / inst.cpu_cap[nodes]))]
        bounds = PassBounds(pack, order) if inst.graph.edges else None
        before = emptied
        for s in order.tolist():
            if not pack.on[s]:
                continue
            if try_drain(pack, s, bounds):
                emptied += 1
            else:
                failed_at[s] = emptied
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


#: a round of `join` ends before a pair this many times lighter than the heaviest pair waiting
DEFER_RATIO = 2.0
#: the fewest pairs `join` prices at once
BAND_PAIRS = 256


def join(pack: Packing, budget: Budget | None = None, worth: float = 1.0) -> int:
    """Join split pairs, heaviest first, within the budget: move one end onto the other's node
    (where it fits, or by a swap with one of that node's containers), or both onto a third node
    with room for the two, whichever lowers the objective most (a join is kept only if the
    objective falls). Only pairs that weigh more than `worth` times moving their cheaper end are
    tried; lighter ones rarely pay alone (LNS may still join them with others). Runs to its end
    unless the `budget`'s safety net stops it (its work is CP-SAT's only).

    In rounds, heaviest pair first: the pairs are priced a band at a time (`join_offers`, all
    of a band at once, when a round reaches the first without an offer: those down to
    `DEFER_RATIO` times lighter than it, at least `BAND_PAIRS`), then the offers are taken in
    turn. An offer that a join since it was priced may have changed (one of its nodes took or
    lost containers, or one of its containers or their partners moved: each carries the time of
    its last change) is priced again when taken (`price_now`, exact) and its room checked
    again; if it no longer joins the pair, pays or fits, the pair waits for the next round and
    is priced again there with all its options. A pair whose offer was up to date and does not
    pay is dropped, as one at a time would. A round ends before a pair `DEFER_RATIO` times
    lighter than the heaviest waiting one, so a light pair does not take the room a heavy one
    waits for (one pair at a time, heaviest first, gave 0.5% less objective at 10,000
    containers than rounds that ran to their end); the offers of the pairs a round did not
    reach are kept for the next (a round ends after a few dozen pairs there: pricing its whole
    band again each round was most of the join's time).
    """
    inst = pack.inst
    graph = inst.graph
    if not graph.edges:
        return 0
    heavy = graph.w > worth * np.minimum(inst.mig_cost[graph.a], inst.mig_cost[graph.b])
    split = np.flatnonzero((pack.assign[graph.a] != pack.assign[graph.b]) & heavy)
    pending = split[np.argsort(-graph.w[split], kind="stable")]
    offers: dict[int, tuple[float, int, int, int, int, int]] = {}  # pair: price, c1, t1, c2, t2, when
    ends_a, ends_b, weight = graph.edge_lists
    ptr, nbr, _ = graph.adjacency
    node_at = [0] * inst.n_nodes  # when each node last took or lost a container (joins made)
    cont_at = [0] * inst.n_containers  # when each container, or a partner of it, last moved
    clock = moved = 0
    while len(pending):
        pending = pending[pack.assign[graph.a[pending]] != pack.assign[graph.b[pending]]]
        lighter = -graph.w[pending]  # ascending, for searchsorted
        later: list[int] = []
        rest = np.zeros(0, dtype=np.int64)
        for i, k in enumerate(pending.tolist()):
            if budget is not None and budget.late():
                return moved
            if later and weight[k] * DEFER_RATIO < weight[later[0]]:
                rest = pending[i:]  # after the heavier pairs that wait, with the offers they have
                break
            a, b = ends_a[k], ends_b[k]
            sa, sb = int(pack.assign[a]), int(pack.assign[b])
            if sa == sb:
                continue
            if k not in offers:  # the next band, priced now
                end = max(i + BAND_PAIRS, int(np.searchsorted(lighter, -weight[k] / DEFER_RATIO, "right")))
                band = np.array([p for p in pending[i:end].tolist() if p not in offers], dtype=np.int64)
                offer = join_offers(pack, graph.a[band], graph.b[band])
                columns = (offer.price, offer.c1, offer.t1, offer.c2, offer.t2)
                for p, *terms in zip(band.tolist(), *(v.tolist() for v in columns)):
                    offers[p] = (*terms, clock)
            price, c1, t1, c2, t2, when = offers.pop(k)
            ends_moved = cont_at[a] > when or cont_at[b] > when
            if price == math.inf:
                if ends_moved or node_at[sa] > when or node_at[sb] > when:
                    later.append(k)
                continue
            movers = [(c1, t1), (c2, t2)] if c2 >= 0 else [(c1, t1)]
            if (ends_moved or cont_at[c1] > when or (c2 >= 0 and (cont_at[c2] > when or node_at[t2] > when))
                    or node_at[sa] > when or node_at[sb] > when or node_at[t1] > when):
                after = dict(movers)  # priced before a join it depends on: price it again now
                if after.get(a, sa) != after.get(b, sb) or not _room(pack, movers):
                    later.append(k)
                    continue
                if not (price := price_now(pack, movers)) < -1e-9:
                    if ends_moved:
                        later.append(k)
                    continue
            elif not price < -1e-9:
                continue
            homes = [(c, int(pack.assign[c])) for c, _ in movers]
            for c, t in movers:
                pack.move(c, t)
            if not pack.within_budget():
                for c, home in reversed(homes):
                    pack.move(c, home)
                continue
            moved += len(movers)
            clock += 1
            for (c, t), (_, home) in zip(movers, homes):
                node_at[t] = node_at[home] = cont_at[c] = clock
                for j in range(ptr[c], ptr[c + 1]):
                    cont_at[nbr[j]] = clock
        pending = np.concatenate([np.array(later, dtype=np.int64), rest])
        pending = pending[np.argsort(-graph.w[pending], kind="stable")]
    return moved


def price_now(pack: Packing, movers: list[tuple[int, int]]) -> float:
    """`Packing.price_moves` of one or two moves (container, target) in plain Python: one join
    checked when taken costs less than a numpy call per term."""
    inst, w, assign = pack.inst, pack.inst.problem.weights, pack.assign
    each = inst.per_container
    change: dict[int, list[float]] = {}
    total = 0.0
    moving = [(c, int(assign[c]), t) for c, t in movers]
    for c, s, t in moving:
        home, cost = each.orig[c], each.mig_cost[c]
        total += cost * ((t != home) - (s != home))
        for n, sign in ((s, -1.0), (t, 1.0)):
            d = change.setdefault(n, [0.0, 0])
            d[0] += sign * each.cpu[c]
            d[1] += int(sign) * each.devil[c]
    for n, (cpu, dev) in change.items():
        load = float(pack.load[n])
        total += inst.power1(n, load + cpu) - inst.power1(n, load)
        if dev and w.contention_w > 0:
            k = int(pack.devils[n])
            total += w.contention_w * ((k + dev) * (k + dev - 1) // 2 - k * (k - 1) // 2)
    if w.affinity_w > 0 and any(each.group[c] >= 0 for c, _ in movers):
        total += w.affinity_w * pack._span_change(moving)
    after = dict(movers)
    ptr, nbr, weight = inst.graph.adjacency
    for j, (c, s, t) in enumerate(moving):
        for i in range(ptr[c], ptr[c + 1]):
            p = nbr[i]
            if j and p == movers[0][0]:
                continue  # the pair between the two moved containers, counted once
            was = int(assign[p])
            total += weight[i] * ((t != after.get(p, was)) - (s != was))
    return total


def _room(pack: Packing, movers: list[tuple[int, int]]) -> bool:
    """Whether every node `movers` (container, target) add load to has room for what they add."""
    inst, each = pack.inst, pack.inst.per_container
    if len(movers) == 1 or movers[0][1] == movers[1][1]:  # onto one node, from others
        t = movers[0][1]
        cpu, mem = sum(each.cpu[c] for c, _ in movers), sum(each.mem[c] for c, _ in movers)
        return inst.fits1(float(pack.load[t]) + cpu, float(pack.mem[t]) + mem, t)
    change: dict[int, list[float]] = {}
    for c, t in movers:
        for n, sign in ((int(pack.assign[c]), -1.0), (t, 1.0)):
            d = change.setdefault(n, [0.0, 0.0])
            d[0] += sign * each.cpu[c]
            d[1] += sign * each.mem[c]
    return all(inst.fits1(float(pack.load[n]) + cpu, float(pack.mem[n]) + mem, n)
               for n, (cpu, mem) in change.items() if cpu > 0 or mem > 0)


#: containers of the partner's node a join tries to swap out: the `SWAP_TRIES` cheapest to move
#: that fit, of its `SWAP_SCAN` cheapest
SWAP_TRIES = 3
SWAP_SCAN = 16
#: powered nodes every pair of a round may join on, besides the nodes of its other partners
THIRD_NODES = 32


@dataclass(frozen=True)
class Offers:
    """The best join of each pair: c1 to t1 and, where c2 >= 0, c2 to t2; its exact price
    (`Packing.price_moves`; inf where no join fits)."""

    price: np.ndarray
    c1: np.ndarray
    t1: np.ndarray
    c2: np.ndarray
    t2: np.ndarray


def join_offers(pack: Packing, a: np.ndarray, b: np.ndarray, shared: np.ndarray | None = None) -> Offers:
    """For each pair (a[i], b[i]) on two nodes, the join that lowers the objective most, priced
    exactly from the current placement, all pairs at once, each as if alone (the same offers as
    one pair at a time, given the same `shared`). The options: a onto b's node where it fits,
    else a swap with one of that node's containers (not b; `_swap_rows`) going to a's node; the
    same for b; both onto a powered node with room for the two: the nodes of their other
    partners, and the one of `shared` (default: `_third_nodes` of these pairs) where the two add
    the least power and migrations. Ties go to the option listed first."""
    inst, assign = pack.inst, pack.assign
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    sa, sb = assign[a], assign[b]
    pairs = np.arange(len(a))
    parts: list[tuple[np.ndarray, ...]] = []
    none = np.full(len(a), -1, dtype=np.int64)
    on_ends = np.zeros(inst.n_nodes, dtype=bool)  # each node of a pair: its containers, the cheapest to move first
    on_ends[sa] = on_ends[sb] = True
    near = inst.cheapest_to_move[on_ends[assign[inst.cheapest_to_move]]]
    cheapest = near[stable_order(assign[near], inst.n_nodes)]
    ptr = np.concatenate([[0], np.cumsum(np.bincount(assign[near], minlength=inst.n_nodes))])
    for c, d, s, t in ((a, b, sa, sb), (b, a, sb, sa)):
        fit = pack.fits_at(c, t)
        parts.append((pairs[fit], c[fit], t[fit], none[fit], none[fit]))
        parts.append(_swap_rows(pack, (cheapest, ptr), np.flatnonzero(~fit), c, d, s, t))
    if shared is None:
        shared = _third_nodes(pack, inst.cpu[a] + inst.cpu[b], inst.mem[a] + inst.mem[b])
    parts.append(_third_rows(pack, a, b, sa, sb, shared))
    pair, c1, t1, c2, t2 = (np.concatenate(col) for col in zip(*parts))
    best = Offers(np.full(len(a), np.inf), none.copy(), none.copy(), none.copy(), none.copy())
    if len(pair) == 0:
        return best
    price = pack.price_moves(c1, t1, c2, t2)
    order = np.lexsort((price, pair))  # stable: among equal prices, the row listed first
    ranked = pair[order]
    first = order[np.concatenate([[True], ranked[1:] != ranked[:-1]])]
    at = pair[first]
    for field, values in (("price", price), ("c1", c1), ("t1", t1), ("c2", c2), ("t2", t2)):
        getattr(best, field)[at] = values[first]
    return best


def _swap_rows(pack: Packing, members: tuple[np.ndarray, np.ndarray], which: np.ndarray, c: np.ndarray,
               partner: np.ndarray, s: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, ...]:
    """Swaps for the pairs `which`: c[i] onto t[i] (no room there) for one of t[i]'s containers x
    (not partner[i]) onto c[i]'s node s[i]; both nodes stay within their caps. Of the
    `SWAP_SCAN` cheapest to move on t[i] (`members`: containers by node, the cheapest first, and
    where each node's begin), the first `SWAP_TRIES` that fit. Rows (pair, x, s, c, t)."""
    inst = pack.inst
    which = which[inst.allowed_at(c[which], t[which])]
    order, ptr = members
    first = ptr[t[which]]
    row, idx = flat_ranges(first, np.minimum(ptr[t[which] + 1] - first, SWAP_SCAN))
    i, x = which[row], order[idx]
    ci, si, ti = c[i], s[i], t[i]
    ok = (x != partner[i]) & inst.allowed_at(x, si)
    ok &= inst.fits(pack.load[ti] - inst.cpu[x] + inst.cpu[ci], pack.mem[ti] - inst.mem[x] + inst.mem[ci], ti)
    ok &= inst.fits(pack.load[si] + inst.cpu[x] - inst.cpu[ci], pack.mem[si] + inst.mem[x] - inst.mem[ci], si)
    i, x, ci, si, ti = i[ok], x[ok], ci[ok], si[ok], ti[ok]
    keep = np.arange(len(i)) - np.searchsorted(i, i) < SWAP_TRIES  # rows of a pair are together, in order
    return i[keep], x[keep], si[keep], ci[keep], ti[keep]


def _third_rows(pack: Packing, a: np.ndarray, b: np.ndarray, sa: np.ndarray, sb: np.ndarray,
                shared: np.ndarray) -> tuple[np.ndarray, ...]:
    """Both ends of each pair onto one other powered node with room for the two: the nodes of
    their other partners, and of `_third_nodes` the one where the two add the least power and
    migrations. Rows (pair, a, node, b, node)."""
    inst, graph, n = pack.inst, pack.inst.graph, pack.inst.n_nodes
    ra, pa, _ = graph.gather(a)
    rb, pb, _ = graph.gather(b)
    cpu, mem = inst.cpu[a] + inst.cpu[b], inst.mem[a] + inst.mem[b]
    keys = [np.concatenate([ra, rb]) * n + pack.assign[np.concatenate([pa, pb])]]
    if len(shared):  # of those, the one that adds the least power and migrations, per pair
        load = pack.load[shared][None, :] + cpu[:, None]
        added = (inst.power(np.tile(shared, len(a)), load.ravel()).reshape(load.shape)
                 - inst.power(shared, pack.load[shared])[None, :])
        added += np.where(shared[None, :] != inst.orig[a][:, None], inst.mig_cost[a][:, None], 0.0)
        added += np.where(shared[None, :] != inst.orig[b][:, None], inst.mig_cost[b][:, None], 0.0)
        room = inst.fits(load, pack.mem[shared][None, :] + mem[:, None], shared[None, :])
        room &= (shared[None, :] != sa[:, None]) & (shared[None, :] != sb[:, None])
        added[~room] = np.inf
        pick = np.argmin(added, axis=1)
        some = np.isfinite(added[np.arange(len(a)), pick])
        keys.append(np.flatnonzero(some) * n + shared[pick[some]])
    found = sorted_unique(np.concatenate(keys))
    i, node = found // n, found % n
    ok = (node != sa[i]) & (node != sb[i])
    ok &= pack.fits_at(a[i], node, inst.cpu[a[i]] + inst.cpu[b[i]], inst.mem[a[i]] + inst.mem[b[i]])
    ok &= inst.allowed_at(b[i], node)
    i, node = i[ok], node[ok]
    return i, a[i], node, b[i], node


def _third_nodes(pack: Packing, cpu: np.ndarray, mem: np.ndarray) -> np.ndarray:
    """Powered nodes any pair of a round may join on: of those with room for the median pair
    (`cpu`, `mem`: each pair's demand), half the cheapest to add it to, and the roomiest."""
    inst = pack.inst
    on = np.flatnonzero(pack.on)
    if len(cpu) == 0 or len(on) == 0:
        return np.zeros(0, dtype=np.int64)
    x, m = statistics.median(cpu.tolist()), statistics.median(mem.tolist())  # np.median imports numpy.ma: 20-45 ms
    cand = on[inst.fits(pack.load[on] + x, pack.mem[on] + m, on)]
    if len(cand) <= THIRD_NODES:
        return cand
    added = inst.power(cand, pack.load[cand] + x) - inst.power(cand, pack.load[cand])
    picked = np.argsort(added, kind="stable")[: THIRD_NODES // 2]
    rest = np.ones(len(cand), dtype=bool)
    rest[picked] = False
    roomy = cand[rest][np.argsort(pack.load[cand[rest]] / inst.cpu_cap[cand[rest]], kind="stable")]
    return np.concatenate([cand[picked], roomy[: THIRD_NODES - len(picked)]])


def homecoming(pack: Packing) -> int:
    """Send containers back to the node they run on now where it is powered, has room and the
    move lowers the objective, the greatest gain first, in passes until one sends none; returns
    how many went back. Each pass prices its candidates at once (`Packing.price_moves`), and one
    that a move before it in the pass touched (its nodes, or a partner) again when its turn comes
    (`price_now`, exact); a later pass looks only at what the one before touched. A move made to
    join a pair or to drain a node stays paid for after a later step moved its partner or kept
    the node on: at 10,000 containers with a container graph ~100 such containers, 0.5% of the
    objective (docs/planner.md). It only takes migrations back: always within the budget."""
    inst, graph = pack.inst, pack.inst.graph
    back = 0
    away = np.flatnonzero(pack.assign != inst.orig)
    while len(away):
        away = away[pack.fits_at(away, inst.orig[away])]  # home powered, allowed, with room
        price = pack.price_moves(away, inst.orig[away])
        gain = np.flatnonzero(price < -1e-9)
        touched_node = np.zeros(inst.n_nodes, dtype=bool)
        touched = np.zeros(inst.n_containers, dtype=bool)  # a partner moved
        sent = 0
        for c in away[gain[np.argsort(price[gain], kind="stable")]].tolist():
            home, s = int(inst.orig[c]), int(pack.assign[c])
            if (touched[c] or touched_node[home] or touched_node[s]) and not (
                    pack.fits(c, np.array([home]))[0] and price_now(pack, [(c, home)]) < -1e-9):
                continue
            pack.move(c, home)
            touched_node[[s, home]] = True
            touched[graph.around(c)[0]] = True
            sent += 1
        back += sent
        if not sent:
            break
        away = np.flatnonzero(pack.assign != inst.orig)
        away = away[touched[away] | touched_node[pack.assign[away]] | touched_node[inst.orig[away]]]
    return back


#: the join before consolidation tries the pairs that weigh this many times their cheaper end's
#: migration; the one after, all that outweigh it. At 10,000 containers (seeds 1-4) 2 rather than
#: 1 left the objective 0.16% higher, for ~10% less solve time (docs/planner.md)
FIRST_JOIN_WORTH = 2.0


def start(pack: Packing, budget: Budget | None = None) -> None:
    """The search's starting point: repair, join, consolidate, untangle, join, homecoming.
    Repair is not held to the migration budget (the cap comes first); what it spends counts
    against it. Pairs are joined before draining, while nodes still have room (a drain then
    prices the pairs it would split): the heavy ones (`FIRST_JOIN_WORTH`); and once more after,
    all that may pay, for what the drains made possible; only the `budget`'s safety net stops
    joining early."""
    repair(pack)
    if pack.migration_limit is not None:
        pack.migration_limit = max(pack.migration_limit, pack.migrations())
    join(pack, budget, FIRST_JOIN_WORTH)
    consolidate(pack)
    untangle(pack)
    join(pack, budget)
    homecoming(pack)
