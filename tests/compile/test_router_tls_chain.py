"""The backend router's TLS chain sidecar: its rendered script, run by /bin/sh on local dirs.

The backend router trusts only its own --tls-cert-path file for its onward hop, so that file must
carry the issuing CA (the real binary's behaviour: tests/conformance/test_backend_router.py).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from components.compile.router import compile_router
from components.compile.router.names import TLS_MOUNT, TLS_SECRET_MOUNT
from components.config import load_stack_config
from tests.support.builders import model

IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"


def pem(body: str) -> str:
    return f"-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n"


def backend_pod(tls: dict) -> dict:
    stack = load_stack_config({"models": [model("chat")], "router": {"image": IMAGE, "replicas": 3, "tls": tls}})
    return compile_router(stack).backend_deployment["spec"]["template"]["spec"]


@pytest.fixture
def sidecar(tmp_path):
    spec = backend_pod({"enabled": True, "issuer": {"name": "internal-ca"}})
    [container] = spec["initContainers"]
    secret, chain = tmp_path / "secret", tmp_path / "chain"
    secret.mkdir()
    chain.mkdir()
    script = (container["command"][-1].replace(TLS_SECRET_MOUNT, str(secret)).replace(TLS_MOUNT, str(chain))
              .replace("sleep 10", "sleep 0.1"))
    procs = []

    def run(crt: str, ca: str | None) -> Path:
        (secret / "tls.crt").write_text(crt)
        (secret / "tls.key").write_text("KEY\n")
        if ca is not None:
            (secret / "ca.crt").write_text(ca)
        procs.append(subprocess.Popen(["/bin/sh", "-c", script]))
        return chain / "tls.crt"

    yield run
    for proc in procs:
        proc.kill()
        proc.wait(5)


def wait_for(path: Path, content: str) -> str:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text() == content:
            return content
        time.sleep(0.05)
    return path.read_text() if path.is_file() else "<missing>"


def test_the_sidecar_is_native_and_holds_the_backend_router_until_the_chain_exists():
    spec = backend_pod({"enabled": True})
    [container] = spec["initContainers"]
    assert container["restartPolicy"] == "Always"
    assert container["startupProbe"]["exec"]["command"] == ["test", "-s", f"{TLS_MOUNT}/tls.crt"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    [backend] = spec["containers"]
    assert backend["volumeMounts"] == [{"name": "stargate-tls-chain", "mountPath": TLS_MOUNT, "readOnly": True}]
    assert "--tls-cert-path=/etc/stargate/tls/tls.crt" in backend["args"]
    assert {"name": "stargate-tls-chain", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}} in spec["volumes"]


def test_no_tls_no_sidecar():
    assert "initContainers" not in backend_pod({"enabled": False})


def test_a_ca_issued_leaf_is_served_with_its_ca(sidecar):
    chain = sidecar(pem("LEAF"), pem("CA"))
    assert wait_for(chain, pem("LEAF") + pem("CA")) == pem("LEAF") + pem("CA")
    assert (chain.parent / "tls.key").read_text() == "KEY\n"


@pytest.mark.parametrize("crt, ca", [(pem("SELF"), pem("SELF")), (pem("LEAF") + pem("CA"), pem("CA")), (pem("LEAF"), None)],
                         ids=["self-signed", "secret-holds-the-chain", "no-ca"])
def test_the_ca_is_not_added_twice_or_invented(sidecar, crt, ca):
    chain = sidecar(crt, ca)
    assert wait_for(chain, crt) == crt


def test_a_renewed_leaf_reaches_the_chain(sidecar, tmp_path):
    chain = sidecar(pem("LEAF1"), pem("CA"))
    assert wait_for(chain, pem("LEAF1") + pem("CA")) == pem("LEAF1") + pem("CA")
    (tmp_path / "secret" / "tls.crt").write_text(pem("LEAF2"))
    assert wait_for(chain, pem("LEAF2") + pem("CA")) == pem("LEAF2") + pem("CA")
