#!/usr/bin/env bash
# pg_tls.sh — a PostgreSQL 15 server, besides the stack's (which takes plain
# TCP), that takes TCP connections over TLS only, with certificates made here
# with openssl, for the tests of secure connections.
#
#   pg_tls.sh start DIR [TEMPLATE]
#                         certificates in DIR/tls, a cluster in DIR/data (a copy
#                         of TEMPLATE, initdb'd there the first time) on a free
#                         loopback port; prints the port. A server already
#                         running in DIR is kept: its port is printed.
#   pg_tls.sh stop DIR    stops it; safe twice, or on a half-started DIR
#
# DIR/tls holds:
#   ca.pem                the CA of the server's and the clients' certificates
#   foreign-ca.pem        another CA, whose certificates the server neither shows nor trusts
#   server.pem/.key       the server's, for DNS:localhost and IP:127.0.0.1
#   client.pem/.key       CN=relay_cert, from ca.pem
#   expired.pem/.key      CN=relay_cert, from ca.pem, valid only in 2020
#   foreign-client.pem/.key  CN=relay_cert, from foreign-ca.pem
# Every key is mode 0600 and owned by the caller (libpq refuses a key others
# may read).
#
# Roles (both with REPLICATION):
#   relay_scram   password "scram-secret-7", SCRAM-SHA-256, over TLS only;
#                 CREATE on database postgres and on its schema public
#   relay_cert    a client certificate from ca.pem (CN=relay_cert), over TLS
#                 only; owns database certs (each role migrates tables of
#                 its own, and the migrations table is its migrator's)
# pg_hba has no `host` line at all: a TCP connection without TLS is refused.
# The unix socket in DIR/s trusts the superuser postgres, for the test's own
# checks. wal_level = logical, so a relay can capture through a slot.
#
# Runs the server as `postgres` when root (initdb refuses root).
set -euo pipefail

PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
SELF=$(readlink -f "${BASH_SOURCE[0]}")
# shellcheck source=tests/support/common.sh
. "$(dirname "$SELF")/common.sh"

die() { echo "pg_tls.sh: error: $*" >&2; exit 1; }

SSL() { openssl "$@" >/dev/null 2>&1 || { openssl "$@" >&2 || true; die "openssl $1 failed"; }; }

# key NAME: a P-256 key (fast to make, and every libpq and OpenSSL takes it).
key() { SSL genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"; chmod 0600 "$1.key"; }

# ca NAME SUBJECT: a self-signed CA.
ca() {
    key "$1"
    SSL req -x509 -new -key "$1.key" -subj "$2" -days 3650 -out "$1.pem" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}

# leaf NAME CA SUBJECT EXTFILE [START END]: a certificate from CA; with START
# and END (YYYYMMDDHHMMSSZ) valid only then, through `openssl ca`, the one
# OpenSSL 3.0 command that sets both dates.
leaf() {
    local name=$1 cafile=$2 subj=$3 ext=$4 start=${5:-} end=${6:-}
    key "$name"
    SSL req -new -key "$name.key" -subj "$subj" -out "$name.csr"
    if [ -z "$start" ]; then
        SSL x509 -req -in "$name.csr" -CA "$cafile.pem" -CAkey "$cafile.key" -CAcreateserial \
            -days 825 -extfile "$ext" -out "$name.pem"
    else
        mkdir -p db
        : > db/index.txt
        cat > db/ca.cnf <<EOF
[ca]
default_ca = tls
[tls]
database = db/index.txt
new_certs_dir = db
serial = db/serial
default_md = sha256
policy = any
copy_extensions = none
[any]
commonName = supplied
EOF
        openssl rand -hex 8 > db/serial
        SSL ca -batch -config db/ca.cnf -cert "$cafile.pem" -keyfile "$cafile.key" \
            -in "$name.csr" -startdate "$start" -enddate "$end" -extfile "$ext" -notext \
            -out "$name.pem"
    fi
    rm -f "$name.csr"
}

make_certs() {
    local tls=$1
    mkdir -p "$tls"
    (
        cd "$tls"
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
        printf 'extendedKeyUsage=clientAuth\n' > client.ext
        ca ca "/CN=outbox-relay test CA"
        ca foreign-ca "/CN=outbox-relay foreign test CA"
        leaf server ca "/CN=localhost" server.ext
        leaf client ca "/CN=relay_cert" client.ext
        leaf expired ca "/CN=relay_cert" client.ext 20200101000000Z 20200201000000Z
        leaf foreign-client foreign-ca "/CN=relay_cert" client.ext
    )
}

cmd_start() {
    local dir=$1 template=${2:-} port data
    if [ -f "$dir/port" ] && as_pg "$PG_BINDIR/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        cat "$dir/port"
        return 0
    fi
    cmd_stop "$dir"
    rm -rf "$dir"
    mkdir -p "$dir/s"
    dir=$(cd "$dir" && pwd -P)
    [ ${#dir} -le 80 ] || die "directory path too long for a unix socket: $dir"
    data=$dir/data
    make_certs "$dir/tls"
    pg_cluster "$data" "$dir/initdb.log" "$template"
    # The server reads its own copies: the caller keeps the keys it owns.
    cp "$dir/tls/server.pem" "$dir/tls/server.key" "$dir/tls/ca.pem" "$data/"
    if [ "$(id -u)" = 0 ]; then
        chown postgres: "$dir" "$dir/s" "$data/server.pem" "$data/server.key" "$data/ca.pem"
        chmod 0755 "$dir" "$dir/tls"
    fi
    as_pg tee "$data/pg_hba.conf" >/dev/null <<EOF
# TYPE   DATABASE  USER         ADDRESS       METHOD
local    all       postgres                   trust
hostssl  all       relay_scram  127.0.0.1/32  scram-sha-256
hostssl  all       relay_cert   127.0.0.1/32  cert
EOF
    port=$(free_port) || die "no free port"
    as_pg tee -a "$data/postgresql.auto.conf" >/dev/null <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir/s'
fsync = off
full_page_writes = off
synchronous_commit = off
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
max_connections = 100
password_encryption = 'scram-sha-256'
ssl = on
ssl_cert_file = 'server.pem'
ssl_key_file = 'server.key'
ssl_ca_file = 'ca.pem'
log_min_messages = warning
log_connections = on
log_line_prefix = '%m [%p] %u %a '
EOF
    pg_start "$data" "$dir/server.log"
    as_pg "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir/s" -p "$port" -U postgres -d postgres \
        >"$dir/roles.log" 2>&1 <<'EOF' || { cat "$dir/roles.log" >&2; die "cannot create the roles"; }
CREATE ROLE relay_scram LOGIN REPLICATION PASSWORD 'scram-secret-7';
CREATE ROLE relay_cert LOGIN REPLICATION;
GRANT CREATE ON DATABASE postgres TO relay_scram;
GRANT CREATE, USAGE ON SCHEMA public TO relay_scram;
CREATE DATABASE certs OWNER relay_cert;
\c certs
GRANT CREATE, USAGE ON SCHEMA public TO relay_cert;
EOF
    echo "$port" > "$dir/port"
    echo "$port"
}

cmd_stop() {
    local dir=$1
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_pg "$PG_BINDIR/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
    fi
}

[ $# -ge 2 ] || { sed -n '2,33p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 64; }
case $1 in
    start) cmd_start "$2" "${3:-}" ;;
    stop) cmd_stop "$2" ;;
    *) exit 64 ;;
esac
