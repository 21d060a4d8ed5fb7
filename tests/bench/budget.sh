#!/usr/bin/env bash
# budget.sh LOG — where a drain's time goes, per batch, from a relay's log at
# log.level = debug (the lines "claimed", "batch acknowledged", "transaction
# committed" and "batch marked sent", each with ms since its batch's claim
# was sent). Prints the median and the 90th percentile of each step:
#   claim          claim sent -> rows back
#   to Kafka       rows back -> the batch's last delivery report
#   txn commit     commit_transaction (relay.fencing = transactional)
#   to marked      last report -> marks written (waits for the commit, then the UPDATE)
#   batch          claim sent -> marks written
set -euo pipefail
log=${1:?usage: budget.sh LOG}
awk '
function field(name,   m) { if (match($0, name "=[0-9]+")) return substr($0, RSTART + length(name) + 1, RLENGTH - length(name) - 1) + 0; return -1 }
/msg="claimed"/            { b = field("batch"); claimed[b] = field("ms") }
/msg="batch acknowledged"/ { b = field("batch"); acked[b] = field("ms") }
/msg="transaction committed"/ { txn[ntxn++] = field("ms") }
/msg="batch marked sent"/  { b = field("batch"); if ((b in claimed) && (b in acked)) {
        claim[n] = claimed[b]; kafka[n] = acked[b] - claimed[b]; mark[n] = field("ms") - acked[b]
        total[n] = field("ms"); n++ } delete claimed[b]; delete acked[b] }
function sort(a, k,   i, j, t) { for (i = 1; i < k; i++) for (j = i; j > 0 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t } }
function show(name, a, k) { if (k == 0) { printf "%-12s      -\n", name; return } sort(a, k)
        printf "%-12s %6.1f %6.1f ms\n", name, a[int(k / 2)], a[int(k * 0.9)] }
END {
    printf "%d batches; step         median    p90\n", n
    show("claim", claim, n); show("to Kafka", kafka, n); show("txn commit", txn, ntxn)
    show("to marked", mark, n); show("batch", total, n)
}' "$log"
