# common.sh — sourced by the scripts of tests/support (stack.sh, kafka.sh,
# debezium.sh, pg_pair.sh, pg_tls.sh, pg_versions.sh): the small things they share.

pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

# A TCP port on 127.0.0.1 that nothing listens on right now.
free_port() {
    local port
    if command -v python3 >/dev/null 2>&1; then
        if port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' 2>/dev/null); then
            echo "$port"; return 0
        fi
    fi
    for _ in $(seq 1 200); do
        port=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"; return 0
        fi
    done
    return 1
}

# Runs a command as the owner of a cluster: `postgres` when we are root
# (PostgreSQL refuses to run as root), ourselves otherwise.
as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# pg_initdb DATADIR LOG: initdb for a throwaway cluster. Needs the caller's
# PG_BINDIR and die.
pg_initdb() {
    as_pg "$PG_BINDIR/initdb" -D "$1" -U postgres --auth=trust -E UTF8 --locale=C \
        --no-sync --no-instructions >"$2" 2>&1 || { cat "$2" >&2; die "initdb failed"; }
}

# pg_cluster DATADIR LOG [TEMPLATE]: a throwaway cluster in DATADIR; with
# TEMPLATE a copy of it, initdb'd there the first time (the cluster initdb
# makes is the same every time, and a copy is much quicker).
pg_cluster() {
    local data=$1 log=$2 template=${3:-}
    if [ -z "$template" ]; then
        pg_initdb "$data" "$log"
        return 0
    fi
    if [ ! -f "$template/PG_VERSION" ]; then
        rm -rf "$template.tmp"
        mkdir -p "$template.tmp"
        chmod 0700 "$template.tmp"
        if [ "$(id -u)" = 0 ]; then chown postgres: "$template.tmp"; fi
        pg_initdb "$template.tmp" "$log"
        mv "$template.tmp" "$template" 2>/dev/null || rm -rf "$template.tmp"
    fi
    cp -a "$template" "$data"
}

# pg_start DATADIR LOG: pg_ctl start, waiting until it accepts connections.
# Needs the caller's PG_BINDIR and die.
pg_start() {
    as_pg "$PG_BINDIR/pg_ctl" -D "$1" -l "$2" -w -t 60 start >/dev/null ||
        { tail -n 20 "$2" >&2; die "server in $1 did not start (log $2)"; }
}

# Stops a process: SIGTERM, up to $2 tenths of a second, then SIGKILL.
stop_pid() {
    local pid=$1 tenths=${2:-50}
    pid_alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 "$tenths"); do pid_alive "$pid" || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do pid_alive "$pid" || return 0; sleep 0.1; done
}

# Where fetched jars are kept: OUTBOX_RELAY_KAFKA_CACHE, else
# /var/cache/outbox-relay-tests as root, else ~/.cache/outbox-relay.
cache_base() {
    if [ -n "${OUTBOX_RELAY_KAFKA_CACHE:-}" ]; then
        echo "$OUTBOX_RELAY_KAFKA_CACHE"
    elif [ "$(id -u)" = 0 ]; then
        echo /var/cache/outbox-relay-tests
    else
        echo "${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay"
    fi
}

# maven_fetch POM DIR WHAT [MVN ARG...]: the runtime dependencies of POM copied
# into DIR/libs by Maven, once (DIR/complete marks it); prints DIR/libs. Needs
# the caller's die and note.
maven_fetch() {
    local pom=$1 dir=$2 what=$3 tmp lock
    shift 3
    if [ -f "$dir/complete" ]; then echo "$dir/libs"; return 0; fi
    # Stacks start at the same time: one fetches, the others wait for it.
    mkdir -p "$(dirname "$dir")"
    exec {lock}>"$dir.lock"
    flock "$lock"
    if [ -f "$dir/complete" ]; then exec {lock}>&-; echo "$dir/libs"; return 0; fi
    command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
    command -v java >/dev/null || die "java not found (apt-get install openjdk-17-jre-headless)"
    note "fetching $what with Maven into $dir"
    mkdir -p "$dir"
    tmp=$(mktemp -d "$dir/fetch.XXXXXX")
    if ! mvn -B -q -f "$pom" "$@" dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$tmp/libs" >"$tmp/mvn.log" 2>&1; then
        tail -n 30 "$tmp/mvn.log" >&2
        rm -rf "$tmp"
        die "mvn could not fetch $what"
    fi
    rm -rf "$dir/libs"
    mv "$tmp/libs" "$dir/libs"
    rm -rf "$tmp"
    chmod -R a+rX "$dir"
    touch "$dir/complete"
    exec {lock}>&-
    echo "$dir/libs"
}

# The test JVMs (Kafka nodes, Kafka Connect, Kafka's tools) live for seconds
# to minutes on a 2-core machine shared with the suite's other lanes: C2, the
# optimising JIT, spent about a tenth of a whole CI run's CPU compiling code
# these short runs never repay (process accounting of one run). The client
# (C1) compiler alone and the serial collector are enough for test loads.
# shellcheck disable=SC2034  # used by the scripts that source this one
JVM_LEAN=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xshare:auto -Djava.awt.headless=true)

# What Kafka's own start scripts give a JVM (kafka-run-class.sh's
# KAFKA_JVM_PERFORMANCE_OPTS: G1, the optimising JIT), as users run a broker
# or Connect; the heap comes from each script (KAFKA_HEAP_OPTS).
# shellcheck disable=SC2034  # used by the scripts that source this one
JVM_STOCK=(-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
           -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true)

# jvm_flags LEAN_HEAP... -- STOCK_HEAP...: the flags of a test JVM into the
# array JVM. OUTBOX_RELAY_TEST_KAFKA_JVM=stock (the benchmark) picks the start
# scripts' heap and flags, the default `lean` the test JVM's.
jvm_flags() {
    local lean=() stock=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do lean+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    stock=("$@")
    case ${OUTBOX_RELAY_TEST_KAFKA_JVM:-lean} in
        lean) JVM=("${lean[@]}" "${JVM_LEAN[@]}") ;;
        stock) JVM=("${stock[@]}" "${JVM_STOCK[@]}") ;;
        *) echo "OUTBOX_RELAY_TEST_KAFKA_JVM must be lean or stock" >&2; exit 64 ;;
    esac
}
