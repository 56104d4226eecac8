"""KEDA's real operator (scripts/toolchain/operators.sh builds it) as a host process against the
simulated cluster, watching one namespace: for the scale-to-zero test and bench/wake.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import IO

from .ports import free_port


def throwaway_certs(directory: Path) -> Path:
    """A self-signed certificate in ``directory`` (tls.crt, tls.key, ca.crt): the operator's
    metrics gRPC service (for KEDA's metrics server, absent here) will not start without one, and
    the operator stops with it."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=keda",
                    "-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt")],
                   check=True, capture_output=True)
    (directory / "ca.crt").write_bytes((directory / "tls.crt").read_bytes())
    return directory


def start_operator(binary: str, namespace: str, certs: Path, log: IO) -> subprocess.Popen:
    """The operator watching ``namespace`` only, its ports on loopback, its output to ``log``."""
    env = {**os.environ, "WATCH_NAMESPACE": namespace, "POD_NAMESPACE": namespace,
           "KEDA_CLUSTER_OBJECT_NAMESPACE": namespace}
    return subprocess.Popen(
        [binary, f"--metrics-bind-address=127.0.0.1:{free_port()}",
         f"--health-probe-bind-address=127.0.0.1:{free_port()}",
         f"--metrics-service-bind-address=127.0.0.1:{free_port()}", f"--cert-dir={certs}", f"--ca-dir={certs}"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
