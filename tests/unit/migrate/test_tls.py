"""The cluster CA and the nodes' certificates (migrate/tls.py), on a temporary folder: created on
first use with a key only its owner reads, a node's certificate names the node and is signed by
the CA, one signed by another CA or about to expire is issued anew, and what CRIU is told."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509

from peakpack.migrate import runc_conf, tls
from peakpack.orchestrator.domain.config import parse_inventory
from peakpack.orchestrator.domain.errors import PeakpackError
from tests.support.build import node_spec

NOW = dt.datetime(2026, 11, 28, tzinfo=dt.UTC)
NODE = node_spec("node-2", address="10.0.0.12", cpus=8, memory_mb=16384)


def test_the_ca_is_made_once_with_a_key_only_its_owner_reads(tmp_path: Path) -> None:
    ca = tls.Authority.open(tmp_path / "tls", NOW)
    assert oct((tmp_path / "tls").stat().st_mode & 0o777) == oct(0o700)
    assert oct((tmp_path / "tls" / "ca.key").stat().st_mode & 0o777) == oct(0o600)
    again = tls.Authority.open(tmp_path / "tls", NOW)
    assert again.pem == ca.pem  # the same CA: every node it issued stays trusted
    (tmp_path / "tls" / "ca.key").chmod(0o644)
    with pytest.raises(PeakpackError, match="readable by others; chmod 600 it"):
        tls.Authority.open(tmp_path / "tls", NOW)


def test_a_node_certificate_names_the_node_and_is_signed_by_the_ca(tmp_path: Path) -> None:
    ca = tls.Authority.open(tmp_path, NOW)
    _, pem = ca.issue(NODE, NOW)
    cert = x509.load_pem_x509_certificate(pem)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["node-2"]
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["10.0.0.12"]
    assert ca.signed(cert)
    assert not tls.Authority.open(tmp_path / "other", NOW).signed(cert)


def test_a_certificate_is_issued_anew_when_missing_foreign_or_due(tmp_path: Path) -> None:
    ca = tls.Authority.open(tmp_path, NOW)
    current = x509.load_pem_x509_certificate(ca.issue(NODE, NOW)[1])
    assert tls.needs_issue(tls.NodeCert(True, current, True), NOW) is None
    assert tls.needs_issue(tls.NodeCert(True, None, False), NOW) == "none signed by this cluster's CA"
    assert tls.needs_issue(tls.NodeCert(True, current, False), NOW) == "its CA file is not this cluster's"
    later = NOW + dt.timedelta(days=tls.NODE_DAYS - tls.RENEW_DAYS + 1)
    assert (tls.needs_issue(tls.NodeCert(True, current, True), later) or "").startswith("it expires 2027-02-26")


def test_criu_is_told_the_same_options_on_the_command_line_as_in_runc_conf() -> None:
    assert runc_conf.arguments(tls.CRIU_OPTIONS) == ["--tls", "--tls-cacert", tls.CA_FILE, "--tls-cert", tls.CERT_FILE,
                                                     "--tls-key", tls.KEY_FILE, "--tls-no-cn-verify"]


def test_tls_is_on_by_default_and_its_folder_is_the_inventorys(tmp_path: Path) -> None:
    base = ("[cluster]\nname = \"c\"\n[[nodes]]\nname = \"n1\"\naddress = \"10.0.0.1\"\ncpus = 4\nmemory_mb = 8192\n"
            "[nodes.power]\nidle_w = 100\nmax_w = 250\n")
    inv = parse_inventory(base, base=tmp_path, source=tmp_path / "inv.toml")
    assert inv.migration.tls and inv.migration.tls_dir is None
    (tmp_path / "inv.toml").write_text(base)
    assert tls.ca_folder(inv.migration, inv) == tmp_path / "tls"
    off = parse_inventory(base + '[migration]\ntls = false\ntls_dir = "secrets/ca"\n', base=tmp_path)
    assert not off.migration.tls and off.migration.tls_dir == (tmp_path / "secrets" / "ca").resolve()
