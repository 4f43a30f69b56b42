"""Demand forecasts from history, pure: the one rule the simulator and the service share.

History is a matrix, one row per container and one column per epoch (oldest first); NaN marks
an epoch a container has no sample for (it is younger than the window, or was not observed), so
a container with less history than the window uses what it has.
"""

from __future__ import annotations

import math

import numpy as np

from ..domain.settings import ForecastSettings


def window_epochs(settings: ForecastSettings, epoch_seconds: float) -> int:
    """How many of the latest per-epoch samples the forecast reads (at least one)."""
    return max(1, math.ceil(settings.window_seconds / epoch_seconds - 1e-9))


def forecast(history: np.ndarray, settings: ForecastSettings) -> np.ndarray:
    """One prediction per row: the quantile, or mean + k_std x std, of its non-NaN samples;
    NaN for a row with no sample at all (the caller falls back to labels or the current use)."""
    h = np.asarray(history, dtype=float)
    if h.ndim != 2:
        raise ValueError("history must be a matrix: one row per container, one column per epoch")
    out = np.full(h.shape[0], np.nan)
    seen = ~np.isnan(h).all(axis=1)
    if not seen.any() or h.shape[1] == 0:
        return out
    rows = h[seen]
    if settings.quantile is not None:
        out[seen] = np.nanquantile(rows, settings.quantile, axis=1)
    else:
        pred = np.nanmean(rows, axis=1)
        if settings.k_std:
            pred = pred + settings.k_std * np.nanstd(rows, axis=1)
        out[seen] = pred
    return out
