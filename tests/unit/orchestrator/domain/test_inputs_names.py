"""Container names an operator gives are checked before they reach a command line (`inputs.container_name`)."""

from __future__ import annotations

import pytest

from peakpack.orchestrator.domain.errors import PeakpackError
from peakpack.orchestrator.domain.inputs import container_name


@pytest.mark.parametrize("bad", ["x;rm -rf /", "a", "", "-x", "a b", "$(id)", "a/b"])
def test_unsafe_container_names_are_refused(bad: str) -> None:
    with pytest.raises(PeakpackError, match="CONTAINER"):
        container_name(bad)
