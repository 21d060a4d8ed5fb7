#!/usr/bin/env bash
# check_docs_pages.sh BIN SRCROOT: the hand-written documentation (README.md
# and docs/operations.md, guarantees.md, consumers.md, migrating-from-debezium.md)
# against the code, so
# that a metric, check, endpoint, alert, header, command or key added,
# renamed or removed fails a test until the page says so:
#   docs/operations.md   every metric relay/daemon/http_metrics.c writes (in
#                        Metrics), every readiness check of
#                        relay/daemon/health.c and every path of
#                        relay/daemon/http_routes.c (table rows of Status
#                        endpoint), every alert of
#                        packaging/monitoring/outbox-relay.rules.yml (table
#                        rows of Alert rules)
#   README.md            every header the relay writes (relay/core/event.c),
#                        in The table contract; docs/consumers.md too, in
#                        the table of The message
#   docs/guarantees.md   every value of relay.on_poison and relay.fencing
#   docs/operations.md   the capture plan's Kafka transaction sizes and commit
#                        cadence (include/core/capture_plan.h), in The
#                        stream's Kafka transactions
#   all four             every `outbox-relay COMMAND` is a command of --help,
#                        every `section.key` a key the relay knows, every
#                        tests/... or packaging/... path in a command exists
set -euo pipefail

BIN=$1
ROOT=$2
fail() { echo "check_docs_pages: FAIL: $*" >&2; status=1; }
status=0
OPS=$ROOT/docs/operations.md
CONS=$ROOT/docs/consumers.md
GUAR=$ROOT/docs/guarantees.md
PAGES=("$ROOT/README.md" "$OPS" "$CONS" "$GUAR" "$ROOT/docs/migrating-from-debezium.md")
for p in "${PAGES[@]}"; do [ -f "$p" ] || { echo "check_docs_pages: FAIL: no ${p#"$ROOT"/}" >&2; exit 1; }; done

# The lines of the section titled $2 of page $1 (any level), up to the next
# heading of the same level or above.
section() {
    awk -v t="$2" '
        /^#+ / { n = index($0, " "); lvl = n - 1
                 if (on && lvl <= level) on = 0
                 if (substr($0, n + 1) == t) { on = 1; level = lvl; next } }
        on' "$1"
}
# Table rows of a section that name `word` in their first cell.
in_table() { section "$1" "$2" | awk -F'|' -v w="\`$3" 'index($2, w) { found = 1 } END { exit !found }'; }
# (awk reads to the end: grep -q would close the pipe early, and pipefail
# would then fail the check.)

# Metrics: a name may share a row with others, but each is spelled out.
metrics=$(grep -o '"\(outbox_relay\|process\)_[a-z_]*' "$ROOT/relay/daemon/http_metrics.c" | tr -d '"' | sort -u)
[ -n "$metrics" ] || fail "no metric names found in http_metrics.c"
metrics_doc=$(section "$OPS" Metrics)
for m in $metrics; do
    grep -q -- "\`$m[\`{]" <<<"$metrics_doc" || fail "docs/operations.md (Metrics) does not name $m"
done

checks=$(sed -n '/^} checks\[\] = {/,/^};/p' "$ROOT/relay/daemon/health.c" | grep -o '{"[a-z]*"' | tr -d '{"')
[ -n "$checks" ] || fail "no readiness checks found in health.c"
for c in $checks; do
    in_table "$OPS" "Status endpoint" "$c\`" || fail "docs/operations.md (Status endpoint) has no readiness row for $c"
done

paths=$(grep -o 'X("/[a-z]*"' "$ROOT/relay/daemon/http_routes.c" | grep -o '/[a-z]*')
[ -n "$paths" ] || fail "no routes found in http_routes.c"
endpoints_doc=$(section "$OPS" "Status endpoint")
for p in $paths; do
    grep -q "^| .*\`GET $p\`" <<<"$endpoints_doc" || fail "docs/operations.md (Status endpoint) has no row for $p"
done

alerts=$(grep -o 'alert: [A-Za-z]*' "$ROOT/packaging/monitoring/outbox-relay.rules.yml" | cut -d' ' -f2)
[ -n "$alerts" ] || fail "no alerts found in the rules file"
for a in $alerts; do
    in_table "$OPS" "Alert rules" "$a\`" || fail "docs/operations.md (Alert rules) has no row for $a"
done

headers=$(sed -n '/relay_headers\[\] = {/,/^};/p' "$ROOT/relay/core/event.c" | grep -o '{"[a-z_]*"' | tr -d '{"')
[ -n "$headers" ] || fail "no headers found in event.c"
msg=$(section "$ROOT/README.md" "The table contract" | tr '\n' ' ')
for h in $headers; do
    grep -q -- "headers .*\`$h\`" <<<"$msg" || fail "README.md (The table contract) does not list the header $h"
