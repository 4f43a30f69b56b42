"""The production policy: migration-aware start, CP-SAT improvement, never worse than no-op.

solve(): repair the current placement and drain what pays (heuristic), improve it with CP-SAT
(the whole model when small, so small cases are solved to optimality; large-neighbourhood search
otherwise), or, past what one process handles in seconds, split the nodes into pods solved in
parallel and refine across them (`pods`). Finally, if the current placement is feasible and at
least as good, keep it: moves must pay for themselves. The search spends the problem's
`work_limit` (deterministic) with its `time_limit_s` as a safety net (`budget.Budget`); the
report says how much work it did and whether the safety net stopped it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from .bounds import lower_bound
from .budget import Budget
from .heuristic import start
from .instance import Instance
from .packing import Packing
from .pods import solve_in_pods
from .problem import Placement, PlacementProblem
from .search import SearchOptions, improve, infeasible_nodes

#: Fraction of the time limit kept back for scoring and building the answer.
_MARGIN = 0.05


@dataclass(frozen=True)
class Peakpack:
    """CP-SAT placement with a migration penalty at the problem's cap (see module docstring)."""

    name: str = "peakpack"
    search: SearchOptions = field(default_factory=SearchOptions)
    pod_nodes: int = 1500  # more usable nodes than this: decompose into pods of about this size

    def solve(self, problem: PlacementProblem) -> Placement:
        started = time.perf_counter()
        budget = Budget(limit=problem.work_limit, deadline=started + problem.time_limit_s * (1 - _MARGIN))
        opts = self.search.resolved()
        inst = Instance.build(problem)
        bound = lower_bound(inst)
        current = Packing(inst)
        current_ok = not infeasible_nodes(current).any()
        if int(inst.usable.sum()) > self.pod_nodes:
            single = replace(self, search=opts, pod_nodes=inst.n_nodes + 1)  # pods are never split again
            pack, outcome = solve_in_pods(single, self.pod_nodes, opts, inst, budget, bound)
        else:
            pack = current.copy()
            start(pack, budget)
            outcome = improve(pack, budget, opts, problem.seed, bound)
        status = (
            "INFEASIBLE"
            if infeasible_nodes(pack).any()
            else "OPTIMAL"
            if outcome.optimal
            else "FEASIBLE"
        )
        answer = pack.result(status, started, bound=bound)
        if current_ok:
            noop = current.result(answer.report.status, started, bound=bound)
            if noop.report.objective <= answer.report.objective + 1e-9:
                answer = noop
        if outcome.model_bound is not None:
            best = max(answer.report.bound, min(outcome.model_bound, answer.report.objective))
            answer = _with_report(answer, bound=best)
        return _with_report(answer, seconds=time.perf_counter() - started, work=budget.spent,
                            stopped_by_clock=budget.clock_stopped)


def _with_report(p: Placement, **changes: Any) -> Placement:
    return replace(p, report=replace(p.report, **changes))
