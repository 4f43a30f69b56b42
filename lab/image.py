"""The lab's container image without a registry: Debian's busybox-static in an empty rootfs,
imported with `docker import` as peakpack/busybox:lab. Every applet the binary offers is linked
into /bin; besides the shell and coreutils, service tests rely on `httpd` (a web server: `httpd -f
-p 80 -h DIR`), `wget` (a client: `wget -qO- URL`) and `nc` (`nc -l -p PORT`, `nc HOST PORT`)."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from .node import LabError

LAB_IMAGE = "peakpack/busybox:lab"
BUSYBOX = Path("/bin/busybox")
#: applets the lab's tests and demos use; Debian 12's busybox-static (1.35) has all of them
NEEDED_APPLETS = ("sh", "sleep", "cat", "echo", "mkdir", "httpd", "wget", "nc", "ip", "netstat")


def build_rootfs_tar(dest: Path) -> Path:
    if dest.exists():
        return dest
    if not BUSYBOX.exists():
        raise LabError("lab image: /bin/busybox missing; install busybox-static (scripts/install-system-deps.sh)")
    applets = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True, check=True).stdout.split()
    missing = [a for a in NEEDED_APPLETS if a not in applets]
    if missing:
        raise LabError(f"lab image: {BUSYBOX} has no {', '.join(missing)} applet; install Debian's busybox-static "
                       "(scripts/install-system-deps.sh), not busybox")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for d in ("bin", "tmp", "proc", "sys", "dev", "etc", "root"):
            (root / d).mkdir()
        (root / "tmp").chmod(0o1777)
        shutil.copy2(BUSYBOX, root / "bin" / "busybox")
        for applet in applets:
            if applet != "busybox":
                (root / "bin" / applet).symlink_to("busybox")
        (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n"
                                             "nobody:x:65534:65534:nobody:/:/bin/false\n")
        (root / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
        with tarfile.open(dest, "w") as tar:
            tar.add(root, arcname=".")
    return dest
