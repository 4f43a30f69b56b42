"""`peakpack lab`: a real cluster on one Linux host. Each node is a network namespace on a private
bridge with its own sshd, dockerd (--experimental, CRIU), IPMI BMC (pyghmi, UDP) and a
powercap-style RAPL counter driven by its containers' CPU use."""

if __name__ != "peakpack.lab":  # the folder is on the path too, beside peakpack/: one name only
    raise ImportError(f"import peakpack.lab, not {__name__}: each module has one import name")

from .faults import Fault
from .lab import Lab
from .layout import LabLayout, NodeLayout

__all__ = ["Fault", "Lab", "LabLayout", "NodeLayout"]
