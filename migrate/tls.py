"""TLS on every page stream (`[migration] tls`, on by default): a cluster CA on the head node and a
certificate per node, so that a container's memory never crosses the network in clear and no one
but a node of this cluster can feed a restore its pages or read them from a post-copy source.

CRIU takes `tls`, `tls-cacert`, `tls-cert` and `tls-key` (CRIU built with gnutls); the page server
requires the client's certificate too. CRIU checks a peer's certificate against its own `--address`
on both ends (the page server against the address it listens on), so every node would need every
node's address in its certificate; instead each end is told `tls-no-cn-verify` and checks the chain:
a peer is trusted when the cluster CA signed its certificate, i.e. when it is a node of this cluster.

The CA lives with the inventory's other secrets (`[migration] tls_dir`, default `tls/` beside the
inventory file: a standby head node with a copy of that folder issues under the same CA): its key
is created on first use with mode 600 in a folder of mode 700. Each node's key and certificate are
issued here and installed over SSH into `NODE_DIR` (the key mode 600), checked before every
migration and issued anew when missing, not signed by this CA, or within `RENEW_DAYS` of expiry.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from peakpack.orchestrator.domain.errors import NodeError, PeakpackError
from peakpack.orchestrator.domain.model import Inventory, NodeSpec
from peakpack.orchestrator.domain.settings import MigrationSettings
from peakpack.orchestrator.remote import SshPool

#: on every node (the lab gives each node its own /etc/criu)
NODE_DIR = "/etc/criu/peakpack-tls"
CA_FILE, CERT_FILE, KEY_FILE = f"{NODE_DIR}/ca.pem", f"{NODE_DIR}/node.pem", f"{NODE_DIR}/node.key"
CA_DAYS, NODE_DAYS, RENEW_DAYS = 3650, 90, 30
#: what a migration's runc.conf block and the daemons it starts say when TLS is on
CRIU_OPTIONS = ("tls", f"tls-cacert {CA_FILE}", f"tls-cert {CERT_FILE}", f"tls-key {KEY_FILE}", "tls-no-cn-verify")


def ca_folder(settings: MigrationSettings, inventory: Inventory) -> Path:
    """Where the cluster CA lives: `[migration] tls_dir`, else `tls/` beside the inventory file, else
    in the user's data folder (an inventory not read from a file)."""
    if settings.tls_dir is not None:
        return settings.tls_dir
    if inventory.source is not None and inventory.source.is_file():
        return inventory.source.resolve().parent / "tls"
    from platformdirs import user_data_dir  # lazy: only when no inventory file says where

    return Path(user_data_dir("peakpack")) / "tls"


@dataclass(frozen=True)
class Authority:
    """The cluster CA: its certificate and key, loaded from (or created in) `folder`."""

    folder: Path
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def open(cls, folder: Path, now: dt.datetime | None = None) -> Authority:
        """The CA in `folder`, created there on first use (key mode 600, folder mode 700)."""
        now = now or dt.datetime.now(dt.UTC)
        cert_path, key_path = folder / "ca.pem", folder / "ca.key"
        if cert_path.exists() and key_path.exists():
            if key_path.stat().st_mode & 0o077:
                raise PeakpackError(f"[migration] tls_dir: {key_path}, the cluster CA's key, is readable by others; "
                                    "chmod 600 it (and make a new CA if anyone else could have read it)")
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise PeakpackError(f"[migration] tls_dir: {key_path} is not the EC key peakpack makes; move it away "
                                    "to make a new CA")
            return cls(folder, x509.load_pem_x509_certificate(cert_path.read_bytes()), key)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "peakpack cluster CA")])
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + dt.timedelta(days=CA_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False, encipher_only=False,
                                             decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        _write_private(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cls(folder, cert, key)

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, node: NodeSpec, now: dt.datetime | None = None) -> tuple[bytes, bytes]:
        """A new key and certificate for `node` (its name and address in it), PEM."""
        now = now or dt.datetime.now(dt.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = [x509.DNSName(node.name)]
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(node.address)))
        except ValueError:
            names.append(x509.DNSName(node.address))
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node.name)]))
                .issuer_name(self.cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + dt.timedelta(days=NODE_DAYS))
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH,
                                                      x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(self.key, hashes.SHA256()))
        return (key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()), cert.public_bytes(serialization.Encoding.PEM))

    def signed(self, cert: x509.Certificate) -> bool:
        """Whether this CA signed `cert`."""
        try:
            self.key.public_key().verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, ValueError, TypeError):
            return False
        return cert.issuer == self.cert.subject


