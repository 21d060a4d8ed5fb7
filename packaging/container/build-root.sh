#!/bin/sh
# build-root.sh SRCDIR DESTDIR [BUILDDIR]: the meson build and install of the
# container image (packaging/container/Containerfile), in one place so that
# the test `container` checks the image's paths against the same install.
# Prefix /usr and /etc as in the packages; no systemd units or sysusers.d
# file (a container has no systemd; the Containerfile creates the user).
# With DESTDIR "-" it only configures BUILDDIR (for `meson introspect`).
set -eu
SRC=$1
DEST=$2
BUILD=${3:-/tmp/outbox-relay-build}
meson setup "$BUILD" "$SRC" --prefix=/usr --sysconfdir=/etc --buildtype=release \
    -Dsystemdsystemunitdir=no -Dsysusersdir=no >&2
[ "$DEST" = - ] && exit 0
meson compile -C "$BUILD" outbox-relay >&2
meson install -C "$BUILD" --destdir "$DEST" --no-rebuild >&2
