#!/usr/bin/env bash
# test_packages.sh: the packaging checks of CI, on Debian 12, as root.
#
#   tests/packaging/test_packages.sh          (meson test --suite packaging)
#
# 1. Builds the .deb with packaging/build-deb and runs lintian on it (any
#    error fails). With OUTBOX_RELAY_TEST_PACKAGE_NOCHECK=1 the build skips
#    the unit suite (DEB_BUILD_OPTIONS=nocheck).
# 2. Installs it with apt-get and checks what it installed: the binary runs,
#    the service user exists and can read the configuration (0640
#    root:outbox-relay), the service is neither enabled nor started,
#    `systemd-analyze verify` accepts both units and their hardening scores
#    "OK" or better with `systemd-analyze security --offline`.
# 3. With the test stack in the environment (OUTBOX_RELAY_TEST_PG and
#    OUTBOX_RELAY_TEST_KAFKA, as tests/run provides), runs the installed
#    relay as the service user with the installed configuration overridden
#    by -X, and waits until the rows it was given are marked sent.
# 4. Purges the package and checks that nothing is left: no file of the
#    package, no /etc/outbox-relay, no systemd state; the user and group
#    stay, as Debian and Fedora do.
# 5. Builds the .rpm with packaging/build-rpm (in the background from step 2
#    on, its %check skipped: the .deb's ran the same tests) and checks its file list,
#    scriptlets and requirements (rpm -qp --list --scripts --requires).
#
# Exit status: 0 passed, 1 failed, 77 skipped (not root, not Debian, or
# outbox-relay already installed here: the test installs and purges it, and
# will not touch an installation it did not make).
#
# systemd-analyze verify needs no running systemd: it loads the unit files and
# checks their syntax, the executables and the man page they name, offline.
# Starting the unit is not tested: CI machines have no systemd as PID 1.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
say() { echo "test_packages: [${SECONDS} s] $*" >&2; }
fail() { say "FAIL: $*"; exit 1; }
skip() { say "SKIP: $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root (installs and purges the package)"
if ! command -v dpkg >/dev/null || ! command -v apt-get >/dev/null; then skip "not a Debian system"; fi
if dpkg-query -W -f='${Status}' outbox-relay 2>/dev/null | grep -q 'install ok'; then
    skip "outbox-relay is installed on this machine; remove it first (dpkg --purge outbox-relay)"
fi

# shellcheck source=packaging/common.sh
. "$ROOT/packaging/common.sh"
pkg_apt_install lintian rpm systemd postgresql-client

# Prefix that runs a command as the service user, with HOME as systemd sets
# it. setpriv and env exec, so a command started with & is the relay itself
# and $! its pid (runuser, or a shell function, would stay in between and
# take the signal and the exit status).
AS_SERVICE_USER=(setpriv --reuid=outbox-relay --regid=outbox-relay --init-groups
    env HOME=/nonexistent USER=outbox-relay LOGNAME=outbox-relay)

WORK=$(mktemp -d /tmp/outbox-relay-pkgtest.XXXXXX)
installed=0
relay_pid=
rpm_pid=
table=
cleanup() {
    if [ -n "$relay_pid" ]; then kill "$relay_pid" 2>/dev/null || true; fi
    if [ -n "$rpm_pid" ]; then kill -- "$rpm_pid" 2>/dev/null || true; wait "$rpm_pid" 2>/dev/null || true; fi
    if [ -n "$table" ]; then
        psql -q "$OUTBOX_RELAY_TEST_PG" -c "DROP TABLE IF EXISTS public.\"$table\" CASCADE; DROP FUNCTION IF EXISTS public.\"${table}_enqueue\" CASCADE" >/dev/null 2>&1 || true
    fi
    if [ "$installed" = 1 ]; then dpkg --purge outbox-relay >/dev/null 2>&1 || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# ---- 1. build and lint the .deb ---------------------------------------------
# OUTBOX_RELAY_TEST_PACKAGE_NOCHECK=1 (tests/run sets it when another lane
# runs the unit suite on the same tree): the package builds skip it.
deb_options=${DEB_BUILD_OPTIONS:-}
if [ "${OUTBOX_RELAY_TEST_PACKAGE_NOCHECK:-}" = 1 ]; then
    deb_options="${deb_options:+$deb_options }nocheck"
    say "building the .deb (nocheck: the unit suite runs in another lane)"
else
    say "building the .deb"
fi
DEB=$(DEB_BUILD_OPTIONS="$deb_options" "$ROOT/packaging/build-deb" "$WORK/out" 2>"$WORK/build-deb.log") ||
    { tail -n 60 "$WORK/build-deb.log" >&2; fail "packaging/build-deb failed"; }
say "built $DEB"

# The .rpm builds meanwhile (step 5 waits for it): most of what follows waits
# on apt, dpkg and the relay. Its %check is skipped: on this Debian host it is
# the unit suite the .deb build runs (or the other lane), built by the same
# compiler from the same tree.
say "building the .rpm (in the background)"
OUTBOX_RELAY_RPM_NOCHECK=1 "$ROOT/packaging/build-rpm" "$WORK/out" >"$WORK/rpm.path" 2>"$WORK/build-rpm.log" &
rpm_pid=$!

say "lintian"
# Everything lintian says is shown; only errors fail. (Its note that it runs
# as root is dropped: the check is the same.)
lint_status=0
lint=$(lintian --fail-on error --display-info --show-overrides "$DEB" 2>&1) || lint_status=$?
printf '%s\n' "$lint" | grep -v 'running with root privileges is not recommended' >&2 || true
[ "$lint_status" = 0 ] || fail "lintian reports errors (status $lint_status)"

# ---- 2. install and check ---------------------------------------------------
say "installing $DEB"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$DEB" >"$WORK/install.log" 2>&1 ||
    { cat "$WORK/install.log" >&2; fail "apt-get install failed"; }
installed=1

VERSION=$(pkg_version)
/usr/bin/outbox-relay --version | grep -q "^outbox-relay $VERSION " ||
    fail "outbox-relay --version does not say $VERSION: $(/usr/bin/outbox-relay --version)"
getent passwd outbox-relay >/dev/null || fail "no user outbox-relay"
getent group outbox-relay >/dev/null || fail "no group outbox-relay"
CONF=/etc/outbox-relay/outbox-relay.conf
[ "$(stat -c '%a %U %G' "$CONF")" = "640 root outbox-relay" ] ||
    fail "$CONF is $(stat -c '%a %U %G' "$CONF"), expected 640 root outbox-relay"
dpkg-query -W -f='${Conffiles}\n' outbox-relay | grep -q " $CONF " || fail "$CONF is not a conffile"
# The shipped file names no broker (check-config requires one): the
# environment gives it, as a container would.
"${AS_SERVICE_USER[@]}" OUTBOX_RELAY_KAFKA_BOOTSTRAP_SERVERS=localhost:9092 \
    /usr/bin/outbox-relay check-config >/dev/null ||
    fail "the service user cannot load the installed configuration"
man -w outbox-relay >/dev/null 2>&1 || [ -f /usr/share/man/man8/outbox-relay.8.gz ] ||
    fail "no man page outbox-relay(8)"
[ -f /usr/share/man/man5/outbox-relay.conf.5.gz ] || fail "no man page outbox-relay.conf(5)"
[ -f /usr/share/outbox-relay/schema/001_outbox.sql ] || fail "schema files not installed"
for f in outbox-relay.rules.yml outbox-relay-dashboard.json; do
    [ -f "/usr/share/outbox-relay/monitoring/$f" ] || fail "monitoring/$f not installed"
done
if [ -e /etc/systemd/system/multi-user.target.wants/outbox-relay.service ]; then
    fail "installing enabled outbox-relay.service (it must wait for a configured database)"
fi

UNITDIR=$(dpkg -L outbox-relay | grep '/systemd/system/outbox-relay.service$')
say "systemd-analyze verify $UNITDIR"
# Offline, verify still resolves ExecStart= and Documentation=man:, which is
# why it runs on the installed files. Any message is a finding.
out=$(systemd-analyze verify "$UNITDIR" outbox-relay@pkgtest.service 2>&1) ||
    fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify: $out"
for unit in "$UNITDIR" "${UNITDIR%/*}/outbox-relay@.service"; do
    level=$(systemd-analyze security --offline=yes --no-pager "$unit" 2>&1 | tail -n 1)
    say "$level"
    case $level in
    *"exposure level for"*": "[0-9].[0-9]" OK"* | *"exposure level for"*" SAFE"*) ;;
    *) fail "hardening of $unit regressed: $level" ;;
    esac
