#!/usr/bin/env bash
# check_monitoring.sh SRCROOT: the shipped Prometheus rules and Grafana
# dashboard (packaging/monitoring) are valid and speak of metrics the relay
# exports:
#   promtool check rules   the rules file
#   promtool test rules    its unit tests (outbox-relay.rules.test.yml)
#   the dashboard is JSON, and every outbox_relay_* / process_* name in the
#   rules and the dashboard is one relay/daemon/http_metrics.c writes.
# Exit 77 (skipped) without promtool (Debian's prometheus package).
set -euo pipefail
ROOT=$1
DIR=$ROOT/packaging/monitoring
fail() { echo "check_monitoring: FAIL: $*" >&2; exit 1; }
command -v promtool >/dev/null || { echo "check_monitoring: SKIP: no promtool (apt-get install prometheus)" >&2; exit 77; }

promtool check rules "$DIR/outbox-relay.rules.yml" >&2 || fail "promtool check rules"
(cd "$DIR" && promtool test rules outbox-relay.rules.test.yml) >&2 || fail "promtool test rules"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$DIR/outbox-relay-dashboard.json" ||
    fail "the dashboard is not JSON"

# Names the relay writes: every quoted metric name in http_metrics.c (a
# histogram's series add _bucket, _sum and _count).
exported=$(grep -o '"\(outbox_relay\|process\)_[a-z_]*' "$ROOT/relay/daemon/http_metrics.c" | tr -d '"' | sort -u)
used=$(grep -oh '\b\(outbox_relay\|process\)_[a-z_]*' "$DIR/outbox-relay.rules.yml" "$DIR/outbox-relay-dashboard.json" |
    sed -E 's/_(bucket|sum|count)$//' | sort -u)
missing=$(comm -23 <(echo "$used") <(echo "$exported"))
[ -z "$missing" ] || fail "the rules or the dashboard use metrics the relay does not export: $(tr '\n' ' ' <<<"$missing")"
echo "check_monitoring: rules pass promtool check and test; $(wc -l <<<"$used") metric names, all exported"
