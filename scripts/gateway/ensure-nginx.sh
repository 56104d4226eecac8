#!/usr/bin/env bash
# The gateway's tests run its rendered nginx.conf on a real nginx with the njs module. The image
# we deploy (docker.io/library/nginx) is not runnable here (no container engine), so the tests use
# Debian's packages: nginx 1.22.1 and libnginx-mod-http-js (njs 0.7.9). Installs them when
# missing (as root, the way CI runs; otherwise it says what to install). Prints nginx's path.
set -euo pipefail
MODULE=/usr/lib/nginx/modules/ngx_http_js_module.so
if command -v nginx >/dev/null 2>&1 && [ -f "$MODULE" ]; then
  command -v nginx
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "nginx with the njs module is missing: install the Debian packages nginx and libnginx-mod-http-js" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# The package's postinst would start a system nginx: nothing here wants one.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends nginx libnginx-mod-http-js >&2
command -v nginx
