#!/usr/bin/env bash
# stack.sh — the throwaway services the end-to-end tests talk to.
#
#   stack.sh start DIR      PostgreSQL 15 (database outbox_test) and the brokers of
#                           OUTBOX_RELAY_TEST_BROKERS; writes DIR/env (shell `export`
#                           lines) for the tests
#   stack.sh stop DIR       stops everything; safe to run twice, or on a half-started DIR
#   stack.sh status DIR     exit 0 if everything DIR/env describes is up
#   stack.sh pg_ctl DIR ARG...
#                           runs pg_ctl -D DIR/pg ARG... as the right user
#                           (fault tests: `stack.sh pg_ctl DIR restart -m fast`)
#
# Environment:
#   OUTBOX_RELAY_TEST_BROKERS  which brokers to start: `mock` (default), `kafka` (a real
#                              one-node Apache Kafka, tests/support/kafka.sh) or `mock kafka`
#   OUTBOX_RELAY_TEST_KAFKA    if set, that (external) broker is used and none is started
#   OUTBOX_RELAY_TEST_KAFKA_NODES  nodes of the real Kafka: 1 (default) or 3 (replication
#                              factor 3, min.insync.replicas 2)
#   OUTBOX_RELAY_TEST_KAFKA_VERSION its version (default: tests/support/kafka/pom.xml's)
#   OUTBOX_RELAY_MOCK_BROKER   path of outbox-relay-mock-broker
#                              (default: build/tests/outbox-relay-mock-broker of this repo)
#   PG_BINDIR                  PostgreSQL programs (default: the newest in
#                              /usr/lib/postgresql, 15 on Debian 12, 17 on 13)
#   OUTBOX_RELAY_TEST_PG_DURABLE=1
#                              PostgreSQL with fsync, synchronous_commit and
#                              full_page_writes on, as in production (default: off, for speed)
#
# DIR/env exports OUTBOX_RELAY_TEST_PG; OUTBOX_RELAY_TEST_KAFKA (the mock's address,
# else the real broker's); OUTBOX_RELAY_TEST_MOCK_KAFKA and _MOCK_CONTROL with the
# mock; OUTBOX_RELAY_TEST_REAL_KAFKA with a real broker (started or external), and
# OUTBOX_RELAY_TEST_KAFKA_DIR and _KAFKA_SH when the stack started it (fault tests
# kill, restart and pause its node with `kafka.sh CMD DIR NODE`);
# OUTBOX_RELAY_TEST_STACK_DIR and OUTBOX_RELAY_TEST_STACK_SH (this script); PG_BINDIR.
set -euo pipefail

