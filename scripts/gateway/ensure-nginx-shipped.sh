#!/usr/bin/env bash
# The nginx the stack ships (docker.io/library/nginx:1.26.3 with njs 0.8.9), for the gateway's
# tests on this Debian 12 machine: Debian 13 (trixie) packages exactly those versions (nginx
# 1.26.3, libnginx-mod-http-js 0.8.9). Nothing is installed into the system: the packages and
# the trixie libraries they need (glibc 2.41, OpenSSL 3.5, PCRE2, zlib, libxml2...) are fetched
# with apt-get download from a trixie source list used only for that download (its own lists
# and cache dirs), unpacked with dpkg-deb -x into a cache dir, and nginx runs under trixie's own
# dynamic loader with trixie's libraries first (a wrapper, printed last). Cached: a warm run is
# instant. The cache dir must be readable by the unprivileged user the tests run nginx as.
set -euo pipefail
VERSION_KEY="nginx-1.26.3-njs-0.8.9"
CACHE="${LLM_SERVING_NGINX_CACHE:-/var/cache/llm-serving-nginx}/$VERSION_KEY"
WRAPPER="$CACHE/bin/nginx"
if [ -x "$WRAPPER" ]; then
  echo "$WRAPPER"
  exit 0
fi
# The packages nginx and the js module link against (their Depends, resolved by hand: apt's
# resolver would plan against this machine's bookworm status file).
PACKAGES=(nginx libnginx-mod-http-js libc6 libcrypt1 libpcre2-8-0 libssl3t64 zlib1g libxml2 liblzma5)
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/lists/partial" "$WORK/cache/archives/partial" "$WORK/debs"
: > "$WORK/status"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
  > "$WORK/sources.list"
APT=(-o "Dir::Etc::SourceList=$WORK/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
     -o "Dir::State::Lists=$WORK/lists" -o "Dir::Cache=$WORK/cache" -o "Dir::State::status=$WORK/status"
     -o "APT::Sandbox::User=root")
apt-get "${APT[@]}" update -qq >&2
(cd "$WORK/debs" && apt-get "${APT[@]}" download "${PACKAGES[@]}" >&2)
STAGE="$CACHE.partial"
rm -rf "$STAGE"
mkdir -p "$STAGE/root" "$STAGE/bin"
for deb in "$WORK"/debs/*.deb; do
  dpkg-deb -x "$deb" "$STAGE/root"
done
LIBS="$CACHE/root/usr/lib/x86_64-linux-gnu"
cat > "$STAGE/bin/nginx" <<WRAP
#!/bin/sh
# nginx 1.26.3 (Debian trixie) with trixie's own loader and libraries; see ensure-nginx-shipped.sh.
exec "$CACHE/root/usr/lib64/ld-linux-x86-64.so.2" --library-path "$LIBS" "$CACHE/root/usr/sbin/nginx" "\$@"
WRAP
chmod 755 "$STAGE/bin/nginx"
chmod -R a+rX "$STAGE"
rm -rf "$CACHE"
mv "$STAGE" "$CACHE"
# The js module is where the tests' nginx.conf loads it from (js_module in the settings).
"$WRAPPER" -v >&2
echo "$WRAPPER"
