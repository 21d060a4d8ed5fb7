#!/bin/sh
# check_layers.sh SRCDIR — the layering the architecture document promises:
# the engine decides without I/O, so its source and the headers it uses name
# no PostgreSQL, Kafka or event-loop header (and so can be unit-tested alone).
set -eu
src=$1
status=0
for f in relay/engine.c relay/batch.c relay/plan.c include/engine.h include/batch.h include/plan.h \
         include/kafka_rules.h include/stats.h; do
    if grep -nE '#include[[:space:]]*[<"](libpq-fe|librdkafka/rdkafka|uv|pg|producer|relay)\.h[>"]' "$src/$f"; then
        echo "check_layers: $f includes an I/O header: the engine must decide without I/O" >&2
        status=1
    fi
done
# Each header the engine includes must itself be free of them.
for h in $(sed -n 's/^#include "\([a-z_]*\.h\)"/\1/p' "$src/include/engine.h" "$src/relay/engine.c" \
             "$src/include/batch.h" "$src/relay/batch.c" "$src/include/plan.h" "$src/relay/plan.c" \
             "$src/include/stats.h" | sort -u); do
    case $h in engine.h|batch.h|plan.h|kafka_rules.h|stats.h) continue ;; esac
    echo "check_layers: the engine includes $h, which is not known to be free of I/O" >&2
    status=1
done
[ $status -eq 0 ] && echo "check_layers: the engine includes no I/O header"
exit $status
