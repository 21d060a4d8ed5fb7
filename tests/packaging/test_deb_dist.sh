#!/usr/bin/env bash
# test_deb_dist.sh: the .deb of another Debian release, built, linted and
# installed there, as root.
#
#   tests/packaging/test_deb_dist.sh [DIST] [DEB]      (DIST default trixie)
#
# 1. Builds the package with `packaging/build-deb --dist DIST` (or takes DEB)
#    and checks that its Depends name DIST's libraries (computed by
#    dpkg-shlibdeps there, so Debian 13's libuv1t64, not libuv1).
# 2. Runs DIST's lintian on it: no error and no warning (the overrides and
#    their reasons are in packaging/debian/outbox-relay.lintian-overrides).
# 3. Installs it with apt-get on a fresh DIST root (what debootstrap made, no
#    systemd in it) and checks what a user would: `outbox-relay --version`
#    names the package's version and DIST's librdkafka, the service user can
#    load the installed configuration with `check-config`, the user and the
#    0640 root:outbox-relay configuration exist.
# 4. Installs man-db and reads both man pages with man(1); installs systemd
#    and checks both units with `systemd-analyze verify` and their hardening
#    with `systemd-analyze security --offline` ("OK" or better), as
#    test_packages.sh does on the host.
#
# Not part of `meson test`: it builds in another root and downloads DIST's
# packages (several minutes). Exit status: 0 passed, 1 failed, 77 skipped.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
say() { echo "test_deb_dist: $*" >&2; }
fail() { say "FAIL: $*"; exit 1; }
[ "$(id -u)" = 0 ] || { say "SKIP: needs root (debootstrap, chroot)"; exit 77; }
DIST=${1:-trixie}
DEB=${2:-}

WORK=$(mktemp -d /var/tmp/outbox-relay-debdist.XXXXXX)
FRESH=$WORK/root
MOUNTS=()
cleanup() {
    local i
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount -l "${MOUNTS[$i]}" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# ---- 1. build ---------------------------------------------------------------
if [ -z "$DEB" ]; then
    say "building with packaging/build-deb --dist $DIST"
    DEB=$("$ROOT/packaging/build-deb" --dist "$DIST" "$WORK/out" 2>"$WORK/build.log") ||
        { tail -n 60 "$WORK/build.log" >&2; fail "packaging/build-deb --dist $DIST failed"; }
fi
say "package: $DEB"
deps=$(dpkg-deb -f "$DEB" Depends)
say "Depends: $deps"
VERSION=$(dpkg-deb -f "$DEB" Version)
case $DIST in
trixie)
    case $VERSION in *+deb13) ;; *) fail "version $VERSION does not say Debian 13 (+deb13)" ;; esac
    case $deps in *libuv1t64*) ;; *) fail "Depends names no libuv1t64 (Debian 13's libuv): $deps" ;; esac ;;
esac
for lib in libpq5 librdkafka1 libcjson1 libinih1 libhttp-parser2.9; do
    case $deps in *"$lib "*|*"$lib,"*|*"$lib") ;; *) fail "Depends lacks $lib: $deps" ;; esac
done

# ---- 2. lintian in DIST -----------------------------------------------------
RD=$("$ROOT/packaging/debian-root" "$DIST")
LINT=$(mktemp -d "$RD/tmp/lint.XXXXXX")
cp "$DEB" "$LINT/"
say "lintian ($DIST)"
lint_status=0
lint=$("$ROOT/packaging/debian-root" "$DIST" run lintian --fail-on error,warning --display-info \
    --show-overrides "/tmp/${LINT##*/}/${DEB##*/}" 2>&1) || lint_status=$?
rm -rf "$LINT"
printf '%s\n' "$lint" | grep -v 'running with root privileges is not recommended' >&2 || true
[ "$lint_status" = 0 ] || fail "lintian ($DIST) reports errors or warnings (status $lint_status)"

# ---- 3. install on a fresh root ---------------------------------------------
say "a fresh $DIST root"
"$ROOT/packaging/debian-root" "$DIST" fresh "$FRESH"
for m in proc sys dev dev/pts; do
    mkdir -p "$FRESH/$m"
    case $m in
    proc) mount -t proc proc "$FRESH/proc" ;;
    sys) mount -t sysfs sysfs "$FRESH/sys" ;;
    dev) mount --bind /dev "$FRESH/dev" ;;
    dev/pts) mount -t devpts -o newinstance,ptmxmode=0666 devpts "$FRESH/dev/pts" ;;
    esac
    MOUNTS+=("$FRESH/$m")