# The newest PostgreSQL installed (Debian 12: 15, Debian 13: 17) unless PG_BINDIR names one.
PG_BINDIR=${PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
SELF=$(readlink -f "${BASH_SOURCE[0]}")
REPO_ROOT=$(cd "$(dirname "$SELF")/../.." && pwd)
PG_START_TIMEOUT=60
PG_STOP_TIMEOUT=30
MOCK_START_TIMEOUT=15
# shellcheck source=tests/support/common.sh
. "$(dirname "$SELF")/common.sh"

die() { echo "stack.sh: error: $*" >&2; exit 1; }
note() { echo "stack.sh: $*" >&2; }

usage() {
    sed -n '2,25p' "$SELF" | sed 's/^# \{0,1\}//' >&2
    exit 64
}

# Every directory above DIR must be searchable by `postgres`.
make_reachable_for_postgres() {
    local d=$1
    chown postgres: "$d/pg" "$d/s" 2>/dev/null || true
    chmod 0755 "$d"
    while [ "$d" != / ]; do
        d=$(dirname "$d")
        if ! runuser -u postgres -- test -x "$d"; then
            die "user postgres cannot enter $d (needed to reach the stack directory); use a DIR under /tmp"
        fi
    done
}

find_mock() {
    local c
    for c in "${OUTBOX_RELAY_MOCK_BROKER:-}" "$REPO_ROOT/build/tests/outbox-relay-mock-broker"; do
        if [ -n "$c" ] && [ -x "$c" ]; then echo "$c"; return 0; fi
    done
    return 1
}

write_env() {
    local dir=$1 conninfo=$2 mock=$3 control=$4 real=$5 kafka_dir=$6
    {
        echo "# written by tests/support/stack.sh start $dir"
        printf 'export OUTBOX_RELAY_TEST_PG=%q\n' "$conninfo"
        printf 'export PG_BINDIR=%q\n' "$PG_BINDIR"
        printf 'export OUTBOX_RELAY_TEST_KAFKA=%q\n' "${mock:-$real}"
        if [ -n "$mock" ]; then
            printf 'export OUTBOX_RELAY_TEST_MOCK_KAFKA=%q\n' "$mock"
            printf 'export OUTBOX_RELAY_TEST_MOCK_CONTROL=%q\n' "$control"
        fi
        if [ -n "$real" ]; then
            printf 'export OUTBOX_RELAY_TEST_REAL_KAFKA=%q\n' "$real"
        fi
        if [ -n "$kafka_dir" ]; then
            printf 'export OUTBOX_RELAY_TEST_KAFKA_DIR=%q\n' "$kafka_dir"
            printf 'export OUTBOX_RELAY_TEST_KAFKA_SH=%q\n' "$(dirname "$SELF")/kafka.sh"
        fi
        printf 'export OUTBOX_RELAY_TEST_STACK_DIR=%q\n' "$dir"
        printf 'export OUTBOX_RELAY_TEST_STACK_SH=%q\n' "$SELF"
    } > "$dir/env.tmp"
    mv "$dir/env.tmp" "$dir/env"
}

pg_running() {
    local dir=$1
    [ -f "$dir/pg/postmaster.pid" ] && as_pg "$PG_BINDIR/pg_ctl" -D "$dir/pg" status >/dev/null 2>&1
}

start_pg() {
    local dir=$1 port durable=off
    if [ "${OUTBOX_RELAY_TEST_PG_DURABLE:-0}" = 1 ]; then durable=on; fi
    [ -x "$PG_BINDIR/initdb" ] || die "$PG_BINDIR/initdb not found: install postgresql-15 (or set PG_BINDIR)"
    mkdir -p "$dir/pg" "$dir/s"
    if [ "$(id -u)" = 0 ]; then
        getent passwd postgres >/dev/null || die "running as root but there is no 'postgres' user to run PostgreSQL as"
        make_reachable_for_postgres "$dir"
    fi
    if [ ${#dir} -gt 80 ]; then
        die "stack directory path too long for a unix socket (${#dir} > 80 chars): $dir"
    fi

    if pg_running "$dir"; then
        note "PostgreSQL already running in $dir/pg"
        cat "$dir/pg.port"
        return 0
    fi

    if [ ! -f "$dir/pg/PG_VERSION" ]; then
        note "initdb $dir/pg"
        if ! as_pg "$PG_BINDIR/initdb" -D "$dir/pg" -U postgres --auth=trust -E UTF8 --locale=C \
                --no-sync --no-instructions >"$dir/initdb.log" 2>&1; then
            cat "$dir/initdb.log" >&2
            die "initdb failed (log: $dir/initdb.log)"
        fi
    fi

    for _ in 1 2 3 4 5; do
        port=$(free_port) || die "no free TCP port found"
        cat > "$dir/pg/postgresql.auto.conf" <<EOF
# written by stack.sh: a throwaway test cluster, durability $durable
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir/s'
fsync = $durable
synchronous_commit = $durable
full_page_writes = $durable
max_connections = 200
max_locks_per_transaction = 256
# log-based capture (relay.capture = wal) and Debezium's connector read the
# outbox through logical replication slots
wal_level = logical
max_replication_slots = 40
max_wal_senders = 40
log_min_messages = warning
log_line_prefix = '%m [%p] %a '
EOF
        if [ "$(id -u)" = 0 ]; then chown postgres: "$dir/pg/postgresql.auto.conf"; fi
        : > "$dir/pg.log"
        if [ "$(id -u)" = 0 ]; then chown postgres: "$dir/pg.log"; fi
        note "starting PostgreSQL on 127.0.0.1:$port"
        if as_pg "$PG_BINDIR/pg_ctl" -D "$dir/pg" -l "$dir/pg.log" -w -t "$PG_START_TIMEOUT" start >/dev/null; then
            echo "$port" > "$dir/pg.port"
            echo "$port"
            return 0
        fi
        if grep -q "Address already in use" "$dir/pg.log"; then
            note "port $port taken meanwhile, retrying"
            continue
        fi
        tail -n 30 "$dir/pg.log" >&2 || true
        die "PostgreSQL did not start (log: $dir/pg.log)"
    done
    die "PostgreSQL did not start after 5 attempts (log: $dir/pg.log)"
}

start_mock() {
    local dir=$1 mock pid
    if [ -f "$dir/mock.pid" ] && pid_alive "$(cat "$dir/mock.pid")" && [ -s "$dir/mock.bootstrap" ]; then
        note "mock broker already running (pid $(cat "$dir/mock.pid"))"
        return 0
    fi
    mock=$(find_mock) || die "outbox-relay-mock-broker not found: build it (ninja -C build) or set OUTBOX_RELAY_MOCK_BROKER"
    rm -f "$dir/mock.bootstrap"
    # setsid: the broker must outlive this script and not get the terminal's signals.
    setsid "$mock" --brokers 3 --control "$dir/mock.ctl" --bootstrap-file "$dir/mock.bootstrap" \
        </dev/null >"$dir/mock.out" 2>"$dir/mock.log" &
    pid=$!
    echo "$pid" > "$dir/mock.pid"
    for _ in $(seq 1 $((MOCK_START_TIMEOUT * 10))); do
        if [ -s "$dir/mock.bootstrap" ]; then
            note "mock broker pid $pid at $(cat "$dir/mock.bootstrap")"
            return 0
        fi
        pid_alive "$pid" || { cat "$dir/mock.log" >&2; die "mock broker exited at start (log: $dir/mock.log)"; }
        sleep 0.1
    done
    die "mock broker did not report its address within ${MOCK_START_TIMEOUT}s (log: $dir/mock.log)"
}

cmd_start() {
    local dir=$1 port conninfo control=""
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd -P)
    rm -f "$dir/env"

    port=$(start_pg "$dir" | tail -n 1)
    conninfo="host=127.0.0.1 port=$port dbname=outbox_test user=postgres"

    for _ in $(seq 1 50); do
        if "$PG_BINDIR/pg_isready" -q -h 127.0.0.1 -p "$port" -t 2; then break; fi
        sleep 0.2
    done
    if [ "$("$PG_BINDIR/psql" -X -A -t -h 127.0.0.1 -p "$port" -U postgres -d postgres \
            -c "SELECT count(*) FROM pg_database WHERE datname = 'outbox_test'")" != 1 ]; then
        "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres \
            -c "CREATE DATABASE outbox_test" || die "cannot create database outbox_test"
    fi

    # A value that is one of our own brokers' addresses came from sourcing DIR/env: not external.
    if [ -n "${OUTBOX_RELAY_TEST_KAFKA:-}" ] &&
            { [ "$OUTBOX_RELAY_TEST_KAFKA" = "$(cat "$dir/mock.bootstrap" 2>/dev/null)" ] ||
              [ "$OUTBOX_RELAY_TEST_KAFKA" = "$(cat "$dir/kafka/bootstrap" 2>/dev/null)" ]; }; then
        unset OUTBOX_RELAY_TEST_KAFKA
    fi
    local mock="" real="" kafka_dir="" b
    if [ -n "${OUTBOX_RELAY_TEST_KAFKA:-}" ]; then
        note "using the Kafka broker at $OUTBOX_RELAY_TEST_KAFKA (OUTBOX_RELAY_TEST_KAFKA set; none started)"
        real=$OUTBOX_RELAY_TEST_KAFKA
    else
        for b in ${OUTBOX_RELAY_TEST_BROKERS:-mock}; do
            case $b in
                mock)
                    start_mock "$dir"
                    mock=$(cat "$dir/mock.bootstrap")
                    control="$dir/mock.ctl" ;;
                kafka)
                    kafka_dir="$dir/kafka"
                    case ${OUTBOX_RELAY_TEST_KAFKA_NODES:-1} in 1|3) ;;
                        *) die "OUTBOX_RELAY_TEST_KAFKA_NODES: 1 or 3" ;; esac
                    real=$("$(dirname "$SELF")/kafka.sh" start "$kafka_dir" \
                           "${OUTBOX_RELAY_TEST_KAFKA_NODES:-1}" | tail -n 1) ||
                        die "the Kafka broker did not start (logs in $kafka_dir)" ;;
                *) die "OUTBOX_RELAY_TEST_BROKERS: unknown broker '$b' (mock, kafka)" ;;
            esac
        done
        [ -n "$mock$real" ] || die "OUTBOX_RELAY_TEST_BROKERS names no broker"
    fi

    write_env "$dir" "$conninfo" "$mock" "$control" "$real" "$kafka_dir"
    note "stack up; environment in $dir/env"
    cat "$dir/env"
}