done

# ---- 3. the installed relay against the test stack --------------------------
if [ -n "${OUTBOX_RELAY_TEST_PG:-}" ] && [ -n "${OUTBOX_RELAY_TEST_KAFKA:-}" ]; then
    table=pkgtest_$$
    X=(-X "postgres.conninfo=$OUTBOX_RELAY_TEST_PG" -X "kafka.bootstrap.servers=$OUTBOX_RELAY_TEST_KAFKA"
       -X "relay.table=$table" -X "relay.notify_channel=$table" -X "relay.topic=pkgtest.\${aggregate_type}"
       -X "http.listen=")   # no status port: nothing to collide with on a shared CI host
    say "migrating table $table as the service user"
    "${AS_SERVICE_USER[@]}" /usr/bin/outbox-relay migrate -c "$CONF" "${X[@]}" \
        >"$WORK/migrate.log" 2>&1 || { cat "$WORK/migrate.log" >&2; fail "migrate failed"; }

    n=50
    psql -q -v ON_ERROR_STOP=1 "$OUTBOX_RELAY_TEST_PG" -c \
        "SELECT public.\"${table}_enqueue\"('order', (i % 7)::text, 'OrderPaid',
                jsonb_build_object('n', i), NULL, NULL) FROM generate_series(1, $n) AS i" \
        >/dev/null || fail "cannot enqueue rows"

    say "running /usr/bin/outbox-relay run -c $CONF -X ... as outbox-relay"
    "${AS_SERVICE_USER[@]}" /usr/bin/outbox-relay run -c "$CONF" "${X[@]}" \
        >"$WORK/relay.log" 2>&1 &
    relay_pid=$!
    unsent=$n
    for _ in $(seq 1 120); do
        unsent=$(psql -qtA "$OUTBOX_RELAY_TEST_PG" -c \
            "SELECT count(*) FROM public.\"$table\" WHERE sent_at IS NULL")
        [ "$unsent" = 0 ] && break
        kill -0 "$relay_pid" 2>/dev/null || break
        sleep 0.5
    done
    if [ "$unsent" != 0 ]; then
        cat "$WORK/relay.log" >&2
        fail "$unsent of $n rows still unsent"
    fi
    kill -TERM "$relay_pid"
    status=0
    wait "$relay_pid" || status=$?
    relay_pid=
    [ "$status" = 0 ] || { cat "$WORK/relay.log" >&2; fail "relay exited $status after SIGTERM"; }
    say "the installed relay marked all $n rows sent and stopped cleanly"
