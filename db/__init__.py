"""The state store: SQLAlchemy models, Alembic migrations and the Store facade."""

if __name__ != "peakpack.db":  # the folder is on the path too, beside peakpack/: one name only
    raise ImportError(f"import peakpack.db, not {__name__}: each module has one import name")