@dataclass(frozen=True)
class NodeCert:
    """What a node holds: whether its CRIU speaks TLS, and its certificate (None: none, or not one
    the CA file beside it names)."""

    criu_tls: bool
    cert: x509.Certificate | None
    ca_matches: bool

    def expires(self) -> dt.datetime | None:
        return None if self.cert is None else self.cert.not_valid_after_utc


#: what `read` asks a node: does its CRIU link gnutls, and its CA and certificate files (base64)
READ_SCRIPT = r"""
if ldd "$(command -v criu)" 2>/dev/null | grep -q gnutls; then echo "criu_tls yes"; else echo "criu_tls no"; fi
echo "ca $(base64 -w0 "$1" 2>/dev/null)"
echo "cert $(base64 -w0 "$2" 2>/dev/null)"
"""
#: installing a node's files: each written beside, then renamed (the key never readable by others)
INSTALL_SCRIPT = r"""
set -e
umask 077
mkdir -p "$1"
read -r ca; read -r cert; read -r key
echo "$key" | base64 -d > "$1/node.key.new"
echo "$cert" | base64 -d > "$1/node.pem.new"
echo "$ca" | base64 -d > "$1/ca.pem.new"
chmod 600 "$1/node.key.new"; chmod 644 "$1/node.pem.new" "$1/ca.pem.new"
mv -f "$1/node.key.new" "$1/node.key"; mv -f "$1/node.pem.new" "$1/node.pem"; mv -f "$1/ca.pem.new" "$1/ca.pem"
"""


async def read(ssh: SshPool, node: str, ca: Authority) -> NodeCert:
    """What `node` holds, judged against `ca`."""
    res = await ssh.run(node, ["sh", "-c", READ_SCRIPT, "sh", CA_FILE, CERT_FILE], timeout=30)
    fields = dict(line.partition(" ")[::2] for line in res.stdout.splitlines())
    cert = None
    try:
        if fields.get("cert", "").strip():
            cert = x509.load_pem_x509_certificate(base64.b64decode(fields["cert"]))
        their_ca = base64.b64decode(fields.get("ca", "").strip() or b"")
    except ValueError:
        raise NodeError(node, f"its TLS files answered something unexpected: {res.stdout[:80]!r}") from None
    return NodeCert(fields.get("criu_tls") == "yes", cert if cert is not None and ca.signed(cert) else None,
                    their_ca == ca.pem)


def needs_issue(held: NodeCert, now: dt.datetime) -> str | None:
    """Why a node's certificate must be issued anew (None: it may stay)."""
    if held.cert is None:
        return "none signed by this cluster's CA"
    if not held.ca_matches:
        return "its CA file is not this cluster's"
    if held.cert.not_valid_after_utc - now < dt.timedelta(days=RENEW_DAYS):
        return f"it expires {held.cert.not_valid_after_utc:%Y-%m-%d}"
    return None


async def ensure(ssh: SshPool, node: NodeSpec, ca: Authority, now: dt.datetime | None = None) -> str | None:
    """The node ready for TLS page streams: its CRIU speaks TLS (else a one-line refusal naming the
    way round it), and it holds a current certificate of this CA (issued and installed if not).
    Returns what was done (None: nothing)."""
    now = now or dt.datetime.now(dt.UTC)
    held = await read(ssh, node.name, ca)
    if not held.criu_tls:
        raise NodeError(node.name, "its CRIU was built without TLS (it does not link gnutls); rebuild it with "
                                   "libgnutls28-dev (scripts/build-criu.sh), or set [migration] tls = false "
                                   "(the pages then cross the network in clear: docs/migration.md, Threat model)")
    why = needs_issue(held, now)
    if why is None:
        return None
    key, cert = ca.issue(node, now)
    payload = "\n".join(base64.b64encode(x).decode() for x in (ca.pem, cert, key)) + "\n"
    await ssh.run(node.name, ["sh", "-c", INSTALL_SCRIPT, "sh", NODE_DIR], input=payload, timeout=30)
    return f"{node.name}: TLS certificate issued ({why})"


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
