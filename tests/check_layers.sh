#!/bin/sh
# check_layers.sh SRCDIR — the layering of docs/ARCHITECTURE.md, checked per folder:
# - relay/ has one folder per layer, bottom up: base, core, config, io, cmd,
#   daemon (main.c, the boot, sits on top). A file in relay/L/ or include/L/
#   may include only headers of L or of a folder below it, always by its
#   folder ("core/plan.h"); a folder not in the list fails the check;
# - base and core decide without I/O: they name no libpq or libuv header, and
#   librdkafka's only for its types and error codes (core/event.h,
#   core/kafka_rules.c), never a call that talks to a broker;
# - no source file over MAX_FILE_LINES, no function over MAX_FUNCTION_LINES;
# - a header is one module's: what include/L/X.h declares, relay/L/X.c defines;
# - every source path that a doc, a comment or a packaging file names exists.
set -eu
src=$1
status=0
LAYERS="base core config io cmd daemon"
MAX_FILE_LINES=800
MAX_FUNCTION_LINES=80

rank() {
    r=0
    for l in $LAYERS; do
        [ "$l" = "$1" ] && { echo $r; return; }
        r=$((r + 1))
    done
    echo -1
}

for dir in "$src"/relay/*/ "$src"/include/*/; do
    layer=$(basename "$dir")
    if [ "$(rank "$layer")" -lt 0 ]; then
        echo "check_layers: ${dir#"$src"/} is not a layer (known: $LAYERS): add it to LAYERS in its place" >&2
        status=1
    fi
done

