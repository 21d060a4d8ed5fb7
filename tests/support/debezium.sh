#!/usr/bin/env bash
# debezium.sh — Kafka Connect (standalone, or distributed with one worker) with
# Debezium's PostgreSQL connector and its Outbox Event Router, for the
# benchmark's side-by-side and the compatibility checks.
#
#   debezium.sh fetch                       puts the jars in the cache (Maven); prints the directory
#   debezium.sh start DIR OPTIONS...        starts Connect standalone with one connector; returns
#                                           once the connector and its task run
#       --distributed          Connect distributed with one worker instead: group.id,
#                              config/offset/status topics (replication factor 1, named
#                              after DIR), the connector created through the REST API with
#                              the same properties. With --set
#                              worker.exactly.once.source.support=enabled and --set
#                              exactly.once.support=required its producer commits Kafka
#                              transactions (KIP-618; transaction.boundary=poll)
#       --pg CONNINFO          libpq key=value conninfo of the database (host, port, dbname, user)
#       --bootstrap SERVERS    Kafka bootstrap servers
#       --table SCHEMA.TABLE   the outbox table
#       --slot NAME            the logical replication slot (created if missing)
#       --publication NAME     the publication (created for the table if missing)
#       --topic-prefix PREFIX  topics are PREFIX.<aggregate_type> (route.topic.replacement)
#       --relay-columns        the table is outbox-relay's (event_id, aggregate_type,
#                              aggregate_id, payload, event_type); else Debezium's documented one
#       --set KEY=VALUE        one more connector property (repeatable), e.g. poll.interval.ms=10;
#                              worker.KEY=VALUE sets a worker property instead
#   debezium.sh stop DIR [SECONDS]          stops Connect (SIGTERM, then SIGKILL after SECONDS,
#                                           default 5); safe to run twice
#   debezium.sh pid DIR                     prints the JVM's pid
#
# The JVM: OUTBOX_RELAY_TEST_KAFKA_JVM=stock (as kafka.sh; tests/bench/run
# sets it) gives Connect the heap and flags of Kafka's connect-*.sh scripts
# (-Xms256M -Xmx2G, G1, the optimising JIT), as users run it; the default is
# the lean test JVM (common.sh: JVM_LEAN).
#
# Versions are pinned in tests/support/debezium/pom.xml; the jars come from
# Maven Central into the cache (OUTBOX_RELAY_KAFKA_CACHE, as kafka.sh), once.
# Values are Debezium's defaults except what the outbox needs: pgoutput, the
# slot and publication named, no snapshot (only what is written once the
# slot exists is published), the EventRouter with the table's columns, and
# String converters (key = aggregate_id, value = the payload's JSON text).
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
# shellcheck source=tests/support/common.sh
. "$HERE/common.sh"
START_TIMEOUT=${OUTBOX_RELAY_DEBEZIUM_START_TIMEOUT:-120}

die() { echo "debezium.sh: error: $*" >&2; exit 1; }
note() { echo "debezium.sh: $*" >&2; }
usage() { sed -n '2,40p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 64; }

versions() { sed -n 's:.*<\(connect\|debezium\)\.version>\(.*\)</.*:\2:p' "$HERE/debezium/pom.xml" | paste -sd- -; }

cache_dir() { echo "$(cache_base)/connect-debezium-$(versions)"; }

cmd_fetch() { maven_fetch "$HERE/debezium/pom.xml" "$(cache_dir)" "Kafka Connect and Debezium ($(versions))"; }

# conninfo_value CONNINFO KEY: one key=value of a libpq conninfo.
conninfo_value() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | head -n 1; }

# properties_json FILE: a properties file (key=value lines) as a JSON object,
# the body of the REST API's PUT /connectors/NAME/config.
properties_json() {
    python3 -c 'import json, sys
props = dict(l.rstrip("\n").split("=", 1) for l in open(sys.argv[1]) if "=" in l and not l.startswith("#"))
print(json.dumps(props))' "$1"
}

