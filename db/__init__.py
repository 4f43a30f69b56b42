"""The state store: SQLAlchemy models, Alembic migrations and the Store facade."""
