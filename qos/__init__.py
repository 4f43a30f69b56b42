"""The QoS guard of every node (`guard/`: a standard-library-only package that runs on the node,
shipped as one archive, `guard.pyz`, with its decisions as pure functions), what it reports and
what peakpack would install (`report.py`), and installing or updating it over SSH (`deploy.py`).
docs/qos.md says what the guard does and why."""

if __name__ != "peakpack.qos":  # the folder is on the path too, beside peakpack/: one name only
    raise ImportError(f"import peakpack.qos, not {__name__}: each module has one import name")
