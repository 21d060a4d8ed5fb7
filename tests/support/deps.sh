# deps.sh — sourced by tests/run and tests/demo: installs the Debian 12 or 13
# packages the build, the tests and the demo need, when any is missing.
# Only root may install; anyone else is told what to install.
# packaging/debian-root reads the same list for another release's root, naming
# it in OUTBOX_RELAY_DEBS_DIST (default: this machine's release).

# Each release has one OpenJDK: Debian 13 has no 17.
case ${OUTBOX_RELAY_DEBS_DIST:-$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")} in
bookworm) OUTBOX_RELAY_JRE=openjdk-17-jre-headless ;;
*) OUTBOX_RELAY_JRE=openjdk-21-jre-headless ;;
esac

OUTBOX_RELAY_DEBS=(
    meson ninja-build pkg-config gcc python3
    librdkafka-dev libpq-dev libuv1-dev libcjson-dev libinih-dev libcriterion-dev
    postgresql postgresql-client kcat curl
    pgbouncer   # the pooler tests run the real one in front of the test cluster
    libhttp-parser-dev prometheus   # prometheus: for promtool (the only package that has it)
    python3-yaml groff-base         # the manifest and man page checks (tests/packaging)
    debhelper dpkg-dev lintian rpm systemd
    elfutils   # eu-strip: Debian 13's rpmbuild strips the binary with it (find-debuginfo)
    "$OUTBOX_RELAY_JRE" maven       # the real Kafka broker (tests/support/kafka.sh)
    python3-psycopg2 python3-confluent-kafka   # the benchmark's peers (tests/bench/peer_*.py)
)

ensure_debs() {
    local missing=() p
    for p in "${OUTBOX_RELAY_DEBS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ]; then
        echo "missing Debian packages: ${missing[*]}" >&2
        echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
        return 1
    fi
    echo "installing: ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    # Do not let the package's own cluster start: the tests run their own.
    apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

# Configures (once) and builds the tree in $1.
build_tree() {
    local dir=$1
    if [ ! -f "$dir/build.ninja" ]; then
        meson setup "$dir" >&2
    fi
    ninja -C "$dir" >&2
}
