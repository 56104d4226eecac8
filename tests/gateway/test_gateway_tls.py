"""The gateway's client port over TLS (``router.gateway.tls``) on the real nginx the stack ships
(1.26.3 with njs 0.8.9, OpenSSL 3.5 from Debian trixie), with the nginx.conf ``compile_gateway``
renders for a stack with TLS on: the openai SDK verifies the certificate and its name with the
issuer's CA; plain HTTP on that port is refused; only TLSv1.2 (AEAD suites) and TLSv1.3 are
spoken; TLSv1.2 sessions resume from the shared cache (no tickets); a renewed certificate is served
without a restart; the health port stays plain.

The certificates are made here with the openssl CLI, laid out as cert-manager's CA issuer writes
the Secret (``tls.crt`` the leaf, ``tls.key``; the CA is the client's to trust)."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

import openai
import pytest

from components.compile.gateway import settings as gateway_settings
from components.config import load_stack_config
from testkit.fake_router import FakeRouter
from testkit.nginx_kit import Gateway
from tests.support.builders import model

MODEL = "chat"
# The name the client calls and verifies: resolves to the loopback nginx listens on.
HOST = "localhost"


@dataclass(frozen=True)
class Issued:
    ca: Path
    chain: bytes
    key: bytes


class Issuer:
    """A CA (openssl) that signs leaves for server names, as cert-manager's CA issuer does."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.count = 0
        self._run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=gateway-test-ca",
                  "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        self.ca = directory / "ca.crt"

    def _run(self, *argv: str) -> None:
        subprocess.run(["openssl", *argv], check=True, capture_output=True, cwd=self.dir, timeout=60)

    def leaf(self, *names: str) -> Issued:
        self.count += 1
        stem = f"leaf{self.count}"
        self._run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-keyout", f"{stem}.key", "-out", f"{stem}.csr", "-subj", f"/CN={names[0]}")
        (self.dir / f"{stem}.ext").write_text(
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
            "subjectAltName=" + ",".join(f"DNS:{n}" for n in names) + "\n")
        self._run("x509", "-req", "-in", f"{stem}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                  "-out", f"{stem}.crt", "-days", "2", "-extfile", f"{stem}.ext")
        return Issued(self.ca, (self.dir / f"{stem}.crt").read_bytes(), (self.dir / f"{stem}.key").read_bytes())


def rendered_settings(fake: FakeRouter):
    """What compile_gateway renders for a stack with the gateway's TLS on (the router's address
    replaced by the stand-in's, the paths by the kit's)."""
    stack = load_stack_config({
        "models": [model(MODEL)],
        "router": {"image": "nvcr.io/nvidia/llm-request-router:0.16.2", "gateway": {"tls": {"enabled": True}}},
    })
    resolved = gateway_settings(stack)
    assert resolved.tls_dir is not None, "the stack's TLS setting did not reach the gateway's settings"
    return replace(resolved, upstream=f"127.0.0.1:{fake.port}")


@pytest.fixture(scope="module")
def issuer(tmp_path_factory):
    return Issuer(tmp_path_factory.mktemp("issuer"))


@pytest.fixture(scope="module")
def fake():
    with FakeRouter(models=(MODEL,)) as router:
        yield router


@pytest.fixture(scope="module")
def gateway(fake, issuer):
    first = issuer.leaf(HOST)
    with Gateway(rendered_settings(fake), tls=(first.chain, first.key)) as gw:
        yield gw


def url(gw: Gateway, path: str = "") -> str:
    return f"https://{HOST}:{gw.port}{path}"


def trusting(ca: Path, **versions) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))  # verifies the chain and the host name
    for name, value in versions.items():
        setattr(context, name, value)
    return context


def handshake(gw: Gateway, context: ssl.SSLContext) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
    return context.wrap_socket(raw, server_hostname=HOST)


def test_the_openai_sdk_calls_the_gateway_over_https_verifying_it_with_the_ca(gateway, fake, issuer):
    http_client = openai.DefaultHttpxClient(verify=trusting(issuer.ca))
    sdk = openai.OpenAI(base_url=url(gateway, "/v1"), api_key="unused", max_retries=0, timeout=20,
                        http_client=http_client)
    answer = sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}])
    assert answer.choices[0].message.content == "Hello from the fake engine"
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in sdk.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], stream=True) if chunk.choices)
    assert streamed == "Hello from the fake engine"
    assert [m.id for m in sdk.models.list()] == [MODEL]
    assert fake.requests, "nothing reached the router"


