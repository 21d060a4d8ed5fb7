#!/bin/sh
# sysusers-generate-pre.sh FILE...: the shell commands that create the users
# and groups a sysusers.d(5) file declares, for an rpm %pre scriptlet where
# systemd-sysusers may be absent (containers). Fedora's systemd-rpm-macros
# ship the same as sysusers.generate-pre.sh behind %sysusers_create_compat;
# Debian's rpm does not, so packaging/rpm/macros.debian-host runs this one.
# Only what the project's file uses is handled: 'u' (with its own group) and
# 'g' lines, an ID of '-', a home and a shell ('-' for /usr/sbin/nologin).
set -eu

for f in "$@"; do
    # shellcheck disable=SC2034 # fields named for the reader
    sed -e 's/#.*//' "$f" | while read -r type name id rest; do
        [ -n "${type:-}" ] || continue
        # The GECOS is quoted and may hold spaces: split the rest by hand.
        case $rest in
        \"*) gecos=${rest#\"}; gecos=${gecos%%\"*}; rest=${rest#\"*\"} ;;
        *) gecos=${rest%% *}; rest=${rest#"$gecos"} ;;
        esac
        set -- $rest
        home=${1:--}; shell=${2:--}
        [ "$home" = - ] && home=/
        [ "$shell" = - ] && shell=/usr/sbin/nologin
        [ "$gecos" = - ] && gecos=
        [ "$id" = - ] || { echo "sysusers-generate-pre.sh: fixed IDs are not handled ($name)" >&2; exit 1; }
        case $type in
        g)
            echo "getent group '$name' >/dev/null || groupadd -r '$name' || :"
            ;;
        u)
            echo "getent group '$name' >/dev/null || groupadd -r '$name' || :"
            echo "getent passwd '$name' >/dev/null || useradd -r -g '$name' -d '$home' -s '$shell' -c '$gecos' '$name' || :"
            ;;
        *)
            echo "sysusers-generate-pre.sh: line type '$type' is not handled" >&2
            exit 1
            ;;
        esac
    done
done