cmd_stop() {
    local dir=$1 pid
    [ -d "$dir" ] || { note "nothing to stop in $dir"; return 0; }
    dir=$(cd "$dir" && pwd -P)
    local rc=0

    if [ -f "$dir/mock.pid" ]; then
        pid=$(cat "$dir/mock.pid")
        if grep -q mock-broker "/proc/$pid/cmdline" 2>/dev/null; then
            stop_pid "$pid" 50
        fi
        rm -f "$dir/mock.pid"
    fi

    "$(dirname "$SELF")/kafka.sh" stop "$dir/kafka" || rc=1

    # A failover test's own primary and standby, left by a test that did not finish.
    local pair
    for pair in "$dir"/logs/*/pair; do
        if [ -d "$pair" ]; then "$(dirname "$SELF")/pg_pair.sh" stop "$pair" || true; fi
    done
    # The TLS tests' server, started by the first of them.
    if [ -d "$dir/pgtls" ]; then "$(dirname "$SELF")/pg_tls.sh" stop "$dir/pgtls" || true; fi

    if [ -f "$dir/pg/postmaster.pid" ]; then
        if ! as_pg "$PG_BINDIR/pg_ctl" -D "$dir/pg" -m fast -w -t "$PG_STOP_TIMEOUT" stop >/dev/null 2>&1; then
            if pg_running "$dir"; then
                note "PostgreSQL did not stop in ${PG_STOP_TIMEOUT}s, stopping immediately"
                as_pg "$PG_BINDIR/pg_ctl" -D "$dir/pg" -m immediate -w -t "$PG_STOP_TIMEOUT" stop >/dev/null 2>&1 || rc=1
            fi
        fi
    fi
    rm -f "$dir/env"
    if [ $rc = 0 ]; then note "stack in $dir stopped"; else note "could not stop PostgreSQL in $dir/pg"; fi
    return $rc
}

cmd_status() {
    local dir=$1
    [ -f "$dir/env" ] || { echo "no stack in $dir"; return 1; }
    pg_running "$dir" || { echo "PostgreSQL down"; return 1; }
    if [ -f "$dir/mock.pid" ] && ! pid_alive "$(cat "$dir/mock.pid")"; then
        echo "mock broker down"; return 1
    fi
    if [ -f "$dir/kafka/nodes" ] && ! "$(dirname "$SELF")/kafka.sh" status "$dir/kafka" >/dev/null; then
        echo "Kafka broker down"; return 1
    fi
    echo "up"
}

[ $# -ge 2 ] || usage
cmd=$1; dir=$2; shift 2
case $cmd in
    start)  [ $# = 0 ] || usage; cmd_start "$dir" ;;
    stop)   [ $# = 0 ] || usage; cmd_stop "$dir" ;;
    status) [ $# = 0 ] || usage; cmd_status "$dir" ;;
    pg_ctl) as_pg "$PG_BINDIR/pg_ctl" -D "$dir/pg" -l "$dir/pg.log" "$@" ;;
    *) usage ;;
esac
