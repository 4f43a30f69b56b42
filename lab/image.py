"""The lab's container images without a registry, each imported with `docker import`:
- peakpack/busybox:lab (every lab node has it): Debian's busybox-static in an empty rootfs. Every
  applet the binary offers is linked into /bin; besides the shell and coreutils, service tests rely
  on `httpd` (a web server: `httpd -f -p 80 -h DIR`), `wget` (a client: `wget -qO- URL`) and `nc`
  (`nc -l -p PORT`, `nc HOST PORT`);
- peakpack/memcached:lab (on demand, `memcached_image`): Debian's memcached package with its
  libraries and busybox, for tests and benchmarks that want a real server holding real state."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from .layout import NodeLayout
from .node import LabError, docker

LAB_IMAGE = "peakpack/busybox:lab"
MEMCACHED_IMAGE = "peakpack/memcached:lab"
#: where the memcached package and the rootfs built from it are kept between runs
CACHE = Path("/var/cache/peakpack/memcached")
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


def memcached_rootfs() -> Path:
    """Debian's memcached (`apt-get download`, cached) with its libraries and busybox, in a folder."""
    root = CACHE / "rootfs"
    if (root / "usr/bin/memcached").exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    if not list(CACHE.glob("memcached_*.deb")):
        got = subprocess.run(["apt-get", "download", "memcached"], cwd=CACHE, capture_output=True, text=True)
        if got.returncode:
            raise LabError(f"memcached image: `apt-get download memcached` failed: {got.stderr.strip()[-200:]}")
    work = Path(tempfile.mkdtemp(dir=CACHE))
    subprocess.run(["dpkg-deb", "-x", str(next(CACHE.glob("memcached_*.deb"))), str(work / "x")], check=True)
    for d in ("bin", "usr/bin", "tmp", "proc", "sys", "dev", "etc", "root"):
        (work / "rootfs" / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, work / "rootfs/bin/busybox")
    (work / "rootfs/bin/sh").symlink_to("busybox")
    shutil.copy2(work / "x/usr/bin/memcached", work / "rootfs/usr/bin/memcached")
    ldd = subprocess.run(["ldd", str(work / "x/usr/bin/memcached")], capture_output=True, text=True, check=True)
    for lib in (w for line in ldd.stdout.splitlines() for w in line.split() if w.startswith("/")):
        (work / "rootfs" / lib.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lib, work / "rootfs" / lib.lstrip("/"))
    (work / "rootfs/etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (work / "rootfs/etc/group").write_text("root:x:0:\n")
    (work / "rootfs").rename(root)
    shutil.rmtree(work)
    return root


def memcached_image(nodes: list[NodeLayout]) -> str:
    """MEMCACHED_IMAGE on every one of `nodes` that lacks it; returns its name."""
    tar = CACHE / "rootfs.tar"
    if not tar.exists():
        subprocess.run(["tar", "-C", str(memcached_rootfs()), "-cf", str(tar), "."], check=True)
    for node in nodes:
        if docker(node, "image", "inspect", MEMCACHED_IMAGE, check=False).returncode:
            docker(node, "import", str(tar), MEMCACHED_IMAGE)
    return MEMCACHED_IMAGE