cmd_start() {
    local dir=${1:?start needs DIR}; shift
    local pg="" bootstrap="" table="" slot="" pub="" prefix="" relay_cols=0 distributed=0 sets=()
    while [ $# -gt 0 ]; do
        case $1 in
            --pg) pg=$2; shift 2 ;;
            --bootstrap) bootstrap=$2; shift 2 ;;
            --table) table=$2; shift 2 ;;
            --slot) slot=$2; shift 2 ;;
            --publication) pub=$2; shift 2 ;;
            --topic-prefix) prefix=$2; shift 2 ;;
            --relay-columns) relay_cols=1; shift ;;
            --distributed) distributed=1; shift ;;
            --set) sets+=("$2"); shift 2 ;;
            *) usage ;;
        esac
    done
    [ -n "$pg" ] && [ -n "$bootstrap" ] && [ -n "$table" ] && [ -n "$slot" ] && [ -n "$pub" ] &&
        [ -n "$prefix" ] || usage
    local libs port
    libs=$(cmd_fetch)
    mkdir -p "$dir"
    port=$(free_port) || die "no free port"
    echo "$port" > "$dir/rest_port"
    # Every directory is its own Connect cluster: a group and topics left by
    # an earlier one would hand this worker their connectors and offsets.
    local cluster; cluster="debezium-$(basename "$dir")-$$"
    {
        if [ "$distributed" = 1 ]; then
            echo "# written by debezium.sh: Kafka Connect distributed, one worker"
            echo "group.id=$cluster"
            for t in config offset status; do
                echo "$t.storage.topic=$cluster-${t}s"
                echo "$t.storage.replication.factor=1"
            done
        else
            echo "# written by debezium.sh: Kafka Connect standalone"
            echo "offset.storage.file.filename=$dir/offsets"
        fi
        echo "bootstrap.servers=$bootstrap"
        echo "key.converter=org.apache.kafka.connect.storage.StringConverter"
        echo "value.converter=org.apache.kafka.connect.storage.StringConverter"
        echo "offset.flush.interval.ms=1000"
        echo "listeners=http://127.0.0.1:$port"
        echo "plugin.discovery=only_scan"
        for s in "${sets[@]}"; do case $s in worker.*) echo "${s#worker.}" ;; esac; done
    } > "$dir/worker.properties"
    {
        echo "name=outbox-debezium"
        echo "connector.class=io.debezium.connector.postgresql.PostgresConnector"
        echo "tasks.max=1"
        echo "database.hostname=$(conninfo_value "$pg" host)"
        echo "database.port=$(conninfo_value "$pg" port)"
        echo "database.user=$(conninfo_value "$pg" user)"
        echo "database.dbname=$(conninfo_value "$pg" dbname)"
        local password; password=$(conninfo_value "$pg" password)
        [ -n "$password" ] && echo "database.password=$password"
        echo "topic.prefix=$prefix-cdc"
        echo "plugin.name=pgoutput"
        echo "slot.name=$slot"
        echo "publication.name=$pub"
        echo "publication.autocreate.mode=filtered"
        echo "table.include.list=$table"
        echo "snapshot.mode=no_data"
        echo "tombstones.on.delete=false"
        echo "transforms=outbox"
        echo "transforms.outbox.type=io.debezium.transforms.outbox.EventRouter"
        echo "transforms.outbox.route.topic.replacement=$prefix.\${routedByValue}"
        if [ "$relay_cols" = 1 ]; then
            echo "transforms.outbox.table.field.event.id=event_id"
            echo "transforms.outbox.table.field.event.key=aggregate_id"
            echo "transforms.outbox.table.field.event.payload=payload"
            echo "transforms.outbox.route.by.field=aggregate_type"
            echo "transforms.outbox.table.fields.additional.placement=event_type:header:event_type"
        fi
        for s in "${sets[@]}"; do case $s in worker.*) ;; *) echo "$s" ;; esac; done
    } > "$dir/connector.properties"
    cat > "$dir/log4j.properties" <<'L4J'
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=${connect.log.file}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
L4J
    : > "$dir/connect.log"
    # Stock: connect-standalone.sh's and connect-distributed.sh's KAFKA_HEAP_OPTS.
    jvm_flags -Xms64m -- -Xms256M -Xmx2G
    local main=(org.apache.kafka.connect.cli.ConnectStandalone "$dir/worker.properties" "$dir/connector.properties")
    if [ "$distributed" = 1 ]; then
        main=(org.apache.kafka.connect.cli.ConnectDistributed "$dir/worker.properties")
        properties_json "$dir/connector.properties" > "$dir/connector.json"
    fi
    java "${JVM[@]}" \
        -Dlog4j.configuration="file:$dir/log4j.properties" -Dconnect.log.file="$dir/connect.log" \
        -cp "$libs/*" "${main[@]}" >"$dir/stdout.log" 2>&1 &
    echo $! > "$dir/pid"
    local deadline=$((SECONDS + START_TIMEOUT)) state created=$((1 - distributed))
    while :; do
        pid_alive "$(cat "$dir/pid")" ||
            { tail -n 40 "$dir/connect.log" "$dir/stdout.log" >&2; die "Connect exited at start (logs in $dir)"; }
        # The REST API answers before the worker has joined its group; until
        # then a PUT is refused (409 or 500), so it is repeated.
        if [ "$created" = 0 ] && curl -fsS -X PUT -H 'Content-Type: application/json' \
                --data-binary "@$dir/connector.json" \
                "http://127.0.0.1:$port/connectors/outbox-debezium/config" >"$dir/create.log" 2>&1; then
            created=1
        fi
        state=$(curl -fsS "http://127.0.0.1:$port/connectors/outbox-debezium/status" 2>/dev/null || true)
        if grep -q '"tasks":\[{"id":0,"state":"RUNNING"' <<<"$state" &&
                grep -q 'Searching for WAL resume position\|streaming\|Processing messages' "$dir/connect.log"; then
            break
        fi
        grep -q '"state":"FAILED"' <<<"$state" && { echo "$state" >&2; die "the connector failed (logs in $dir)"; }
        [ $SECONDS -lt $deadline ] || die "Connect did not start within ${START_TIMEOUT}s (logs in $dir)"
        sleep 0.3
    done
    # The task's producer names its transactional id in its config dump.
    local txn
    txn=$(sed -n 's/.*transactional.id = \(.*-outbox-debezium-[0-9]*\)$/\1/p' "$dir/connect.log" | tail -n 1)
    [ -z "$txn" ] || txn=", the task's producer transactional: $txn"
    note "Connect with Debezium running (pid $(cat "$dir/pid"), REST port $port$txn)"
}

cmd_stop() {
    local dir=${1:?stop needs DIR} grace=${2:-5}
    [ -f "$dir/pid" ] || return 0
    stop_pid "$(cat "$dir/pid")" "$((grace * 10))"
    rm -f "$dir/pid"
}

case ${1:-} in
    fetch) cmd_fetch ;;
    start) shift; cmd_start "$@" ;;
    stop) cmd_stop "${2:-}" "${3:-5}" ;;
    pid) cat "${2:?pid needs DIR}/pid" ;;
    *) usage ;;
esac
