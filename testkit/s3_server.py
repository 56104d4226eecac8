"""A real S3-compatible server on 127.0.0.1 for the object-store puller tests: versitygw (posix
backend: a bucket is a folder) built from the Go module proxy by scripts/testtools/build.sh, with
the rclone built the same way beside it. Objects are uploaded through the S3 API (rclone), so
their ETags are the store's own (MD5 for one-part uploads, `<md5>-<parts>` for multipart ones).

``S3Server(..., kind="minio")`` is MinIO (one drive), built the same way, for object versions:
versitygw v1.8.0 lists a noncurrent version with the time it was superseded, MinIO with its own
(scripts/testtools/versions.sh), and "the bucket as it was at T" depends on those times.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import time
from pathlib import Path
from typing import Optional

import requests

from testkit.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "scripts" / "testtools" / "build.sh"
ACCESS_KEY = "llmservingtest"
SECRET_KEY = "llm-serving-test-secret-0123456789"
REGION = "us-east-1"


def tools_bin() -> Path:
    """The dir with rclone and versitygw; builds them (minutes, once per version) when missing."""
    subprocess.run(["bash", str(BUILD)], check=True, stdout=subprocess.DEVNULL)
    out = subprocess.run(["bash", str(BUILD), "--print-dir"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip()) / "bin"




class S3Server:
    def __init__(self, root: Path, bin_dir: Path, versioning: bool = False, kind: str = "versitygw"):
        self.root = root
        self.bin = bin_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.versioning = versioning
        self.kind = kind
        self.proc: Optional[subprocess.Popen] = None

    def _argv(self, data: Path) -> tuple[list[str], dict[str, str]]:
        if self.kind == "minio":
            # One drive; versioning is per bucket (enable_versioning). No console, no update checks.
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.root),
                   "MINIO_ROOT_USER": ACCESS_KEY, "MINIO_ROOT_PASSWORD": SECRET_KEY, "MINIO_REGION": REGION,
                   "MINIO_BROWSER": "off", "MINIO_UPDATE": "off", "MINIO_CI_CD": "1"}
            return [str(self.bin / "minio"), "server", "--quiet", "--address", f"127.0.0.1:{self.port}",
                    "--console-address", f"127.0.0.1:{free_port()}", str(data)], env
        argv = [str(self.bin / "versitygw"), "--access", ACCESS_KEY, "--secret", SECRET_KEY, "--region", REGION,
                "--port", f"127.0.0.1:{self.port}", "--quiet", "posix"]
        if self.versioning:
            (self.root / "versions").mkdir()
            argv += ["--versioning-dir", str(self.root / "versions")]
        return [*argv, str(data)], dict(os.environ)

    def __enter__(self) -> S3Server:
        data = self.root / "data"
        data.mkdir(parents=True)
        argv, env = self._argv(data)
        log = self.root / f"{self.kind}.log"
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self.kind != "minio" or requests.get(f"{self.url}/minio/health/ready", timeout=1).ok:
                    requests.get(self.url, timeout=1)
                    return self
            except requests.RequestException:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(log.read_text())
            time.sleep(0.1)
        raise RuntimeError(f"{self.kind} did not answer within 60 s")

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)

    # --- the store's admin side (uploads through the S3 API with rclone) ------------------------

    def admin_env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.root),
            "RCLONE_CONFIG_ADMIN_TYPE": "s3", "RCLONE_CONFIG_ADMIN_PROVIDER": "Other",
            "RCLONE_CONFIG_ADMIN_ENDPOINT": self.url, "RCLONE_CONFIG_ADMIN_REGION": REGION,
            "RCLONE_CONFIG_ADMIN_ACCESS_KEY_ID": ACCESS_KEY, "RCLONE_CONFIG_ADMIN_SECRET_ACCESS_KEY": SECRET_KEY,
        }

    def rclone(self, *args: str) -> subprocess.CompletedProcess:
        result = subprocess.run([str(self.bin / "rclone"), *args], env=self.admin_env(),
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return result

    def bucket(self, name: str) -> None:
        self.rclone("mkdir", f"admin:{name}")

    def enable_versioning(self, bucket: str) -> None:
        """PutBucketVersioning Enabled (versitygw must run with ``versioning=True``), signed by
        the preflight client's own SigV4 code."""
        from components.preflight.s3 import Credentials, signed_headers

        body = (b'<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                b"<Status>Enabled</Status></VersioningConfiguration>")
        url = f"{self.url}/{bucket}?versioning="
        headers = signed_headers("PUT", url, REGION, Credentials(ACCESS_KEY, SECRET_KEY), body=body)
        headers["Content-MD5"] = base64.b64encode(hashlib.md5(body).digest()).decode()
        response = requests.put(url, data=body, headers=headers, timeout=10)
        assert response.status_code == 200, response.text

    def delete(self, bucket: str, key: str) -> None:
        self.rclone("deletefile", f"admin:{bucket}/{key}")

    def upload(self, bucket: str, prefix: str, files: dict[str, bytes], multipart_over: Optional[int] = None,
               md5_metadata: bool = True, part_mib: int = 5) -> None:
        """Upload ``files`` (relative path -> bytes) under ``prefix``; files bigger than
        ``multipart_over`` bytes go up in ``part_mib`` MiB parts (a multipart ETag), with rclone's own
        ``x-amz-meta-md5chksum`` unless ``md5_metadata`` is false (as any other uploader: aws s3 cp,
        boto3)."""
        staging = self.root / "staging"
        for name, data in files.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        flags = ["--s3-upload-cutoff", f"{multipart_over}B", "--s3-chunk-size", f"{part_mib}M"] if multipart_over else []
        flags += [] if md5_metadata else ["--s3-disable-checksum"]
        self.rclone("copy", str(staging), f"admin:{bucket}/{prefix}".rstrip("/"), *flags)
        for path in sorted(staging.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        staging.rmdir()