done
msg=$(section "$CONS" "The message")
for h in $headers; do
    grep -q -- "^| headers | .*\`$h\`" <<<"$msg" || fail "docs/consumers.md (The message) does not list the header $h"
done

# relay.on_poison and relay.fencing: every value the relay accepts, from the
# parameter table's own description.
gen=$(env -i PATH="$PATH" "$BIN" config-doc --format markdown)
for v in hold_aggregate dead_letter halt; do
    grep -q "relay.on_poison.*$v" <<<"$gen" || fail "relay.on_poison no longer accepts $v: update docs/guarantees.md and this check"
    grep -q "^- \*\*\`$v\`\*\*" "$GUAR" || fail "docs/guarantees.md does not describe relay.on_poison = $v"
done
for v in transactional none; do
    grep -q "relay.fencing.*$v" <<<"$gen" || fail "relay.fencing no longer accepts $v: update docs/guarantees.md and this check"
    grep -q "relay.fencing = $v" "$GUAR" || fail "docs/guarantees.md does not describe relay.fencing = $v"
done

# The stream's Kafka transactions: the figures docs/operations.md gives are
# the capture plan's constants.
plan_h=$ROOT/include/core/capture_plan.h
constant() { sed -n "s/^#define $1 \([0-9]*\)\$/\1/p" "$plan_h"; }
grouped() { sed ':a;s/\([0-9]\)\([0-9]\{3\}\)\($\|,\)/\1,\2\3/;ta' <<<"$1"; }
max=$(constant CAPTURE_TXN_MAX_MSGS) trickle=$(constant CAPTURE_TRICKLE_MSGS)
every=$(constant CAPTURE_COMMIT_EVERY_MS)
ahead=$(sed -n 's/^#define CAPTURE_AHEAD_BYTES (\([0-9]*\) << 20)$/\1/p' "$ROOT/include/core/capture_ahead.h")
if [ -z "$max" ] || [ -z "$trickle" ] || [ -z "$every" ] || [ -z "$ahead" ]; then
    fail "the capture plan's constants were not found in capture_plan.h and capture_ahead.h"
else
    txns=$(section "$OPS" "The stream's Kafka transactions" | tr '\n' ' ')
    for said in "**$(grouped "$max") messages**" "**$(grouped "$trickle") messages**" \
                "**$every ms**" "**$ahead MB**"; do
        grep -qF -- "$said" <<<"$txns" ||
            fail "docs/operations.md (The stream's Kafka transactions) does not say $said (include/core/capture_plan.h)"
    done
fi

# Commands, keys and paths the pages mention.
help=$(env -i PATH="$PATH" "$BIN" --help)
# config-doc is the one command --help leaves out (it generates the docs).
cmds=$(sed -n '/^Commands:/,/^$/p' <<<"$help" | awk '/^  [a-z]/ { print $1 } END { print "config-doc" }')
keys=$(env -i PATH="$PATH" "$BIN" check-config -c /dev/null -X kafka.bootstrap.servers=localhost:9092 |
    awk '/^\[[a-z]+\]$/ { sec = substr($0, 2, length($0) - 2); next }
         /^[a-z][a-z0-9_.]* =/ { print sec "." $1 }' | sort -u)
[ -n "$keys" ] || fail "check-config printed no keys"
for page in "${PAGES[@]}"; do
    name=${page#"$ROOT"/}
    # A command is `outbox-relay X` in code, or a command line in a block.
    for c in $( (grep -o '`outbox-relay [a-z][a-z-]*' "$page" || true
                 awk '/^```/ { code = !code; next } code' "$page" |
                     grep -o '^\(\$ \|  *\)\?outbox-relay [a-z][a-z-]*' || true) |
                awk '{ print $NF }' | sort -u); do
        grep -qx -- "$c" <<<"$cmds" || fail "$name mentions 'outbox-relay $c', which is no command of --help"
    done
    # postgres.X with "X": in a page's JSON example is a member of /status.
    for k in $(grep -o '`\(postgres\|relay\|http\|log\|verify\)\.[a-z_]*' "$page" | tr -d '`' | sort -u); do
        case $k in postgres.*) grep -qF "\"${k#postgres.}\":" "${PAGES[@]}" && continue ;; esac
        grep -qx -- "$k" <<<"$keys" || fail "$name mentions $k, which is no configuration key"
    done
    for f in $(grep -o '^\(tests\|packaging\)/[A-Za-z0-9_./-]*' "$page" | sort -u); do
        [ -e "$ROOT/$f" ] || fail "$name runs $f, which does not exist"
    done
done

[ "$status" = 0 ] && echo "check_docs_pages: metrics, checks, endpoints, alerts, headers, commands and keys of the pages match the code"
exit "$status"
