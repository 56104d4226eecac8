#!/usr/bin/env bash
# The nginx the gateway ships (1.26.3 with njs 0.8.9, the official image's) for the tests: Debian
# 13 (trixie) packages exactly these. Debian 12's njs 0.7.9 lacks what the gateway uses
# (js_shared_dict_zone, js_periodic), so the packages are unpacked, not installed, into a cache
# directory with the libraries they were built against (trixie's glibc, OpenSSL, PCRE2, libxml2),
# and run through that root's own dynamic loader (tests/gateway/nginx_kit.py). Uses apt with a
# private source list and state, so the host's apt configuration is untouched. Prints the root.
set -euo pipefail
NGINX_VERSION=1.26.3
NJS_VERSION=0.8.9
# Not under $HOME: the tests run nginx as nobody, which must reach the files.
CACHE=${LLM_GATEWAY_NGINX_CACHE:-/var/tmp/llm-serving}
ROOT=$CACHE/nginx-$NGINX_VERSION-njs-$NJS_VERSION
if [ -x "$ROOT/usr/sbin/nginx" ] && [ -f "$ROOT/.complete" ]; then
  echo "$ROOT"
  exit 0
fi
mkdir -p "$CACHE"
chmod a+rx "$CACHE"
WORK=$(mktemp -d "$CACHE/tmp.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/lists/partial" "$WORK/cache/archives/partial" "$WORK/debs" "$WORK/root"
cat > "$WORK/trixie.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
APT=(-o "Dir::Etc::sourcelist=$WORK/trixie.sources" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$WORK/lists"
     -o "Dir::Cache=$WORK/cache" -o APT::Sandbox::User=root)
apt-get "${APT[@]}" update -qq >&2
# nginx and its njs module, and every library they link (ldd of the unpacked files: glibc,
# libcrypt, PCRE2, OpenSSL + zlib/zstd, libxml2 + liblzma/ICU + the C++ runtime).
PACKAGES=(nginx nginx-common libnginx-mod-http-js libc6 libcrypt1 libpcre2-8-0 libssl3t64 zlib1g libzstd1
          libxml2 liblzma5 libicu76 libgcc-s1 libstdc++6)
(cd "$WORK/debs" && apt-get "${APT[@]}" download "${PACKAGES[@]}" >&2)
for deb in "$WORK"/debs/*.deb; do
  dpkg-deb -x "$deb" "$WORK/root"
done
LIB=$WORK/root/usr/lib/x86_64-linux-gnu
version=$("$LIB/ld-linux-x86-64.so.2" --library-path "$LIB" "$WORK/root/usr/sbin/nginx" -v 2>&1)
njs=$(ls "$WORK"/debs/libnginx-mod-http-js_*.deb)
case "$version" in
  *"nginx/$NGINX_VERSION"*) ;;
  *) echo "trixie's nginx is not $NGINX_VERSION ($version): update NGINX_VERSION and the docs" >&2; exit 1 ;;
esac
case "$njs" in
  *"_${NJS_VERSION}-"*) ;;
  *) echo "trixie's njs is not $NJS_VERSION ($njs): update NJS_VERSION and the docs" >&2; exit 1 ;;
esac
touch "$WORK/root/.complete"
rm -rf "$ROOT"
mv "$WORK/root" "$ROOT"
# nginx runs as an unprivileged user in the tests: it must read the root.
chmod -R a+rX "$ROOT"
echo "$ROOT"
