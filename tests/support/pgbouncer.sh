#!/usr/bin/env bash
# pgbouncer.sh — a throwaway PgBouncer in front of the test stack's PostgreSQL,
# for the pooler tests.
#
#   pgbouncer.sh start DIR PGPORT MODE POOL_SIZE
#                           PgBouncer (Debian package pgbouncer) on a free port
#                           of 127.0.0.1, pool_mode MODE (session, transaction or
#                           statement), default_pool_size POOL_SIZE, forwarding
#                           every database to 127.0.0.1:PGPORT as user postgres;
#                           files in DIR; prints the port
#   pgbouncer.sh stop DIR   stops it; safe to run twice
#
# PgBouncer refuses to run as root: as root it runs as `postgres`, like the
# stack's PostgreSQL (DIR must then be reachable by that user).
set -euo pipefail

PGBOUNCER=${PGBOUNCER:-/usr/sbin/pgbouncer}
START_TIMEOUT=15

die() { echo "pgbouncer.sh: error: $*" >&2; exit 1; }

as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

pid_of() {
    local dir=$1 pid
    [ -f "$dir/pgbouncer.pid" ] || return 1
    pid=$(cat "$dir/pgbouncer.pid")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q pgbouncer "/proc/$pid/cmdline" 2>/dev/null || return 1
    echo "$pid"
}

cmd_start() {
    local dir=$1 pgport=$2 mode=$3 size=$4 port
    [ -x "$PGBOUNCER" ] || die "$PGBOUNCER not found: apt-get install pgbouncer"
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
    pid_of "$dir" >/dev/null && die "a PgBouncer already runs for $dir"
    for _ in 1 2 3 4 5; do
        port=$(free_port)
        # auth_type any: the test cluster trusts local TCP, and every server
        # connection logs in as postgres whatever the client says.
        cat >"$dir/pgbouncer.ini" <<EOF
[databases]
* = host=127.0.0.1 port=$pgport user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = any
pool_mode = $mode
default_pool_size = $size
max_client_conn = 200
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
        if [ "$(id -u)" = 0 ]; then chown postgres: "$dir/pgbouncer.ini"; fi
        rm -f "$dir/pgbouncer.pid"
        as_owner "$PGBOUNCER" -d -q "$dir/pgbouncer.ini" || true
        for _ in $(seq 1 $((START_TIMEOUT * 10))); do
            if pid_of "$dir" >/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
                echo "$port"
                return 0
            fi
            sleep 0.1
        done
        grep -q "Address already in use" "$dir/pgbouncer.log" 2>/dev/null || break
    done
    tail -n 20 "$dir/pgbouncer.log" >&2 2>/dev/null || true
    die "PgBouncer did not start (log: $dir/pgbouncer.log)"
}

cmd_stop() {
    local dir=$1 pid
    pid=$(pid_of "$dir") || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
}

[ $# -ge 2 ] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 64; }
cmd=$1; shift
case $cmd in
    start) [ $# = 4 ] || die "usage: pgbouncer.sh start DIR PGPORT MODE POOL_SIZE"; cmd_start "$@" ;;
    stop)  [ $# = 1 ] || die "usage: pgbouncer.sh stop DIR"; cmd_stop "$1" ;;
    *) die "unknown command $cmd" ;;
esac
