"""The bed's two CAs have different names, as kubeadm's ``kubernetes`` and ``front-proxy-ca`` do.

kube-apiserver checks every client certificate against the request-header (front-proxy) CA before the
client CA (k8s.io/apiserver pkg/authentication/request/x509: ``Verifier`` then ``Authenticator``). Go's
chain builder picks candidate parents by the issuer's name, so when both CAs had one name every request
with a cluster-CA client certificate paid an ECDSA verification that could only fail: about 5 % of the
API server's CPU in the SchedulingWithMixedChurn bench (bench/RESULTS.md, "Client certificates")."""

from __future__ import annotations

from pathlib import Path

import bed  # tests/e2e/helpers puts tests/e2e/testbed on sys.path
from cryptography import x509

from tests.e2e.helpers import Testbed


def test_client_certificates_name_no_parent_among_the_front_proxy_cas(tmp_path: Path) -> None:
    tb: Testbed = bed.Testbed(tmp_path / "bed")
    tb._prepare(tmp_path / "bin")
    pki = tb.pki_dir
    cluster_ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    front_proxy_ca = x509.load_pem_x509_certificate((pki / "front-proxy" / "ca.crt").read_bytes())
    assert cluster_ca.subject != front_proxy_ca.subject
    for stem in ("admin", "kube-scheduler"):
        leaf = x509.load_pem_x509_certificate((pki / f"{stem}.crt").read_bytes())
        assert leaf.issuer == cluster_ca.subject, stem
    proxy_client = x509.load_pem_x509_certificate((pki / "front-proxy" / "client.crt").read_bytes())
    assert proxy_client.issuer == front_proxy_ca.subject


def test_a_kept_bed_with_one_ca_name_gets_a_front_proxy_ca_of_its_own(tmp_path: Path) -> None:
    tb: Testbed = bed.Testbed(tmp_path / "bed")
    bed._Pki(tb.pki_dir / "front-proxy", bed.CLUSTER_CA_NAME).issue("client", "front-proxy-client")  # the old bed
    tb._prepare(tmp_path / "bin")
    front_proxy_ca = x509.load_pem_x509_certificate((tb.pki_dir / "front-proxy" / "ca.crt").read_bytes())
    proxy_client = x509.load_pem_x509_certificate((tb.pki_dir / "front-proxy" / "client.crt").read_bytes())
    assert front_proxy_ca.subject.rfc4514_string() == f"CN={bed.FRONT_PROXY_CA_NAME}"
    assert proxy_client.issuer == front_proxy_ca.subject
