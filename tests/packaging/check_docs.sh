#!/usr/bin/env bash
# check_docs.sh BIN SRCROOT [--update]: the documentation of the configuration
# keys is generated from the relay's parameter table and the committed copies
# must be what the binary generates now:
#   packaging/outbox-relay.conf     config-doc --format conf
#   packaging/outbox-relay.conf.5   config-doc --format man
#   docs/configuration.md           config-doc --format markdown
# With --update (ninja -C build update-docs) it rewrites them instead.
# It also checks that outbox-relay(8), written by hand, names every command,
# option and exit status of `outbox-relay --help` and every endpoint, and
# every option of each command's own usage (`outbox-relay COMMAND --help`).
set -euo pipefail

BIN=$1
ROOT=$2
UPDATE=${3:-}
fail() { echo "check_docs: FAIL: $*" >&2; status=1; }
status=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

gen() { env -i PATH="$PATH" "$BIN" config-doc --format "$1"; }

gen conf >"$tmp/conf"
gen man >"$tmp/man"
gen markdown >"$tmp/md"
if [ "$UPDATE" = --update ]; then
    cp "$tmp/conf" "$ROOT/packaging/outbox-relay.conf"
    cp "$tmp/man" "$ROOT/packaging/outbox-relay.conf.5"
    cp "$tmp/md" "$ROOT/docs/configuration.md"
    echo "check_docs: rewrote packaging/outbox-relay.conf, packaging/outbox-relay.conf.5, docs/configuration.md"
    exit 0
fi

hint="regenerate: ninja -C build update-docs"
diff -u "$ROOT/packaging/outbox-relay.conf" "$tmp/conf" >&2 ||
    fail "packaging/outbox-relay.conf differs from config-doc --format conf ($hint)"
diff -u "$ROOT/packaging/outbox-relay.conf.5" "$tmp/man" >&2 ||
    fail "packaging/outbox-relay.conf.5 differs from config-doc --format man ($hint)"
diff -u "$ROOT/docs/configuration.md" "$tmp/md" >&2 ||
    fail "docs/configuration.md differs from config-doc --format markdown ($hint)"
if command -v groff >/dev/null; then
    for page in "$ROOT/packaging/outbox-relay.8" "$ROOT/packaging/outbox-relay.conf.5"; do
        w=$(groff -man -ww -z "$page" 2>&1) || true
        [ -z "$w" ] || fail "groff warns about ${page##*/}: $w"
    done
fi

# outbox-relay(8) against --help: commands, long options, exit statuses.
MAN8=$ROOT/packaging/outbox-relay.8
help=$(env -i PATH="$PATH" "$BIN" --help)
man_text=$(sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' "$MAN8")
cmds=$(sed -n '/^Commands:/,/^$/p' <<<"$help" | awk '/^  [a-z]/ { print $1 }')
opts=$(grep -o -- '--[a-z][a-z-]*' <<<"$help" | sort -u)
for c in $cmds; do
    pat=$(sed 's/-/\\\\-/g' <<<"$c")   # check-config is written check\-config
    grep -q "^\.B $pat\( \|\$\)" "$MAN8" || fail "outbox-relay.8 does not describe the command $c (it is in --help)"
done
for w in $opts /livez /healthz /readyz /metrics /status outbox-relay.conf; do
    grep -qF -- "$w" <<<"$man_text" || fail "outbox-relay.8 does not mention $w (it is in --help)"
done
# Each command's --help: its own usage on stdout, exit 0, whose options the
# man page describes too.
for c in $cmds; do
    own=$(env -i PATH="$PATH" "$BIN" "$c" --help 2>&1) || fail "outbox-relay $c --help exits non-zero"
    [[ $own == "Usage: outbox-relay $c"* ]] || fail "outbox-relay $c --help does not print its usage: ${own:0:120}"
    for o in $(grep -o -- '--[a-z][a-z-]*' <<<"$own" | sort -u); do
        grep -qF -- "$o" <<<"$man_text" || fail "outbox-relay.8 does not mention $o (it is in $c --help)"
    done
done
codes=$(grep -o 'exit [0-9][^.]*\|Exit status: [^.]*' <<<"$help" | grep -o '\b[0-9]\{1,2\}\b' | sort -un)
for c in $codes; do
    grep -q "^\.B $c\$" "$MAN8" || fail "outbox-relay.8 lists no exit status $c (--help does)"
done
[ "$status" = 0 ] && echo "check_docs: the conffile, outbox-relay.conf(5), docs/configuration.md and outbox-relay(8) match the binary"
exit "$status"
