"""Data: example.toml (every key) and the embedded demo, found with importlib.resources."""

if __name__ != "peakpack.inventory":  # the folder is on the path too, beside peakpack/: one name only
    raise ImportError(f"import peakpack.inventory, not {__name__}: each module has one import name")
