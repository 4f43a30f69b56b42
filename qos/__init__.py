"""The QoS guard of every node (`guard.py`: one stdlib-only file that runs on the node, with its
decisions as pure functions) and how peakpack installs, updates and reads it over SSH
(`deploy.py`). docs/qos.md says what the guard does and why."""

if __name__ != "peakpack.qos":  # the folder is on the path too, beside peakpack/: one name only
    raise ImportError(f"import peakpack.qos, not {__name__}: each module has one import name")