done
cp /etc/resolv.conf "$FRESH/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' >"$FRESH/usr/sbin/policy-rc.d"
chmod 755 "$FRESH/usr/sbin/policy-rc.d"
cp "$DEB" "$FRESH/tmp/"
in_fresh() { chroot "$FRESH" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"; }
in_fresh test ! -e /usr/bin/systemctl || fail "the fresh root has systemd already"
say "apt-get install ./${DEB##*/} (no systemd)"
in_fresh apt-get update -q >"$WORK/update.log" 2>&1 || { cat "$WORK/update.log" >&2; fail "apt-get update"; }
in_fresh apt-get install -y -q "/tmp/${DEB##*/}" >"$WORK/install.log" 2>&1 ||
    { cat "$WORK/install.log" >&2; fail "apt-get install failed"; }
in_fresh test ! -e /usr/bin/systemctl || fail "installing the package pulled in systemd"

v=$(in_fresh outbox-relay --version) || fail "outbox-relay --version failed"
say "outbox-relay --version: $v"
printf '%s\n' "$v" | grep -q "^outbox-relay ${VERSION%%-*} " || fail "--version does not say ${VERSION%%-*}: $v"
if [ "$DIST" = trixie ]; then
    printf '%s\n' "$v" | grep -q "librdkafka 2\.[89]\|librdkafka [3-9]\." ||
        fail "--version names no librdkafka of Debian 13: $v"
fi
in_fresh getent passwd outbox-relay >/dev/null || fail "no user outbox-relay"
CONF=/etc/outbox-relay/outbox-relay.conf
perm=$(in_fresh stat -c '%a %U %G' "$CONF")
[ "$perm" = "640 root outbox-relay" ] || fail "$CONF is $perm, expected 640 root outbox-relay"
in_fresh setpriv --reuid=outbox-relay --regid=outbox-relay --init-groups \
    env OUTBOX_RELAY_KAFKA_BOOTSTRAP_SERVERS=localhost:9092 outbox-relay check-config >"$WORK/cc.out" 2>&1 ||
    { cat "$WORK/cc.out" >&2; fail "check-config as the service user failed"; }
grep -q 'localhost:9092' "$WORK/cc.out" || fail "check-config does not print the broker it was given"
say "check-config as outbox-relay: passed"

# ---- 4. man pages and the units ---------------------------------------------
say "installing man-db and systemd in the fresh root"
in_fresh apt-get install -y -q --no-install-recommends man-db systemd >"$WORK/install2.log" 2>&1 ||
    { cat "$WORK/install2.log" >&2; fail "apt-get install man-db systemd failed"; }
in_fresh env MANPAGER=cat COLUMNS=100 man 8 outbox-relay >"$WORK/man8.txt" 2>"$WORK/man.err" ||
    { cat "$WORK/man.err" >&2; fail "man 8 outbox-relay failed"; }
grep -q 'outbox-relay' "$WORK/man8.txt" && grep -qi 'check-config' "$WORK/man8.txt" ||
    fail "man 8 outbox-relay does not describe the commands"
in_fresh env MANPAGER=cat COLUMNS=100 man 5 outbox-relay.conf >"$WORK/man5.txt" 2>"$WORK/man.err" ||
    { cat "$WORK/man.err" >&2; fail "man 5 outbox-relay.conf failed"; }
grep -q 'bootstrap.servers' "$WORK/man5.txt" || fail "man 5 outbox-relay.conf names no bootstrap.servers"
say "man 8 outbox-relay ($(wc -l <"$WORK/man8.txt") lines), man 5 outbox-relay.conf ($(wc -l <"$WORK/man5.txt") lines)"

UNIT=$(in_fresh dpkg -L outbox-relay | grep '/systemd/system/outbox-relay.service$')
out=$(in_fresh systemd-analyze verify "$UNIT" outbox-relay@pkgtest.service 2>&1) ||
    fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify: $out"
say "systemd-analyze verify $UNIT outbox-relay@pkgtest.service: no message"
for unit in "$UNIT" "${UNIT%/*}/outbox-relay@.service"; do
    level=$(in_fresh systemd-analyze security --offline=yes --no-pager "$unit" 2>&1 | tail -n 1)
    say "$level"
    case $level in
    *"exposure level for"*": "[0-9].[0-9]" OK"* | *"exposure level for"*" SAFE"*) ;;
    *) fail "hardening of $unit on $DIST: $level" ;;
    esac
done
say "passed"
