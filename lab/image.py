"""The lab's container image without a registry: Debian's busybox-static in an empty rootfs,
imported with `docker import` as peakpack/busybox:lab."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from .node import LabError

LAB_IMAGE = "peakpack/busybox:lab"
BUSYBOX = Path("/bin/busybox")


def build_rootfs_tar(dest: Path) -> Path:
    if dest.exists():
        return dest
    if not BUSYBOX.exists():
        raise LabError("lab image: /bin/busybox missing; install busybox-static (scripts/install-system-deps.sh)")
    applets = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True, check=True).stdout.split()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for d in ("bin", "tmp", "proc", "sys", "dev", "etc", "root"):
            (root / d).mkdir()
        (root / "tmp").chmod(0o1777)
        shutil.copy2(BUSYBOX, root / "bin" / "busybox")
        for applet in applets:
            if applet != "busybox":
                (root / "bin" / applet).symlink_to("busybox")
        (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        with tarfile.open(dest, "w") as tar:
            tar.add(root, arcname=".")
    return dest
