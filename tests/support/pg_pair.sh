#!/usr/bin/env bash
# pg_pair.sh — a PostgreSQL primary and its synchronous streaming standby,
# of one test's own, for failover tests (the stack's server is shared by the
# lane: stopping it would disturb the tests after).
#
#   pg_pair.sh start DIR [TEMPLATE]
#                             initdb a primary in DIR/primary (a copy of TEMPLATE,
#                             initdb'd there the first time), a standby of it in
#                             DIR/standby (pg_basebackup -R, or a copy of the stopped
#                             primary when PG_BINDIR has no pg_basebackup; synchronous:
#                             a commit returns once the standby has it), both on free
#                             loopback ports; prints "PRIMARY_PORT STANDBY_PORT"
#   pg_pair.sh stop-primary DIR
#                             stops the primary immediately (no shutdown checkpoint,
#                             as a crash would)
#   pg_pair.sh stop-primary-fast DIR
#                             stops the primary cleanly (fast: its walsender sends the
#                             standby every byte of WAL first), as a planned switchover does
#   pg_pair.sh promote DIR    promotes the standby and waits until it accepts writes
#   pg_pair.sh rejoin DIR     starts the old primary again as a standby of the promoted
#                             one (standby.signal, primary_conninfo; no pg_rewind, which
#                             a clean stop does not need) and waits until it streams
#   pg_pair.sh start-old-primary DIR
#                             starts the old primary again as it was, writable: a second
#                             primary on the old timeline (split brain), committing
#                             without a synchronous standby
#   pg_pair.sh stop DIR       stops both; safe twice, or on a half-started DIR
#
# PG_BINDIR chooses the server (default Debian's 15; tests/support/pg_versions.sh
# prints others'). PG_PAIR_SLOT_SYNC=1 (PostgreSQL 17+) sets up what failover
# slots need: the standby streams through the physical slot pair_standby, which
# the primary names in synchronized_standby_slots, with sync_replication_slots
# and hot_standby_feedback on and a dbname in its primary_conninfo.
#
# Runs the servers as `postgres` when root (initdb refuses root). A start
# takes a couple of seconds with a TEMPLATE already made (initdb alone takes
# longer on a busy machine): a copy, a start and a base backup of an empty
# cluster.
set -euo pipefail

