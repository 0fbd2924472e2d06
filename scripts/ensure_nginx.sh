#!/usr/bin/env bash
# Make sure the proxy test (tests/platform/test_proxy.py) has an nginx: Debian's `nginx`, run
# with the repository's config (deploy/nginx/rada.conf.template) in front of a real gunicorn.
# Installs it with apt-get when it is missing and apt is usable (root, or passwordless sudo).
# Never fails the test run: where nothing can be installed, the test skips with the reason (and
# fails on CI, where CI is set, since the production path must be tested there).
set -u

have_nginx() {
    [ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1
}

if have_nginx; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_nginx: no apt-get here; the proxy test will be skipped" >&2
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "ensure_nginx: not root and no passwordless sudo; the proxy test will be skipped" >&2
        exit 0
    fi
fi

echo "ensure_nginx: installing Debian's nginx" >&2
export DEBIAN_FRONTEND=noninteractive
# The package's service is not wanted (the test starts its own nginx on a free port): where
# invoke-rc.d honours policy-rc.d, the install does not start it.
if $SUDO apt-get update -qq && $SUDO apt-get install -y -qq nginx >/dev/null; then
    have_nginx && exit 0
fi
echo "ensure_nginx: installing nginx failed (offline?); the proxy test will be skipped" >&2
exit 0
