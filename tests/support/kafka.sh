#!/usr/bin/env bash
# kafka.sh — a real Apache Kafka cluster (KRaft, no ZooKeeper) for the tests.
#
#   kafka.sh fetch                  puts the broker's jars in the cache (Maven); prints the directory
#   kafka.sh start DIR [N]          N nodes (default 1), each broker and controller, on free
#                                   loopback ports; data, config and logs in DIR; prints the
#                                   bootstrap servers (also in DIR/bootstrap)
#   kafka.sh stop DIR               stops every node (SIGTERM, then SIGKILL); safe to run twice
#   kafka.sh kill DIR NODE          SIGKILL one node (a crash; its data stays)
#   kafka.sh restart DIR NODE [VERSION]
#                                   starts a killed or stopped node again, same ports, config
#                                   and data; on VERSION's jars (an upgrade), else on those it
#                                   ran last (a running node is left alone)
#   kafka.sh pause DIR NODE         SIGSTOP one node: connections stay open, nothing answers
#   kafka.sh resume DIR NODE        SIGCONT
#   kafka.sh status DIR             exit 0 if every node runs
#   kafka.sh grant DIR PRINCIPAL OPERATION --topic|--transactional-id|--cluster [NAME]
#                                   adds an ACL, as an operator would (librdkafka 2.0's
#                                   admin API cannot name a transactional id)
#   kafka.sh features DIR VERSION ARG...
#                                   kafka-features.sh of Kafka VERSION (4.0 or later: the tools
#                                   jar) against the cluster, e.g. `describe`, or `upgrade
#                                   --release-version 4.4` to finalize an upgrade
#
# The version is pinned in tests/support/kafka/pom.xml; OUTBOX_RELAY_TEST_KAFKA_VERSION
# picks another (4.x: the pom's profile kafka4 adds the tools jar, where 4.0 moved
# AclCommand). The jars of each version come from Maven
# Central through `mvn dependency:copy-dependencies` into the cache directory
# (OUTBOX_RELAY_KAFKA_CACHE; default /var/cache/outbox-relay-tests as root, else
# ~/.cache/outbox-relay), once. As root the nodes run as `nobody`.
# A silent broker is fenced after 4 s (broker.session.timeout.ms; Kafka's default
# is 9 s); OUTBOX_RELAY_TEST_KAFKA_SESSION_TIMEOUT_MS sets another.
# DIR/node-N/version says which version node N runs, DIR/version the cluster's
# (while an upgrade rolls, the one all nodes ran before). The config kafka.sh
# writes is one that both 3.9 and 4.x accept (no ZooKeeper or message-format
# settings): a rolling upgrade restarts each node on the same files.
#
# Test settings: replication factor min(N, 3) for every topic including the
# offsets and transaction state logs, min.insync.replicas 2 from three nodes
# on, auto-created topics with 4 partitions, 1 MiB segments, no time-based
# retention (tests stamp messages with fixed dates months back, which the
# default week of retention would delete at its next check), brokers fenced
# 4 s after their last heartbeat (a killed leader is replaced quickly).
#
# Besides PLAINTEXT each node has a SASL_SSL listener (DIR/sasl_bootstrap):
# TLS with a certificate of a throwaway CA made with openssl (DIR/tls/ca.pem;
# DIR/tls/foreign-ca.pem is another CA, which the brokers' certificate does not
# come from), SCRAM-SHA-512 users `relay` and `noacl` (passwords in
# DIR/tls/users; `relay` also with SCRAM-SHA-256 and both with PLAIN, and
# OAUTHBEARER with unsecured JWTs, whose `sub` is the principal: Kafka's
# built-in validator, no token endpoint), the StandardAuthorizer: `relay` may write every topic and
# transactional id and write idempotently, `noacl` may do nothing; PLAINTEXT
# clients are ANONYMOUS, a super user, so the other tests see no ACL.
#
# And an SSL listener that requires a client certificate (DIR/ssl_bootstrap):
# the principal is the certificate's CN. Client certificates, each with its
# key in DIR/tls: client-relay (User:relay, the same ACLs), client-notopic
# (IdempotentWrite but no topic right), client-notxn and client-noidem (no
# ACL at all: tests grant what their case needs), client-expired
# (CN relay, expired) and client-foreign (CN relay, from the foreign CA). The
# brokers' certificate names IP 127.0.0.1 only: connecting by `localhost` is
# a host name the certificate does not carry.
#
# OUTBOX_RELAY_TEST_KAFKA_LOG4J names another log4j.properties for the nodes (more
# loggers at INFO or DEBUG, to read what a broker did during a fault).
#
# OUTBOX_RELAY_TEST_KAFKA_JVM=stock starts the nodes with the JVM flags of
# Kafka's own kafka-server-start.sh (1 GiB heap, G1, the optimising JIT), as
# users run a broker; the default is the lean test JVM (common.sh: JVM_LEAN).
# tests/bench/run sets it: a benchmark measures the broker users run.
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
# shellcheck source=tests/support/common.sh
. "$HERE/common.sh"
START_TIMEOUT=${OUTBOX_RELAY_KAFKA_START_TIMEOUT:-90}
HEAP=${OUTBOX_RELAY_KAFKA_HEAP:-512m}
# Stock: kafka-server-start.sh's KAFKA_HEAP_OPTS.
jvm_flags -Xmx"$HEAP" -Xms64m -- -Xmx"${OUTBOX_RELAY_KAFKA_HEAP:-1G}" -Xms"${OUTBOX_RELAY_KAFKA_HEAP:-1G}"
NODE_JVM=("${JVM[@]}")
RUN_AS=nobody

