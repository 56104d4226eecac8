"""How the gateway follows the router's Service name: nginx's own resolver, fed at container start.

An ``upstream`` block's server name is resolved once, when nginx starts (open-source nginx 1.26
has no ``resolve`` parameter on upstream servers; it arrived in 1.27.3): a router Service deleted
and re-created with a new ClusterIP would be dialled at the old address until the pods restart.
So nginx.conf proxies to a variable holding the name, which nginx resolves at request time with
its ``resolver`` and caches for ``valid=``.

Where the resolver's address comes from: the pod's own ``/etc/resolv.conf``, read by the
container's start command, which writes ``resolver.conf`` (included by nginx.conf) into the
scratch dir before it execs nginx. That file is what the kubelet wrote for this pod: the
cluster DNS Service, a node-local cache (169.254.20.10) or a ``dnsConfig`` the platform set, with
no name of the DNS Service to guess (``kube-dns`` is not every distribution's) and no config
field to keep in step. nginx's resolver applies no search list, so the router's name is written
fully qualified (``<name>.<namespace>.svc.cluster.local``).

``valid=5s``: CoreDNS answers Service records with a 5 s TTL (its kubernetes plugin's default),
so a re-created Service is followed within about 5 s of its DNS record changing, for at most one
lookup per worker process every 5 s while requests flow. Nothing else is lost: the gateway talks
to the router over HTTP/1.0, one connection per request (nginx.py), so there is no upstream
keepalive pool that a variable ``proxy_pass`` would give up.
"""

from __future__ import annotations

RESOLVER_FILE = "resolver.conf"
RESOLVER_VALID = "5s"
RESOLV_CONF = "/etc/resolv.conf"


def resolver_line(addresses: list[str]) -> str:
    """resolver.conf's text for these DNS servers (``host`` or ``host:port``; IPv6 in brackets)."""
    return f"resolver {' '.join(addresses)} valid={RESOLVER_VALID};\n"


def write_resolver_script(scratch_dir: str, resolv_conf: str = RESOLV_CONF) -> str:
    """POSIX sh (dash, busybox) that writes ``<scratch_dir>/resolver.conf`` as ``resolver_line``
    does from the ``nameserver`` lines of ``resolv_conf``, and fails when there is none (nginx
    could not resolve the router then: better a pod that does not start than one that 502s)."""
    return f"""addresses=""
while read -r key value rest || [ -n "$key" ]; do
  if [ "$key" = nameserver ] && [ -n "$value" ]; then
    case "$value" in *:*) value="[$value]" ;; esac
    addresses="$addresses $value"
  fi
done < {resolv_conf}
if [ -z "$addresses" ]; then
  echo "gateway: no nameserver in {resolv_conf}; nginx could not resolve the router" >&2
  exit 1
fi
printf 'resolver%s valid={RESOLVER_VALID};\\n' "$addresses" > {scratch_dir}/{RESOLVER_FILE}"""


def start_command(scratch_dir: str, nginx_argv: list[str]) -> list[str]:
    """The container's command: resolver.conf from the pod's resolv.conf, then nginx (exec'd, so
    it is the container's main process and gets its signals)."""
    return ["/bin/sh", "-c", f"{write_resolver_script(scratch_dir)}\nexec {' '.join(nginx_argv)}"]