# The newest PostgreSQL installed (Debian 12: 15, Debian 13: 17) unless PG_BINDIR names one.
PG_BINDIR=${PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
SELF=$(readlink -f "${BASH_SOURCE[0]}")
# shellcheck source=tests/support/common.sh
. "$(dirname "$SELF")/common.sh"

STANDBY_SLOT=pair_standby
die() { echo "pg_pair.sh: error: $*" >&2; exit 1; }

# Settings both servers share; the standby's own port follows.
write_conf() {
    local datadir=$1 port=$2 sock=$3
    cat >> "$datadir/postgresql.auto.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$sock'
fsync = off
full_page_writes = off
synchronous_commit = on
synchronous_standby_names = '*'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
hot_standby = on
max_connections = 100
log_min_messages = warning
log_line_prefix = '%m [%p] %a '
EOF
}

cmd_start() {
    local dir=$1 template=${2:-} pport sport
    mkdir -p "$dir/s"
    dir=$(cd "$dir" && pwd -P)
    [ ${#dir} -le 80 ] || die "directory path too long for a unix socket: $dir"
    if [ "$(id -u)" = 0 ]; then
        chown postgres: "$dir" "$dir/s"
        chmod 0755 "$dir"
    fi
    pg_cluster "$dir/primary" "$dir/initdb.log" "$template"
    echo "host replication all 127.0.0.1/32 trust" | as_pg tee -a "$dir/primary/pg_hba.conf" >/dev/null
    pport=$(free_port) || die "no free port"
    write_conf "$dir/primary" "$pport" "$dir/s"
    if [ "${PG_PAIR_SLOT_SYNC:-0}" = 1 ]; then
        echo "synchronized_standby_slots = '$STANDBY_SLOT'" |
            as_pg tee -a "$dir/primary/postgresql.auto.conf" >/dev/null
    fi
    pg_start "$dir/primary" "$dir/primary.log"
    if [ "${PG_PAIR_SLOT_SYNC:-0}" = 1 ]; then
        "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pport" -U postgres -d postgres \
            -c "SELECT pg_create_physical_replication_slot('$STANDBY_SLOT', true)" >/dev/null ||
            die "cannot create the standby's physical slot"
    fi
    make_standby "$dir" "$pport"
    sport=$(free_port) || die "no free port"
    # The copied settings are the primary's: the standby's come last and win.
    # Promoted, it has no standby of its own: its commits must not wait for one.
    printf "port = %s\nsynchronous_standby_names = ''\n" "$sport" |
        as_pg tee -a "$dir/standby/postgresql.auto.conf" >/dev/null
    if [ "${PG_PAIR_SLOT_SYNC:-0}" = 1 ]; then
        # What a standby needs to keep the failover slots of its primary
        # (PostgreSQL 17+; pg_basebackup -R writes no dbname); promoted, it
        # has no standby slot to wait for.
        printf "%s\n" "primary_slot_name = '$STANDBY_SLOT'" "sync_replication_slots = on" \
            "hot_standby_feedback = on" "synchronized_standby_slots = ''" \
            "primary_conninfo = 'host=127.0.0.1 port=$pport user=postgres dbname=postgres application_name=standby'" |
            as_pg tee -a "$dir/standby/postgresql.auto.conf" >/dev/null
    fi
    pg_start "$dir/standby" "$dir/standby.log"
    echo "$pport $sport" > "$dir/ports"
    # Until the standby streams, synchronous commits would wait.
    for _ in $(seq 1 100); do
        if [ "$("$PG_BINDIR/psql" -X -A -t -h 127.0.0.1 -p "$pport" -U postgres -d postgres \
                -c "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")" = 1 ]; then
            cat "$dir/ports"
            return 0
        fi
        sleep 0.1
    done
    die "the standby does not stream (logs in $dir)"
}

# make_standby DIR PRIMARY_PORT: DIR/standby, a standby of the running primary.
# pg_basebackup refuses servers newer than itself, and the Maven builds have
# none: without one of PG_BINDIR's own, the standby is a copy of the primary
# stopped cleanly (it starts from the shutdown checkpoint and streams on).
make_standby() {
    local dir=$1 pport=$2
    if [ -x "$PG_BINDIR/pg_basebackup" ]; then
        as_pg "$PG_BINDIR/pg_basebackup" -h 127.0.0.1 -p "$pport" -U postgres -D "$dir/standby" \
            -R -X stream -c fast --no-sync >"$dir/basebackup.log" 2>&1 ||
            { cat "$dir/basebackup.log" >&2; die "pg_basebackup failed"; }
        return 0
    fi
    as_pg "$PG_BINDIR/pg_ctl" -D "$dir/primary" -m fast -w -t 60 stop >/dev/null ||
        die "the primary did not stop for the copy"
    as_pg cp -a "$dir/primary" "$dir/standby"
    # The primary's slots are its own; a standby's are synchronised, not copied.
    as_pg find "$dir/standby/pg_replslot" -mindepth 1 -delete
    rm -f "$dir/standby/postmaster.opts"
    as_pg touch "$dir/standby/standby.signal"
    echo "primary_conninfo = 'host=127.0.0.1 port=$pport user=postgres dbname=postgres application_name=standby'" |
        as_pg tee -a "$dir/standby/postgresql.auto.conf" >/dev/null
    pg_start "$dir/primary" "$dir/primary.log"
}

cmd_stop_primary() {
    as_pg "$PG_BINDIR/pg_ctl" -D "$1/primary" -m immediate -w -t 30 stop >/dev/null
}

cmd_rejoin() {
    local dir=$1 sport
    sport=$(cut -d' ' -f2 "$dir/ports")
    as_pg touch "$dir/primary/standby.signal"
    printf "primary_conninfo = 'host=127.0.0.1 port=%s user=postgres application_name=old_primary'\n" \
        "$sport" | as_pg tee -a "$dir/primary/postgresql.auto.conf" >/dev/null
    pg_start "$dir/primary" "$dir/primary.log"
    for _ in $(seq 1 300); do
        if [ "$("$PG_BINDIR/psql" -X -A -t -h 127.0.0.1 -p "$sport" -U postgres -d postgres \
                -c "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'old_primary' AND state = 'streaming'")" = 1 ]; then
            return 0
        fi
        sleep 0.1
    done
    die "the old primary does not stream from the promoted one (logs in $dir)"
}

# No standby follows it: with its synchronous_standby_names its commits would
# wait for ever (which would keep writers off it; this one takes them).
cmd_start_old_primary() {
    echo "synchronous_standby_names = ''" | as_pg tee -a "$1/primary/postgresql.auto.conf" >/dev/null
    pg_start "$1/primary" "$1/primary.log"
}

cmd_promote() {
    as_pg "$PG_BINDIR/pg_ctl" -D "$1/standby" -w -t 60 promote >/dev/null
}

cmd_stop() {
    local dir=$1 d
    for d in standby primary; do
        if [ -f "$dir/$d/postmaster.pid" ]; then
            as_pg "$PG_BINDIR/pg_ctl" -D "$dir/$d" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
        fi
    done
}

[ $# -ge 2 ] || { sed -n '2,33p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 64; }
case $1 in
    start) cmd_start "$2" "${3:-}" ;;
    stop-primary) cmd_stop_primary "$2" ;;
    stop-primary-fast) as_pg "$PG_BINDIR/pg_ctl" -D "$2/primary" -m fast -w -t 60 stop >/dev/null ;;
    promote) cmd_promote "$2" ;;
    rejoin) cmd_rejoin "$2" ;;
    start-old-primary) cmd_start_old_primary "$2" ;;
    stop) cmd_stop "$2" ;;
    *) exit 64 ;;
esac
