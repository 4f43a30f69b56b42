import numpy as np
import pytest

from peakpack.orchestrator.decide.forecast import forecast, window_epochs
from peakpack.orchestrator.domain.settings import ForecastSettings

NAN = np.nan


def test_a_short_history_uses_what_it_has_and_none_gives_nan() -> None:
    h = np.array([[1.0, 2.0, 3.0], [NAN, NAN, 4.0], [NAN, NAN, NAN]])
    got = forecast(h, ForecastSettings())
    assert got[:2].tolist() == [2.0, 4.0] and np.isnan(got[2])


def test_quantile_and_k_std() -> None:
    h = np.array([[0.0, 1.0, 2.0, 3.0, 4.0]])
    assert forecast(h, ForecastSettings(quantile=0.5))[0] == pytest.approx(2.0)
    assert forecast(h, ForecastSettings(quantile=1.0))[0] == pytest.approx(4.0)
    assert forecast(h, ForecastSettings(k_std=1.0))[0] == pytest.approx(2.0 + np.std(h))


def test_window_in_epochs() -> None:
    assert window_epochs(ForecastSettings(window_seconds=7200), 300) == 24
    assert window_epochs(ForecastSettings(window_seconds=7200), 600) == 12
    assert window_epochs(ForecastSettings(window_seconds=10), 600) == 1