# Every include of a project header, with the including file's layer: one awk
# over all files (a shell loop forking per include took over 30 s on a busy
# 2-core machine).
bad=$(awk -v layers="$LAYERS" -v src="$src/" '
    BEGIN { n = split(layers, l, " "); for (i = 1; i <= n; i++) rank[l[i]] = i }
    FNR == 1 {
        rel = substr(FILENAME, length(src) + 1)
        split(rel, parts, "/")
        own = rel == "relay/main.c" ? 99 : (parts[2] in rank ? rank[parts[2]] : -1)
    }
    /^#include "/ {
        inc = $0; sub(/^#include "/, "", inc); sub(/".*/, "", inc)
        if (inc == "build_config.h") next
        if (inc !~ /\//) { printf "%s includes \"%s\" without its folder\n", rel, inc; next }
        top = inc; sub(/\/.*/, "", top)
        if (!(top in rank) || rank[top] > own)
            printf "%s includes %s: a layer may use only the layers below it (%s)\n", rel, inc, layers
    }' "$src"/relay/*/*.[ch] "$src"/include/*/*.h "$src"/relay/main.c)
if [ -n "$bad" ]; then
    echo "$bad" | sed 's/^/check_layers: /' >&2
    status=1
fi

for f in "$src"/relay/base/*.c "$src"/relay/core/*.c "$src"/include/base/*.h "$src"/include/core/*.h; do
    rel=${f#"$src"/}
    if grep -nE '#include[[:space:]]*<(libpq-fe|uv|libpq/[a-z-]*)\.h>' "$f" >/dev/null; then
        echo "check_layers: $rel names a libpq or libuv header: base and core decide without I/O" >&2
        status=1
    fi
    case $rel in relay/core/kafka_rules.c|include/core/event.h) continue ;; esac
    if grep -nE '#include[[:space:]]*<librdkafka/' "$f" >/dev/null; then
        echo "check_layers: $rel names librdkafka: in core only kafka_rules.c and event.h use its types" >&2
        status=1
    fi
done
if grep -nE 'rd_kafka_(new|produce|producev|poll|flush|init_transactions|begin_transaction|commit_transaction|consume)' \
        "$src"/relay/core/*.c "$src"/relay/base/*.c; then
    echo "check_layers: base or core talks to a broker" >&2
    status=1
fi
[ $status -eq 0 ] && echo "check_layers: every include goes down the layers ($LAYERS); base and core do no I/O"

long=$(wc -l "$src"/relay/main.c "$src"/relay/*/*.c "$src"/include/*/*.h | awk -v max=$MAX_FILE_LINES '$2 != "total" && $1 > max')
if [ -n "$long" ]; then
    echo "$long" | sed 's/^/check_layers: longer than '$MAX_FILE_LINES' lines: /' >&2
    status=1
else
    echo "check_layers: no source file is longer than $MAX_FILE_LINES lines"
fi

# A function starts at a line that begins with an identifier and holds a '('
# without ending in ';' (the last such line before the body: a signature may
# span lines, a return type may stand on the line above), and ends at a '}'
# in column 0. Long functions hide their steps: split them into named ones.
long=$(awk -v max=$MAX_FUNCTION_LINES '
    FNR == 1 { start = 0 }
    /^[A-Za-z_]/ && /\(/ && !/;[[:space:]]*$/ { start = FNR; name = $0; next }
    /^}/ && start {
        if (FNR - start + 1 > max)
            printf "%s:%d: %d lines: %s\n", FILENAME, start, FNR - start + 1, name
        start = 0
    }' "$src"/relay/main.c "$src"/relay/*/*.c)
if [ -n "$long" ]; then
    echo "$long" | sed 's/^/check_layers: longer than '$MAX_FUNCTION_LINES' lines: /' >&2
    status=1
else
    echo "check_layers: no function in relay/ is longer than $MAX_FUNCTION_LINES lines"
fi

# A header is one module's: every function include/L/X.h declares is defined
# in relay/L/X.c (or inline in the header), or in relay/L/X_*.c when a module
# spans files; X_int.h is such a module's private header, shared by X.c and
# X_*.c only. A header serving several modules lets them depend on each
# other unseen.
problems=$(awk '
    function mod(path) { n = split(path, p, "/"); b = p[n]; sub(/\.[ch]$/, "", b); return p[n - 1] "/" b }
    FNR == 1 { m = mod(FILENAME); header = FILENAME ~ /\.h$/; if (header) sub(/_int$/, "", m) }
    /^[A-Za-z_]/ && match($0, /[A-Za-z_][A-Za-z0-9_]*\(/) {
        name = substr($0, RSTART, RLENGTH - 1)
        if (name == "_Static_assert") next
        if (header && $0 !~ /^static inline/ && $0 !~ /^(typedef|enum|struct|union)[[:space:]]/) declared[m, name] = 1
        else if (!header && $0 !~ /;[[:space:]]*$/ && $0 !~ /^static/) defined[name] = defined[name] " " m
    }
    END {
        for (k in declared) {
            split(k, p, SUBSEP)
            ok = 0
            n = split(defined[p[2]], d, " ")
            for (i = 1; i <= n; i++)
                if (d[i] == p[1] || index(d[i], p[1] "_") == 1) ok = 1
            if (!ok)
                printf "include/%s.h declares %s, which relay/%s.c does not define\n", p[1], p[2], p[1]
        }
    }' "$src"/include/*/*.h "$src"/relay/*/*.c | sort)
for f in "$src"/relay/*/*.c "$src"/relay/main.c; do
    for inc in $(sed -n 's/^#include "\([a-z]*\/[a-z0-9_]*\)_int\.h".*/\1/p' "$f"); do
        base=$(basename "$f" .c)
        case "$(basename "$(dirname "$f")")/$base" in
            "$inc"|"$inc"_*) ;;
            *) problems="$problems
${f#"$src"/} includes ${inc}_int.h, private to ${inc}.c and ${inc}_*.c" ;;
        esac
    done
done
problems=$(echo "$problems" | sed '/^$/d')
if [ -n "$problems" ]; then
    echo "$problems" | sed 's/^/check_layers: /' >&2
    status=1
else
    echo "check_layers: each header is one module's"
fi
# Every path a doc, a comment, a script or a packaging file names exists: a
# path written from the top (relay/..., include/..., tests/..., schema/...,
# docs/..., packaging/...) or a module's from its layer (daemon/relay.c).
# A short name in capitals is a placeholder (relay/L/X.c, schema/NNN_); one
# that ends in "_", or a migration's number (schema/005), names the files it
# begins. Paths after another folder (build/tests/..., /etc/outbox-relay/...)
# are not the tree's.
mentions=$(cd "$src" && grep -rnoE \
        '(^|[^A-Za-z0-9_./~$-])((relay|include|tests|schema|docs|packaging)/[A-Za-z0-9_./-]*[A-Za-z0-9_]|(base|core|config|io|cmd|daemon)/[A-Za-z0-9_]+\.[ch])\b' \
        README.md meson.build .ci docs packaging relay include schema tests --exclude-dir=node_modules |
    sed -E 's/^([^:]*:[0-9]+):[^A-Za-z]?/\1 /')
# Each path once, with shell builtins only: the mentions are thousands.
missing=$(cd "$src" && echo "$mentions" | awk '{ print $2 }' | sort -u |
    while read -r path; do
        case $path in
            relay/*|include/*|tests/*|schema/*|docs/*|packaging/*) set -- "$path" ;;
            *) set -- "relay/$path" "include/$path" ;;
        esac
        found=0
        for p in "$@"; do
            if [ -e "$p" ]; then found=1; fi
            case $p in *_|schema/[0-9]*) for g in "$p"*; do [ -e "$g" ] && found=1; done ;; esac
        done
        [ $found = 1 ] || echo "$path"
    done | { grep -vE '(^|/)[A-Z]{1,4}([._/]|$)' || true; })
stale=$(echo "$mentions" | awk -v missing="$missing" '
    BEGIN { n = split(missing, m, "\n"); for (i = 1; i <= n; i++) gone[m[i]] = 1 }
    ($2 in gone) { print $1 " names " $2 ", which does not exist" }')
if [ -n "$stale" ]; then
    echo "$stale" | sed 's/^/check_layers: /' >&2
    status=1
else
    echo "check_layers: every source path the docs, comments and packaging name exists"
fi
exit $status
