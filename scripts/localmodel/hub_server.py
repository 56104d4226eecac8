"""A minimal Hugging Face Hub-compatible HTTP server: the Hub stand-in `scripts/up-local.sh` serves the
local stack's weights from (on the real node's bridge address, scripts/localmodel/hub.py), and the
one the tests and the benchmark pull from (on 127.0.0.1). Standard library only.

Only the endpoints that `hf download` (the puller's huggingface_hub 0.35.3 with hf_transfer, and
2.4.0 of the program's own venv; snapshot download to a ``--local-dir``) and the preflight's
`HfApi.model_info` / file HEAD actually call, read from the clients' sources:

    GET  /api/models/{repo}[/revision/{rev}][?blobs=True]   model_info / repo_info: sha, siblings
    GET  /api/models/{repo}/tree/{rev}[/{path}]?recursive=   list_repo_tree (one page, no Link)
    HEAD /{repo}/resolve/{rev}/{path}                        file metadata: X-Repo-Commit, ETag,
                                                             Content-Length, and for LFS files
                                                             X-Linked-Etag / X-Linked-Size
                                                             (get_hf_file_metadata reads those first;
                                                             the client records the commit and the
                                                             ETag, which the puller's verify step
                                                             hashes the file against: the sha256 of
                                                             an LFS file, the git blob id of others)
    GET  /{repo}/resolve/{rev}/{path}                        the bytes; any `Range: bytes=A-[B]` →
                                                             206 with Content-Range

Ranges are what hf_transfer needs (HF_HUB_ENABLE_HF_TRANSFER=1, files over 50 MiB): it probes
with ``bytes=0-0`` and reads the size after the ``/`` of Content-Range, then fetches 10 MiB closed
ranges ``bytes=A-B`` on up to 100 connections; its last range may end past the last byte, which
is clamped to the file as RFC 9110 says. The LFS redirect to a CDN is not modelled: the bytes
come from the resolve URL itself, as from a mirror.

Errors carry the hub's ``X-Error-Code`` (RepoNotFound, RevisionNotFound, EntryNotFound,
GatedRepo) so that huggingface_hub raises the same typed errors it raises against the hub.
Access follows the hub: a private repo answers 401 without a token and 404 to a token without
access; a gated repo's metadata is public but its files answer 401 without a token and 403
(GatedRepo) to a token without access.

No Xet: responses never carry ``X-Xet-*`` headers and tree entries have no ``xetHash``, so the
client takes its plain-HTTP path (the one a mirror serves). Faults for tests: drop the
connection mid-file (once or every time, on any GET or only on hf_transfer's chunk requests),
stall a file until released, or serve a file with one byte changed under its true headers (a
mirror or proxy that alters bodies). Every request is recorded.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional, Union
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
CHUNK = 1 << 20


@dataclass(frozen=True)
class Blob:
    """One stored file: its bytes live on disk so large files are served with sendfile."""

    path: Path
    size: int
    sha256: str
    git_oid: str
    lfs: bool


@dataclass
class Repo:
    repo_id: str
    refs: dict[str, str] = field(default_factory=dict)           # branch / tag -> commit
    commits: dict[str, dict[str, Blob]] = field(default_factory=dict)
    private: bool = False
    gated: bool = False
    allowed_tokens: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: Optional[str]
    authorization: bool


class HubServer:
    """``with HubServer(tmp_dir) as hub: ...``; ``hub.url`` is the endpoint."""

    def __init__(self, root: Path, connection_rate: Optional[int] = None, host: str = "127.0.0.1",
                 port: int = 0):
        """``connection_rate``: cap every connection at that many bytes/s (the bench's model of a
        link where one TCP stream cannot fill the pipe: a far mirror, a per-connection CDN cap).
        ``host``: the address to listen on (the real node's pods reach the host on its bridge
        address, 10.88.0.1; never an address outside the machine). ``port``: 0 picks a free one;
        the Hub stand-in of up-local listens where the local stack's `hfEndpoint` says."""
        self.root = Path(root)
        self.host = host
        self.port = port
        self.connection_rate = connection_rate
        self.blobs_dir = self.root / "blobs"
        self.blobs_dir.mkdir(parents=True, exist_ok=True)
        self.repos: dict[str, Repo] = {}
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._drops: dict[str, _Drop] = {}        # file path -> when and after how many bytes to cut
        self._stalls: dict[str, threading.Event] = {}
        self._altered: set[str] = set()
        self.stalled = threading.Event()           # set when a stalled file's body has started
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    # -- content -------------------------------------------------------------------------------

    def store(self, content: Union[bytes, Path], lfs: bool) -> Blob:
        """Keep one file's bytes (or an existing file, by path) and its hub identities."""
        sha256, sha1 = hashlib.sha256(), hashlib.sha1()
        if isinstance(content, Path):
            size = content.stat().st_size
            sha1.update(b"blob %d\0" % size)
            with content.open("rb") as handle:
                while chunk := handle.read(CHUNK):
                    sha256.update(chunk)
                    sha1.update(chunk)
            target = content
        else:
            size = len(content)
            sha256.update(content)
            sha1.update(b"blob %d\0" % size + content)
            target = self.blobs_dir / sha256.hexdigest()
            target.write_bytes(content)
        # LFS files are identified by their sha256 (ETag); regular files by their git blob id.
        return Blob(target, size, sha256.hexdigest(), sha1.hexdigest(), lfs)

    def commit(self, repo_id: str, files: dict[str, Union[bytes, Path]], branch: str = "main",
               tags: tuple[str, ...] = (), **repo_flags) -> str:
        """Add a commit holding exactly ``files`` and point ``branch`` (and ``tags``) at it."""
        repo = self.repos.setdefault(repo_id, Repo(repo_id))
        for name, value in repo_flags.items():
            setattr(repo, name, value)
        blobs = {path: self.store(content, path.endswith(LFS_SUFFIXES)) for path, content in files.items()}
        digest = hashlib.sha1(json.dumps(
            [repo_id, len(repo.commits), sorted((p, b.sha256) for p, b in blobs.items())]
        ).encode()).hexdigest()
        repo.commits[digest] = blobs
        for ref in (branch, *tags):
            repo.refs[ref] = digest
        return digest

    def drop_once(self, path: str, after_bytes: int, chunks_only: bool = False, times: int = 1) -> None:
        """The next GET of ``path`` sends ``after_bytes`` of the body, then closes the connection.

        ``chunks_only``: only a GET for a closed range past the first byte counts (hf_transfer's
        chunk requests, not its ``bytes=0-0`` probe nor the client's first plain GET).
        ``times``: cut that many such GETs, not just one.
        """
        self._drops[path] = _Drop(after_bytes, chunks_only, times)

    def stall(self, path: str) -> threading.Event:
        """GETs of ``path`` send half the body, then wait until the returned event is set."""
        event = threading.Event()
        self._stalls[path] = event
        return event

    def alter(self, path: str) -> None:
        """Every GET of ``path`` from now on sends its bytes with the middle one changed, under the
        headers of the true file (its ETag, X-Linked-Etag and length)."""
        self._altered.add(path)

    def gets(self, path_suffix: str = "") -> list[Request]:
        return [r for r in self.requests if r.method == "GET" and "/resolve/" in r.path
                and r.path.endswith(path_suffix)]

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubServer:
        hub = self

        class Handler(_Handler):
            server_hub = hub

        self._server = _Server((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="hf-test-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        for event in self._stalls.values():
            event.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- resolution ----------------------------------------------------------------------------

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def _take_drop(self, path: str, closed_range: bool) -> Optional[int]:
        with self._lock:
            drop = self._drops.get(path)
            if drop is None or (drop.chunks_only and not closed_range):
                return None
            drop.times -= 1
            if drop.times <= 0:
                del self._drops[path]
            return drop.after_bytes


@dataclass
class _Drop:
    after_bytes: int
    chunks_only: bool
    times: int


class _Server(ThreadingHTTPServer):
    # socketserver's listen backlog is 5: hf_transfer opens up to 100 connections per file at
    # once, and connects beyond the backlog wait for SYN retransmits (1 s, 3 s...), which made
    # the server, not the client, the limit of a ranged pull.
    request_queue_size = 1024


class HubError(Exception):
    def __init__(self, status: int, code: Optional[str], message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


# /api/models/{owner}/{name}[/revision/{rev}] | /api/models/{owner}/{name}/tree/{rev}[/{path}]
_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/(?P<kind>revision|tree)/(?P<rest>.+))?$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_hub: HubServer

    def log_message(self, format, *args):  # noqa: A002 - quiet test output
        pass

    # -- plumbing ------------------------------------------------------------------------------

    def _token(self) -> Optional[str]:
        value = self.headers.get("Authorization", "")
        return value[7:] if value.startswith("Bearer ") else None

    def _send(self, status: int, body: bytes = b"", headers: Optional[dict] = None,
              content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, error: HubError, commit: Optional[str] = None) -> None:
        headers = {"X-Error-Message": error.message}
        if error.code:
            headers["X-Error-Code"] = error.code
        if commit:
            headers["X-Repo-Commit"] = commit
        self._send(error.status, json.dumps({"error": error.message}).encode(), headers)

    def _repo(self, repo_id: str, for_files: bool) -> Repo:
        hub, token = self.server_hub, self._token()
        repo = hub.repos.get(repo_id)
        if repo is None or (repo.private and token not in repo.allowed_tokens):
            # The hub hides private repos: 401 without a token, 404 with one that lacks access.
            raise HubError(401 if token is None else 404, "RepoNotFound", "Repository not found")
        if repo.gated and for_files and token not in repo.allowed_tokens:
            if token is None:
                raise HubError(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must "
                               "have access to it and be authenticated to access it. Please log in.")
            raise HubError(403, "GatedRepo", f"Access to model {repo_id} is restricted and you are "
                           "not in the authorized list.")
        return repo

    @staticmethod
    def _commit(repo: Repo, revision: str) -> str:
        revision = unquote(revision)
        if revision in repo.refs:
            return repo.refs[revision]
        if revision in repo.commits:
            return revision
        raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")

    # -- verbs ---------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        self.server_hub._record(Request(self.command, url.path, self.headers.get("Range"),
                                        "Authorization" in self.headers))
        try:
            if match := _API.match(url.path):
                if self.command != "GET":
                    raise HubError(405, None, "method not allowed")
                self._api(match, parse_qs(url.query))
            elif match := _RESOLVE.match(url.path):
                self._resolve(match)
            else:
                raise HubError(404, None, f"no route for {url.path}")
        except HubError as error:
            self._error(error)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _api(self, match: re.Match, query: dict) -> None:
        repo = self._repo(match["repo"], for_files=False)
        kind, rest = match["kind"], match["rest"]
        if kind == "tree":
            revision, _, prefix = rest.partition("/")
            commit = self._commit(repo, revision)
            self._send(200, json.dumps(self._tree(repo.commits[commit], unquote(prefix))).encode())
            return
        commit = self._commit(repo, rest or "main")
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for path, blob in sorted(repo.commits[commit].items()):
            sibling: dict = {"rfilename": path}
            if blobs:
                sibling.update(size=blob.size, blobId=blob.git_oid)
                if blob.lfs:
                    sibling["lfs"] = {"size": blob.size, "sha256": blob.sha256, "pointerSize": 134}
            siblings.append(sibling)
        body = {
            "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24], "id": repo.repo_id,
            "modelId": repo.repo_id, "author": repo.repo_id.split("/")[0], "sha": commit,
            "private": repo.private, "gated": "manual" if repo.gated else False, "disabled": False,
            "tags": [], "siblings": siblings,
        }
        self._send(200, json.dumps(body).encode())

    @staticmethod
    def _tree(files: dict[str, Blob], prefix: str) -> list[dict]:
        entries, folders = [], set()
        for path, blob in sorted(files.items()):
            if prefix and not path.startswith(prefix.rstrip("/") + "/"):
                continue
            parts = path.split("/")
            for depth in range(1, len(parts)):
                folders.add("/".join(parts[:depth]))
            entry: dict = {"type": "file", "oid": blob.git_oid, "size": blob.size, "path": path}
            if blob.lfs:
                entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": 134}
            entries.append(entry)
        entries += [{"type": "directory", "oid": hashlib.sha1(f.encode()).hexdigest(), "size": 0, "path": f}
                    for f in sorted(folders) if not prefix or f.startswith(prefix)]
        return entries

    def _resolve(self, match: re.Match) -> None:
        repo = self._repo(match["repo"], for_files=True)
        commit = self._commit(repo, match["rev"])
        path = unquote(match["path"])
        blob = repo.commits[commit].get(path)
        if blob is None:
            raise HubError(404, "EntryNotFound", f"{path} does not exist at {commit}")
        etag = blob.sha256 if blob.lfs else blob.git_oid
        start, end = 0, blob.size - 1
        requested = self.headers.get("Range") if self.command == "GET" else None
        if requested:
            found = re.fullmatch(r"bytes=(\d+)-(\d*)", requested.strip())
            if not found or int(found[1]) >= blob.size or (found[2] and int(found[2]) < int(found[1])):
                raise HubError(416, None, f"unsatisfiable range {requested}")
            start = int(found[1])
            if found[2]:
                end = min(int(found[2]), blob.size - 1)
        count = end - start + 1
        self.send_response(206 if requested else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(count))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{etag}"')
        self.send_header("X-Repo-Commit", commit)
        if blob.lfs:
            # What the hub sends beside an LFS file's redirect; the client prefers them to
            # ETag/Content-Length (which, on the hub, describe the redirect response).
            self.send_header("X-Linked-Etag", f'"{etag}"')
            self.send_header("X-Linked-Size", str(blob.size))
        if requested:
            self.send_header("Content-Range", f"bytes {start}-{end}/{blob.size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        hub = self.server_hub
        closed_chunk = bool(requested and found[2] and end > 0)
        drop_after = hub._take_drop(path, closed_chunk)
        stall = hub._stalls.get(path)
        with blob.path.open("rb") as handle:
            if path in hub._altered:
                body = bytearray(_read_at(handle, start, count))
                flip = blob.size // 2 - start
                if 0 <= flip < len(body):
                    body[flip] ^= 0x01
                self.wfile.write(bytes(body))
                return
            if drop_after is not None:
                self.wfile.write(_read_at(handle, start, min(drop_after, count)))
                self.wfile.flush()
                self._hang_up()
                return
            if stall is not None:
                self.wfile.write(_read_at(handle, start, count // 2))
                self.wfile.flush()
                hub.stalled.set()
                stall.wait(timeout=120)
                self._hang_up()
                return
            self.wfile.flush()
            if hub.connection_rate:
                _send_paced(self.connection, handle, start, count, hub.connection_rate)
            else:
                _sendfile(self.connection, handle, start, count)

    def _hang_up(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _read_at(handle, offset: int, count: int) -> bytes:
    handle.seek(offset)
    return handle.read(count)


def _sendfile(connection: socket.socket, handle, offset: int, count: int) -> None:
    """Send ``count`` bytes of ``handle`` from ``offset``: zero-copy when the OS allows it."""
    try:
        connection.sendfile(handle, offset, count)
    except (AttributeError, OSError):
        handle.seek(offset)
        remaining = count
        while remaining:
            chunk = handle.read(min(CHUNK, remaining))
            if not chunk:
                break
            connection.sendall(chunk)
            remaining -= len(chunk)


def _send_paced(connection: socket.socket, handle, offset: int, count: int, rate: int) -> None:
    """``_sendfile`` in 1 MiB slices, sleeping so the connection averages ``rate`` bytes/s."""
    began, sent = time.monotonic(), 0
    while sent < count:
        piece = min(CHUNK, count - sent)
        connection.sendfile(handle, offset + sent, piece)
        sent += piece
        ahead = began + sent / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
