#!/usr/bin/env bash
# Make sure the browser tests have a Chromium: Debian's `chromium` (Playwright drives it through
# executable_path; `playwright install` needs the network, which these machines lack).
# Installs it with apt-get when it is missing and apt is usable (root, or passwordless sudo).
# Never fails the test run: where nothing can be installed, tests/browser skips with the reason
# (and fails on CI, where CI is set, since the browser tests must run there).
set -u

have_chromium() {
    [ -x /usr/bin/chromium ] || command -v chromium >/dev/null 2>&1 \
        || command -v chromium-browser >/dev/null 2>&1
}

if have_chromium; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_chromium: no apt-get here; browser tests will be skipped" >&2
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "ensure_chromium: not root and no passwordless sudo; browser tests will be skipped" >&2
        exit 0
    fi
fi

echo "ensure_chromium: installing Debian's chromium and chromium-driver" >&2
export DEBIAN_FRONTEND=noninteractive
if $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
then
    have_chromium && exit 0
fi
echo "ensure_chromium: installing chromium failed (offline?); browser tests will be skipped" >&2
exit 0
