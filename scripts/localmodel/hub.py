"""The Hub stand-in of `scripts/up-local.sh`: serves a directory's files as Hub repositories at
the local stack's `platform.hfEndpoint`, so the rendered puller pulls the local model the way it
pulls from huggingface.co (or a mirror). It listens on the real node's bridge address only
(10.88.0.1, which the node's pods reach and nothing outside the machine does), in the foreground
until SIGTERM; scripts/cluster/cluster.sh runs it in the background (`start-hub`) and stops it
with the cluster (`stop`).

    python3 scripts/localmodel/hub.py --endpoint http://10.88.0.1:18765 --repo llm-serving/tiny-chat --files DIR

Standard library only (the files are served from where they are, not copied).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run by path: hub_server beside it

from hub_server import HubServer


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", required=True, help="http://HOST:PORT, the stack's hfEndpoint")
    parser.add_argument("--repo", required=True, action="append", help="a repository id a model's source "
                        "names (repeat it: each holds the same files)")
    parser.add_argument("--files", required=True, type=Path, help="the directory whose files it holds")
    args = parser.parse_args(argv)
    where = urlsplit(args.endpoint)
    if where.scheme != "http" or not where.hostname or not where.port:
        parser.error(f"--endpoint {args.endpoint}: give http://HOST:PORT")
    files = {p.name: p for p in sorted(args.files.iterdir()) if p.is_file()}
    if not files:
        parser.error(f"--files {args.files}: no files there")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with tempfile.TemporaryDirectory(prefix="llm-serving-hub-") as scratch, \
            HubServer(Path(scratch), host=where.hostname, port=where.port) as hub:
        for repo in args.repo:
            commit = hub.commit(repo, files)
            print(f"[hub] serving {repo} (main = {commit}, {len(files)} files from {args.files}) at {hub.url}",
                  flush=True)
        stop.wait()
    print("[hub] stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