def test_a_certificate_for_another_name_fails_verification(fake, issuer):
    other = issuer.leaf("gateway.elsewhere.test")
    with Gateway(rendered_settings(fake), tls=(other.chain, other.key)) as gw:
        sdk = openai.OpenAI(base_url=url(gw, "/v1"), api_key="unused", max_retries=0, timeout=10,
                            http_client=openai.DefaultHttpxClient(verify=trusting(issuer.ca)))
        with pytest.raises(openai.APIConnectionError) as caught:
            sdk.models.list()
        cause = caught.value.__cause__
        while cause is not None and not isinstance(cause, ssl.SSLCertVerificationError):
            cause = cause.__cause__ or cause.__context__
        assert isinstance(cause, ssl.SSLCertVerificationError) and "hostname" in str(cause).lower()


def test_plain_http_on_the_tls_port_is_refused_before_anything_runs(gateway, fake):
    fake.requests.clear()
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer k\r\n"
                     b"Connection: close\r\n\r\n")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), head
    assert json.loads(body)["error"]["code"] == "https_required"
    assert not fake.requests, "a plain-HTTP request reached the router"


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")  # the old client, on purpose
def test_only_tls_1_2_with_aead_suites_and_tls_1_3_are_spoken(gateway, issuer):
    with handshake(gateway, trusting(issuer.ca)) as tls:
        assert tls.version() == "TLSv1.3"
    tls12 = trusting(issuer.ca, maximum_version=ssl.TLSVersion.TLSv1_2)
    with handshake(gateway, tls12) as tls:
        assert tls.version() == "TLSv1.2"
        assert tls.cipher()[0] in ("ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
                                   "ECDHE-ECDSA-CHACHA20-POLY1305")
    # A TLSv1.2 client offering only a CBC suite (which the server's OpenSSL would take by default).
    cbc = trusting(issuer.ca, maximum_version=ssl.TLSVersion.TLSv1_2)
    cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA256")
    with pytest.raises(ssl.SSLError):
        handshake(gateway, cbc).close()
    old = trusting(issuer.ca, minimum_version=ssl.TLSVersion.TLSv1, maximum_version=ssl.TLSVersion.TLSv1_1)
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    with pytest.raises(ssl.SSLError):
        handshake(gateway, old).close()


def test_a_renewed_certificate_is_served_to_new_connections_without_a_restart(fake, issuer):
    first, renewed = issuer.leaf(HOST), issuer.leaf(HOST)
    with Gateway(rendered_settings(fake), tls=(first.chain, first.key)) as gw:
        pid = gw.proc.pid

        def served() -> bytes:
            with handshake(gw, trusting(issuer.ca)) as tls:
                return ssl.DER_cert_to_PEM_cert(tls.getpeercert(binary_form=True)).encode()

        assert served().strip() == first.chain.strip()
        gw.write_tls(renewed.chain, renewed.key)  # what the kubelet does when cert-manager renews
        assert served().strip() == renewed.chain.strip()
        assert gw.proc.poll() is None and gw.proc.pid == pid


def test_the_health_and_metrics_port_stays_plain_http(gateway):
    health = f"http://127.0.0.1:{gateway.health_port}"
    with urllib.request.urlopen(f"{health}/healthz", timeout=5) as reply:
        assert reply.status == 200
    with urllib.request.urlopen(f"{health}/metrics", timeout=5) as reply:
        assert reply.status == 200


def test_tls_1_2_sessions_resume_from_the_shared_cache_without_tickets(gateway, issuer):
    context = trusting(issuer.ca, maximum_version=ssl.TLSVersion.TLSv1_2)
    with handshake(gateway, context) as first:
        session = first.session
        assert not first.session_reused
        assert not session.has_ticket  # tickets are off: the session lives in nginx's cache
    raw = socket.create_connection(("127.0.0.1", gateway.port), timeout=5)
    with context.wrap_socket(raw, server_hostname=HOST, session=session) as second:
        assert second.session_reused
