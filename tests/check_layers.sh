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
for f in relay/engine.c relay/batch.c include/engine.h include/batch.h include/kafka_rules.h; do
    if grep -nE '#include[[:space:]]*[<"](libpq-fe|librdkafka/rdkafka|uv|pg|producer|relay)\.h[>"]' "$src/$f"; then
        echo "check_layers: $f includes an I/O header: the engine must decide without I/O" >&2
        status=1
    fi
done
# Each header the engine includes must itself be free of them.
for h in $(sed -n 's/^#include "\([a-z_]*\.h\)"/\1/p' "$src/include/engine.h" "$src/relay/engine.c" \
             "$src/include/batch.h" "$src/relay/batch.c" | sort -u); do
    case $h in engine.h|batch.h|kafka_rules.h) continue ;; esac
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
# lets them depend on each other unseen.
headers_ok=1
for h in "$src"/include/*.h; do
    x=$(basename "$h" .h)
    for f in $(grep -oE '^[a-z][a-zA-Z0-9_ *]*[ *][a-z_][a-z0-9_]*\(' "$h" | grep -oE '[a-z_][a-z0-9_]*\($' | tr -d '('); do
        grep -E "^[a-z].*[ *]$f\\(" "$src/relay/$x.c" 2>/dev/null | grep -qv ';[[:space:]]*$' && continue
        grep -qE "^static inline [^;]*[ *]$f\\(" "$h" && continue
        echo "check_layers: include/$x.h declares $f, which relay/$x.c does not define" >&2
        headers_ok=0
    done
done
# No include circle: module X.c includes Y.h while Y.c includes X.h.
for c in "$src"/relay/*.c; do
    x=$(basename "$c" .c)
    for y in $(sed -n 's/^#include "\([a-z0-9_]*\)\.h".*/\1/p' "$c"); do
        [ "$y" = "$x" ] || [ ! -f "$src/relay/$y.c" ] && continue
        if grep -q "^#include \"$x\.h\"" "$src/relay/$y.c"; then
            echo "check_layers: include circle: relay/$x.c includes $y.h and relay/$y.c includes $x.h" >&2
            headers_ok=0
        fi
    done
done
if [ $headers_ok -eq 1 ]; then
    echo "check_layers: each header is one module's, and no two modules include each other"
else
    status=1
fi
exit $status
