# Sourced by scripts/test, after bootstrap.sh: put `promtool` (the alert rules' test runner) in
# ./.venv/bin, from Debian's prometheus package unpacked there, not installed (no service is
# started, nothing else of the package is kept). Where it cannot be had, the rule tests skip and
# say why (tests/monitoring/test_alert_rules.py).
if [ ! -x "$venv/bin/promtool" ] && ! command -v promtool > /dev/null 2>&1; then
    unpack="$(mktemp -d)"
    if (cd "$unpack" && apt-get download prometheus > download.log 2>&1 \
        && dpkg-deb -x prometheus_*.deb unpacked); then
        cp "$unpack/unpacked/usr/bin/promtool" "$venv/bin/promtool"
    else
        echo "promtool: could not be had from Debian's prometheus package:" >&2
        tail -n 3 "$unpack/download.log" >&2 || true
    fi
    rm -rf "$unpack"
fi