else
    say "no test stack (OUTBOX_RELAY_TEST_PG/OUTBOX_RELAY_TEST_KAFKA unset): installed relay not run"
fi

# ---- 4. purge leaves nothing ------------------------------------------------
mapfile -t files < <(dpkg -L outbox-relay | while read -r f; do [ -d "$f" ] || echo "$f"; done)
say "purging"
dpkg --purge outbox-relay >"$WORK/purge.log" 2>&1 || { cat "$WORK/purge.log" >&2; fail "dpkg --purge failed"; }
installed=0
for f in "${files[@]}"; do
    [ ! -e "$f" ] || fail "$f is left after purge"
done
[ ! -e /etc/outbox-relay ] || fail "/etc/outbox-relay is left after purge"
[ ! -e /usr/bin/outbox-relay ] || fail "/usr/bin/outbox-relay is left after purge"
# The user and group stay (Debian's and Fedora's practice: files they owned
# may outlive the package); installing again reuses them.
getent passwd outbox-relay >/dev/null || fail "purge removed the user outbox-relay (it must stay)"
getent group outbox-relay >/dev/null || fail "purge removed the group outbox-relay (it must stay)"
left=$(find /etc/systemd /var/lib/systemd -name '*outbox-relay*' 2>/dev/null || true)
[ -z "$left" ] || fail "systemd state left after purge: $left"
! dpkg-query -W outbox-relay >/dev/null 2>&1 || fail "dpkg still knows outbox-relay"

