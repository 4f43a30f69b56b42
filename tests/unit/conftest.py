"""Store fixtures shared by the unit tests that run on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from peakpack.db.store import Store
from tests.support.postgres import drop_schema, postgres_server


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """One PostgreSQL server per test module (started by the test run itself)."""
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Every contract test runs on SQLite and on a real PostgreSQL server."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'pp.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    with Store.open(url) as s:
        yield s
        if request.param == "postgresql":
            drop_schema(s)