die() { echo "kafka.sh: error: $*" >&2; exit 1; }
note() { echo "kafka.sh: $*" >&2; }
usage() { sed -n '2,34p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 64; }

kafka_version() {
    [ -n "${OUTBOX_RELAY_TEST_KAFKA_VERSION:-}" ] && { echo "$OUTBOX_RELAY_TEST_KAFKA_VERSION"; return; }
    sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$HERE/kafka/pom.xml"
}
kafka_major() { local v; v=$(kafka_version); echo "${v%%.*}"; }

cache_dir() { echo "$(cache_base)/kafka-$(kafka_version)"; }

cmd_fetch() {
    local v; v=$(kafka_version)
    [[ $v =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "OUTBOX_RELAY_TEST_KAFKA_VERSION: not a version: $v"
    local args=(-Dkafka.version="$v")
    [ "$(kafka_major)" -ge 4 ] && args+=(-Dkafka4)
    maven_fetch "$HERE/kafka/pom.xml" "$(cache_dir)" "Kafka $v" "${args[@]}"
}

# The jars of version $1 (fetched once); prints their directory.
fetch_version() { OUTBOX_RELAY_TEST_KAFKA_VERSION=$1 cmd_fetch; }

# The version node $2 of cluster $1 last ran; a cluster started before nodes
# recorded theirs runs the cluster's.
node_version() {
    cat "$1/node-$2/version" 2>/dev/null || cat "$1/version" 2>/dev/null || kafka_version
}

# AclCommand left the core jar for the tools jar in 4.0.
acl_class() { if [ "$(kafka_major)" -ge 4 ]; then echo org.apache.kafka.tools.AclCommand; else echo kafka.admin.AclCommand; fi; }

# The JVM's command line for jars $1 and cluster $2, into the array JAVA (the
# class path stays one word). The logging config is the cluster's copy: the
# nodes' user may not be able to read the checkout (a clone in a 0700 folder),
# and without it the line that says a node started is never logged.
java_cmd() {
    JAVA=(java "${NODE_JVM[@]}"
          -Dlog4j.configuration="file:$2/log4j.properties" -cp "$1/*")
}

write_config() {
    local dir=$1 node=$2 n=$3 voters=$4 rf=$(( $3 < 3 ? $3 : 3 )) isr=1
    [ "$n" -ge 3 ] && isr=2
    cat > "$dir/node-$node/server.properties" <<EOF
# written by kafka.sh: a throwaway test node
process.roles=broker,controller
node.id=$node
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$(cat "$dir/node-$node/port"),CONTROLLER://127.0.0.1:$(cat "$dir/node-$node/controller_port"),SASL_SSL://127.0.0.1:$(cat "$dir/node-$node/sasl_port"),SSL://127.0.0.1:$(cat "$dir/node-$node/ssl_port")
advertised.listeners=PLAINTEXT://127.0.0.1:$(cat "$dir/node-$node/port"),SASL_SSL://127.0.0.1:$(cat "$dir/node-$node/sasl_port"),SSL://127.0.0.1:$(cat "$dir/node-$node/ssl_port")
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL
listener.name.ssl.ssl.client.auth=required
listener.name.ssl.ssl.truststore.type=PEM
listener.name.ssl.ssl.truststore.location=$dir/tls/ca.pem
ssl.principal.mapping.rules=RULE:^CN=([^,]+).*$/\$1/,DEFAULT
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN,OAUTHBEARER
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_relay="relay-secret-1" user_noacl="noacl-secret-2";
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="ANONYMOUS";
ssl.keystore.type=PEM
ssl.keystore.location=$dir/tls/server.pem
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/node-$node/data
auto.create.topics.enable=true
num.partitions=4
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
log.segment.bytes=1048576
log.retention.ms=-1
num.network.threads=2
num.io.threads=2
background.threads=2
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=${OUTBOX_RELAY_TEST_KAFKA_SESSION_TIMEOUT_MS:-4000}
EOF
}

node_started() {
    local dir=$1 node=$2 since=$3
    # A node is up once its broker reached STARTED after the given log offset.
    tail -c +"$((since + 1))" "$dir/node-$node/kafka.log" 2>/dev/null |
        grep -q "BrokerServer id=$node\] Transition from STARTING to STARTED"
}

# Waits until the nodes given after DIR logged STARTED past their recorded log offset.
wait_started() {
    local dir=$1; shift
    local deadline=$((SECONDS + START_TIMEOUT)) node pending
    while :; do
        pending=""
        for node in "$@"; do
            node_started "$dir" "$node" "$(cat "$dir/node-$node/log_offset")" || pending="$pending $node"
            pid_alive "$(cat "$dir/node-$node/pid")" ||
                { tail -n 30 "$dir/node-$node/kafka.log" >&2; die "node $node exited at start (log: $dir/node-$node/kafka.log)"; }
        done
        # A node can log STARTED and exit at once (a listener's port taken
        # meanwhile: "Fatal error during broker startup"): alive a second later.
        if [ -z "$pending" ]; then
            sleep 1
            for node in "$@"; do
                pid_alive "$(cat "$dir/node-$node/pid")" ||
                    { tail -n 30 "$dir/node-$node/kafka.log" >&2; die "node $node exited after it started (log: $dir/node-$node/kafka.log)"; }
            done
            return 0
        fi
        [ $SECONDS -lt $deadline ] || die "node(s)$pending did not start within ${START_TIMEOUT}s (logs in $dir)"
        sleep 0.2
    done
}

start_nodes() {
    local dir=$1 version=$2 libs; shift 2
    local node drop=() JAVA
    libs=$(fetch_version "$version")
    java_cmd "$libs" "$dir"
    # As root the JVM runs unprivileged.
    [ "$(id -u)" = 0 ] && drop=(setpriv --reuid="$RUN_AS" --regid="$(id -g "$RUN_AS")" --clear-groups --)
    for node in "$@"; do
        stat -c %s "$dir/node-$node/kafka.log" 2>/dev/null > "$dir/node-$node/log_offset" ||
            echo 0 > "$dir/node-$node/log_offset"
        # setsid: the node outlives this script and gets no terminal signals;
        # setsid and setpriv exec, so the recorded pid is the JVM's (kill, pause).
        setsid "${drop[@]}" "${JAVA[@]}" kafka.Kafka \
            "$dir/node-$node/server.properties" </dev/null >>"$dir/node-$node/kafka.log" 2>&1 &
        echo $! > "$dir/node-$node/pid"
        echo "$version" > "$dir/node-$node/version"
    done
    wait_started "$dir" "$@"
    cluster_version "$dir"
}

# DIR/version: the version every node runs, once they all run the same.
cluster_version() {
    local dir=$1 d versions
    versions=$(for d in "$dir"/node-*; do cat "$d/version" 2>/dev/null || echo unknown; done | sort -u)
    [ "$(echo "$versions" | wc -l)" = 1 ] && [ "$versions" != unknown ] && echo "$versions" > "$dir/version"
    return 0
}

# A client certificate DIR/tls/client-$2.{crt,key} with CN $3, from CA $4
# (ca or foreign-ca), valid for $5 days (-1: expired). EC keys: a fraction of
# RSA's cost at start-up.
client_cert() {
    local tls=$1/tls valid=(-days "$5")
    # OpenSSL 3.4 and later refuse a negative -days and take the dates instead.
    if [ "$5" -lt 0 ] && openssl x509 -help 2>&1 | grep -q -- -not_after; then
        valid=(-not_before 20200101000000Z -not_after 20200102000000Z)
    fi
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$3" \
        -keyout "$tls/client-$2.key" -out "$tls/client-$2.csr" &&
    openssl x509 -req -in "$tls/client-$2.csr" -CA "$tls/$4.pem" -CAkey "$tls/$4.key" \
        -CAcreateserial "${valid[@]}" -out "$tls/client-$2.crt"
}

# A CA and the brokers' certificate (127.0.0.1), a CA nobody uses, and the
# client certificates of the SSL listener, in DIR/tls.
make_tls() {
    local tls=$1/tls
    mkdir -p "$tls"
    [ -s "$tls/server.pem" ] && return 0
    (
        set -e
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=outbox-relay-test-ca \
            -keyout "$tls/ca.key" -out "$tls/ca.pem"
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=outbox-relay-foreign-ca \
            -keyout "$tls/foreign-ca.key" -out "$tls/foreign-ca.pem"
        openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$tls/server.key" \
            -out "$tls/server.csr"
        printf 'subjectAltName=IP:127.0.0.1\n' > "$tls/san.ext"
        openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" \
            -CAcreateserial -days 2 -extfile "$tls/san.ext" -out "$tls/server.crt"
        # Kafka's PEM keystore: the PKCS#8 key, then the chain.
        openssl pkcs8 -topk8 -nocrypt -in "$tls/server.key" > "$tls/server.pem"
        cat "$tls/server.crt" "$tls/ca.pem" >> "$tls/server.pem"
        client_cert "$1" relay relay ca 2
        client_cert "$1" notopic notopic ca 2
        client_cert "$1" notxn notxn ca 2
        client_cert "$1" noidem noidem ca 2
        client_cert "$1" expired relay ca -1
        client_cert "$1" foreign relay foreign-ca 2
    ) > "$tls/openssl.log" 2>&1 || { cat "$tls/openssl.log" >&2; die "openssl failed"; }
    printf 'relay relay-secret-1\nnoacl noacl-secret-2\n' > "$tls/users"
    chmod 0644 "$tls"/*.pem "$tls"/client-*.crt "$tls/users"
}

# The ACLs, over PLAINTEXT (ANONYMOUS is a super user): `relay` every topic
# and transactional id and IdempotentWrite, `notopic` IdempotentWrite only
# (an idempotent producer without a topic right). Each command is a JVM
# start, the most of this function's cost: `notopic` shares the second.
add_acls() {
    local dir=$1 libs=$2
    java "${JVM_LEAN[@]}" -cp "$libs/*" -Dlog4j.configuration="file:$dir/log4j.properties" "$(acl_class)" \
        --bootstrap-server "127.0.0.1:$(cat "$dir/node-1/port")" --add --allow-principal User:relay \
        --operation All --topic '*' --transactional-id '*' >"$dir/acls.log" 2>&1 &&
    java "${JVM_LEAN[@]}" -cp "$libs/*" -Dlog4j.configuration="file:$dir/log4j.properties" "$(acl_class)" \
        --bootstrap-server "127.0.0.1:$(cat "$dir/node-1/port")" --add --allow-principal User:relay \
        --allow-principal User:notopic --operation IdempotentWrite --cluster >>"$dir/acls.log" 2>&1 ||
        { cat "$dir/acls.log" >&2; die "adding the ACLs failed"; }
}

cmd_grant() {
    local dir=$1 principal=$2 op=$3 kind=$4 name=${5:-}
    java "${JVM_LEAN[@]}" -cp "$(cmd_fetch)/*" -Dlog4j.configuration="file:$dir/log4j.properties" \
        "$(acl_class)" --bootstrap-server "127.0.0.1:$(cat "$dir/node-1/port")" --add \
        --allow-principal "$principal" --operation "$op" "$kind" ${name:+"$name"} >&2
}

cmd_start() {
    local dir=$1 n=${2:-1} libs node voters="" cluster_id t0=$SECONDS
    [[ $n =~ ^[1-9]$ ]] || die "node count must be 1..9"
    if [ -s "$dir/bootstrap" ] && cmd_status "$dir" >/dev/null 2>&1; then
        note "cluster in $dir already running"; cat "$dir/bootstrap"; return 0
    fi
    libs=$(cmd_fetch)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd -P)
    for node in $(seq 1 "$n"); do
        mkdir -p "$dir/node-$node"
        free_port > "$dir/node-$node/port" || die "no free port"
        free_port > "$dir/node-$node/controller_port" || die "no free port"
        free_port > "$dir/node-$node/sasl_port" || die "no free port"
        free_port > "$dir/node-$node/ssl_port" || die "no free port"
        voters="$voters${voters:+,}$node@127.0.0.1:$(cat "$dir/node-$node/controller_port")"
    done
    install -m 0644 "${OUTBOX_RELAY_TEST_KAFKA_LOG4J:-$HERE/kafka/log4j.properties}" "$dir/log4j.properties"
    make_tls "$dir"
    cluster_id=$(java "${JVM_LEAN[@]}" -cp "$libs/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
    for node in $(seq 1 "$n"); do
        write_config "$dir" "$node" "$n" "$voters"
        java "${JVM_LEAN[@]}" -cp "$libs/*" -Dlog4j.configuration="file:$dir/log4j.properties" \
            kafka.tools.StorageTool format --ignore-formatted -t "$cluster_id" \
            --add-scram 'SCRAM-SHA-512=[name=relay,password=relay-secret-1]' \
            --add-scram 'SCRAM-SHA-512=[name=noacl,password=noacl-secret-2]' \
            --add-scram 'SCRAM-SHA-256=[name=relay,password=relay-secret-1]' \
            -c "$dir/node-$node/server.properties" >"$dir/node-$node/format.log" 2>&1 ||
            { cat "$dir/node-$node/format.log" >&2; die "formatting node $node failed"; }
    done
    echo "$n" > "$dir/nodes"
    kafka_version > "$dir/version"
    if [ "$(id -u)" = 0 ]; then
        chmod 0755 "$dir"
        chown -R "$RUN_AS" "$dir"/node-*
    fi
    start_nodes "$dir" "$(kafka_version)" $(seq 1 "$n")
    local bs=""
    for node in $(seq 1 "$n"); do bs="$bs${bs:+,}127.0.0.1:$(cat "$dir/node-$node/port")"; done
    add_acls "$dir" "$libs"
    local sbs=""
    for node in $(seq 1 "$n"); do sbs="$sbs${sbs:+,}127.0.0.1:$(cat "$dir/node-$node/sasl_port")"; done
    echo "$sbs" > "$dir/sasl_bootstrap"
    sbs=""
    for node in $(seq 1 "$n"); do sbs="$sbs${sbs:+,}127.0.0.1:$(cat "$dir/node-$node/ssl_port")"; done
    echo "$sbs" > "$dir/ssl_bootstrap"
    echo "$bs" > "$dir/bootstrap"
    echo "$((SECONDS - t0))" > "$dir/startup_seconds"
    note "Kafka $(kafka_version), $n node(s) at $bs, up in $((SECONDS - t0)) s"
    echo "$bs"
}

# A node started again on its data: on the version it ran last, or on $3's
# jars (one step of a rolling upgrade, after a clean stop).
cmd_restart() {
    local dir=$1 node=$2 version=${3:-}
    if pid_alive "$(node_pid "$dir" "$node")"; then
        [ -z "$version" ] || [ "$version" = "$(node_version "$dir" "$node")" ] ||
            die "node $node runs $(node_version "$dir" "$node"), not $version: stop it first"
        note "node $node is running"; return 0
    fi
    [ -z "$version" ] || [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "not a version: $version"
    start_nodes "$dir" "${version:-$(node_version "$dir" "$node")}" "$node"
    note "node $node runs Kafka $(node_version "$dir" "$node")"
}

# Kafka's kafka-features.sh, FeatureCommand in the tools jar (4.0 on; 3.9's
# core jar only forwards to it), of version $2: the new release's tool, as
# Kafka's upgrade notes run it. Its output goes to stdout.
cmd_features() {
    local dir=$1 version=$2 libs; shift 2
    [ "${version%%.*}" -ge 4 ] 2>/dev/null || die "features: the tool of Kafka 4.0 or later, not $version"
    libs=$(fetch_version "$version")
    [ -s "$dir/bootstrap" ] || die "no cluster running in $dir"
    java "${JVM_LEAN[@]}" -cp "$libs/*" -Dlog4j.configuration="file:$dir/log4j.properties" \
        org.apache.kafka.tools.FeatureCommand --bootstrap-server "$(cat "$dir/bootstrap")" "$@"
}

node_pid() {
    local dir=$1 node=$2
    [ -f "$dir/node-$node/pid" ] || die "no node $node in $dir"
    cat "$dir/node-$node/pid"
}

cmd_stop() {
    local dir=$1 d
    [ -d "$dir" ] || return 0
    for d in "$dir"/node-*; do
        [ -f "$d/pid" ] || continue
        kill -CONT "$(cat "$d/pid")" 2>/dev/null || true
        stop_pid "$(cat "$d/pid")" 100
        rm -f "$d/pid"
    done
    rm -f "$dir/bootstrap"
}

cmd_status() {
    local dir=$1 d ok=0
    [ -f "$dir/nodes" ] || { echo "no cluster in $dir"; return 1; }
    for d in "$dir"/node-*; do
        if [ -f "$d/pid" ] && pid_alive "$(cat "$d/pid")"; then :; else echo "${d##*/} down"; ok=1; fi
    done
    [ $ok = 0 ] && echo up
    return $ok
}

[ $# -ge 1 ] || usage
cmd=$1; shift
case $cmd in
    fetch)   [ $# = 0 ] || usage; cmd_fetch ;;
    start)   [ $# = 1 ] || [ $# = 2 ] || usage; cmd_start "$@" ;;
    stop)    [ $# = 1 ] || usage; cmd_stop "$1" ;;
    status)  [ $# = 1 ] || usage; cmd_status "$1" ;;
    grant)   [ $# = 4 ] || [ $# = 5 ] || usage; cmd_grant "$@" ;;
    features) [ $# -ge 3 ] || usage; cmd_features "$@" ;;
    kill)    [ $# = 2 ] || usage; pid=$(node_pid "$1" "$2"); kill -KILL "$pid"
             for _ in $(seq 1 100); do pid_alive "$pid" || break; sleep 0.05; done ;;
    restart) [ $# = 2 ] || [ $# = 3 ] || usage; cmd_restart "$@" ;;
    pause)   [ $# = 2 ] || usage; kill -STOP "$(node_pid "$1" "$2")" ;;
    resume)  [ $# = 2 ] || usage; kill -CONT "$(node_pid "$1" "$2")" ;;
    *) usage ;;
esac