# ---- 5. the .rpm ------------------------------------------------------------
say "waiting for the .rpm"
rpm_status=0
wait "$rpm_pid" || rpm_status=$?
rpm_pid=
[ "$rpm_status" = 0 ] || { tail -n 60 "$WORK/build-rpm.log" >&2; fail "packaging/build-rpm failed"; }
RPM=$(cat "$WORK/rpm.path")
say "built $RPM"
rpm -qp --list --scripts --requires "$RPM" >"$WORK/rpm.txt" 2>&1 || fail "rpm -qp failed on $RPM"
expect() {
    grep -qF -- "$1" "$WORK/rpm.txt" || { cat "$WORK/rpm.txt" >&2; fail "rpm -qp output lacks: $1"; }
}
expect /usr/bin/outbox-relay
expect /usr/lib/systemd/system/outbox-relay.service
expect /usr/lib/systemd/system/outbox-relay@.service
expect /usr/lib/sysusers.d/outbox-relay.conf
expect /etc/outbox-relay/outbox-relay.conf
expect /usr/share/man/man8/outbox-relay.8
expect /usr/share/man/man5/outbox-relay.conf.5
expect /usr/share/outbox-relay/monitoring/outbox-relay.rules.yml
expect /usr/share/outbox-relay/monitoring/outbox-relay-dashboard.json
expect /usr/share/outbox-relay/schema/001_outbox.sql
expect /usr/share/licenses/outbox-relay/LICENSE
expect "preinstall scriptlet"
# The %pre commands come from the sysusers.d file (its GECOS and home), not a
# second, hand-written definition.
expect "useradd -r -g 'outbox-relay' -d '/nonexistent' -s '/usr/sbin/nologin' -c 'outbox-relay daemon' 'outbox-relay'"
rpm -qp --qf '%{URL}\n' "$RPM" | grep -q '^https://' || fail "the rpm has no URL"
expect "postinstall scriptlet"
expect "systemctl --no-reload preset outbox-relay.service"
expect "preuninstall scriptlet"
expect "disable --now outbox-relay.service"
expect "postuninstall scriptlet"
expect "try-restart outbox-relay.service"
expect "libpq.so.5"
expect "librdkafka.so.1"
expect "shadow-utils"
attrs=$(rpm -qp --qf '[%{FILEMODES:perms} %{FILEUSERNAME} %{FILEGROUPNAME} %{FILEFLAGS:fflags} %{FILENAMES}\n]' "$RPM" |
    grep ' /etc/outbox-relay/outbox-relay.conf$')
case $attrs in
"-rw-r----- root outbox-relay "*c*n*" /etc/outbox-relay/outbox-relay.conf") ;;
*) fail "the rpm's configuration file is not %config(noreplace) 0640 root:outbox-relay: $attrs" ;;
esac

say "passed"
