"""IPMI, energy counters and accounting, power actions and the savings ledger (docs/power.md)."""

if __name__ != "peakpack.power":  # the folder is on the path too, beside peakpack/: one name only
    raise ImportError(f"import peakpack.power, not {__name__}: each module has one import name")
