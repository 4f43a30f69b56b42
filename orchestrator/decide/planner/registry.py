"""Policies by name, for the CLI, the controller and the simulator.

`peakpack` is the production planner (the default); the others are the baselines it is compared
with. Options are passed to the policy's constructor, e.g. `get_policy("bestfit95", cap=0.9)` or
`get_policy("peakpack", pod_nodes=500)`; search knobs go by name into `SearchOptions`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ...domain.errors import PeakpackError
from .baselines import BestFit, DotProduct, FirstFitDecreasing, Noop, Spread
from .peakpack import Peakpack
from .problem import Policy
from .search import SearchOptions


def _peakpack(**options: Any) -> Peakpack:
    search_keys = {f.name for f in dataclasses.fields(SearchOptions)}
    search = {k: options.pop(k) for k in list(options) if k in search_keys}
    return Peakpack(search=SearchOptions(**search), **options)


_FACTORIES: dict[str, Callable[..., Policy]] = {
    "peakpack": _peakpack,
    "noop": Noop,
    "ffd": FirstFitDecreasing,
    "bestfit95": BestFit,
    "spread": Spread,
    "dotproduct": DotProduct,
}

POLICY_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def get_policy(name: str, **options: Any) -> Policy:
    """The policy called `name`, built with `options`; one-line PeakpackError otherwise."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise PeakpackError(
            f"--policy: unknown name {name!r}; choose one of {', '.join(POLICY_NAMES)}"
        )
    try:
        return factory(**options)
    except TypeError:
        raise PeakpackError(
            f"policy {name}: unknown option among {sorted(options)}; "
            "see peakpack.orchestrator.decide.planner.registry"
        ) from None
