"""Alembic environment: run by Store.open on a connection it passes in, or by the `alembic`
command (-x url=...) when a developer autogenerates a revision."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from peakpack.db.schema import Base

config = context.config
target_metadata = Base.metadata


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = context.get_x_argument(as_dictionary=True)["url"]
    with create_engine(url).connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


run()
