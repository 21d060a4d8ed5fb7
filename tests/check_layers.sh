#!/bin/sh
# check_layers.sh SRCDIR — the layering the architecture document promises:
# - the engine decides without I/O, so its source and the headers it uses name
#   no PostgreSQL, Kafka or event-loop header (and so can be unit-tested alone);
# - no function in relay/ is longer than MAX_FUNCTION_LINES;
# - a header belongs to one module (what include/X.h declares, relay/X.c
#   defines), and no two modules include each other's headers.
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

# A function starts at a line that begins with an identifier and holds a '('
# without ending in ';' (the last such line before the body: a signature may
# span lines, a return type may stand on the line above), and ends at a '}'
# in column 0. Long functions hide their steps: split them into named ones.
MAX_FUNCTION_LINES=90
long=$(awk -v max=$MAX_FUNCTION_LINES '
    FNR == 1 { start = 0 }
    /^[A-Za-z_]/ && /\(/ && !/;[[:space:]]*$/ { start = FNR; name = $0; next }
    /^}/ && start {
        if (FNR - start + 1 > max)
            printf "%s:%d: %d lines: %s\n", FILENAME, start, FNR - start + 1, name
        start = 0
    }' "$src"/relay/*.c)
if [ -n "$long" ]; then
    echo "$long" | sed 's/^/check_layers: longer than '$MAX_FUNCTION_LINES' lines: /' >&2
    status=1
else
    echo "check_layers: no function in relay/ is longer than $MAX_FUNCTION_LINES lines"
fi

# A header is one module's: every function include/X.h declares is defined
# in relay/X.c (or inline in the header). A header serving several modules
# lets them depend on each other unseen. And no include circle: module X.c
# includes Y.h while Y.c includes X.h.
problems=$(awk '
    function base(path) { sub(/.*\//, "", path); sub(/\.[ch]$/, "", path); return path }
    FNR == 1 { b = base(FILENAME); header = FILENAME ~ /\.h$/; if (!header) module[b] = 1 }
    /^#include "[a-z0-9_]*\.h"/ && !header {
        y = $2; gsub(/"/, "", y); sub(/\.h$/, "", y)
        if (y != b) includes[b, y] = 1
    }
    /^[A-Za-z_]/ && match($0, /[A-Za-z_][A-Za-z0-9_]*\(/) {
        name = substr($0, RSTART, RLENGTH - 1)
        if (header && $0 !~ /^static inline/ && $0 !~ /^(typedef|enum|struct|union)[[:space:]]/) declared[b, name] = 1
        else if (!header && $0 !~ /;[[:space:]]*$/) defined[b, name] = 1
    }
    END {
        for (k in declared) {
            split(k, p, SUBSEP)
            if (!((p[1], p[2]) in defined))
                printf "include/%s.h declares %s, which relay/%s.c does not define\n", p[1], p[2], p[1]
        }
        for (k in includes) {
            split(k, p, SUBSEP)
            if (p[1] < p[2] && (p[2] in module) && ((p[2], p[1]) in includes))
                printf "include circle: relay/%s.c includes %s.h and relay/%s.c includes %s.h\n", p[1], p[2], p[2], p[1]
        }
    }' "$src"/include/*.h "$src"/relay/*.c | sort)
if [ -n "$problems" ]; then
    echo "$problems" | sed 's/^/check_layers: /' >&2
    status=1
else
    echo "check_layers: each header is one module's, and no two modules include each other"
fi
exit $status
