"""Live migration with CRIU, what may move, pinning, compose deploys (docs/migration.md)."""

if __name__ != "peakpack.migrate":  # the folder is on the path too, beside peakpack/: one name only
    raise ImportError(f"import peakpack.migrate, not {__name__}: each module has one import name")
