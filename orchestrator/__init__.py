"""The core: the domain, deciding, observing, acting and the faces (docs/architecture.md)."""

if __name__ != "peakpack.orchestrator":  # the folder is on the path too, beside peakpack/: one name only
    raise ImportError(f"import peakpack.orchestrator, not {__name__}: each module has one import name")
