#!/usr/bin/env bash
# check_default_config.sh BIN CONF: the packaged default configuration
# (packaging/outbox-relay.conf) is one the relay accepts, its commented-out
# examples are valid too, and it documents every key the relay knows, so that
# adding a parameter without documenting it for operators fails a test.
set -euo pipefail

BIN=$1
CONF=$2
fail() { echo "check_default_config: FAIL: $*" >&2; exit 1; }
# No OUTBOX_RELAY_* or PG* variable of the caller may change the verdict.
run() { env -i PATH="$PATH" "$BIN" "$@"; }

# The file names no broker: check-config requires one, which -X gives.
BROKER=(-X kafka.bootstrap.servers=localhost:9092)
run check-config -c "$CONF" "${BROKER[@]}" >/dev/null || fail "$CONF is rejected"

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
# Every "#key = value" line uncommented: the examples must work when used.
sed 's/^#\([a-z][a-z0-9_.]*\) =/\1 =/' "$CONF" >"$tmp"
run check-config -c "$tmp" >/dev/null || fail "$CONF with its examples uncommented is rejected"

# section.key of every key: from the relay's own dump of its defaults, and
# from the file (commented out or not).
keys() {
    awk '/^\[[a-z]+\]$/ { sec = substr($0, 2, length($0) - 2); next }
         /^#?[a-z][a-z0-9_.]* =/ { k = $1; sub(/^#/, "", k); print sec "." k }' "$@" | sort -u
}
missing=$(comm -23 <(run check-config -c /dev/null "${BROKER[@]}" | keys) <(keys "$CONF"))
[ -z "$missing" ] || fail "$CONF does not document: $(tr "\n" " " <<<"$missing")"
echo "check_default_config: $CONF is accepted and documents every key"
