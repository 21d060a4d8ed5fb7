# shellcheck shell=bash
# common.sh: sourced by packaging/build-deb and packaging/build-rpm.
# The parts both need: where the tree is, its version, a clean copy of it, and
# installing Debian packages the build needs.

PKG_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

pkg_say() { echo "${0##*/}: $*" >&2; }
pkg_die() { pkg_say "error: $*"; exit 1; }

# pkg_version [TREE]: the version of TREE's (default: this tree's) meson.build
# project(), the one place it is set. (Read with sed, not `meson introspect`,
# so that it works before meson is installed.)
pkg_version() {
    local v
    v=$(sed -n "s/^[[:space:]]*version[[:space:]]*:[[:space:]]*'\([^']*\)'.*/\1/p" \
        "${1:-$PKG_ROOT}/meson.build" | head -n 1)
    [ -n "$v" ] || pkg_die "cannot read the project version from meson.build"
    echo "$v"
}

# pkg_stage_tree DEST [--head]
# Copies the source tree to DEST without build output or anything git ignores:
# the files git tracks plus new files it does not ignore (on a clean checkout
# that is exactly HEAD; in a work tree, what you are about to commit), or with
# --head only what HEAD holds. Without git (an unpacked tarball), the tree
# minus .git and build directories.
pkg_stage_tree() {
    local dest=$1 mode=${2:-worktree}
    mkdir -p "$dest"
    if git -C "$PKG_ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        if [ "$mode" = --head ]; then
            git -C "$PKG_ROOT" archive --format=tar HEAD | tar -C "$dest" -xf -
            return
        fi
        # Tracked files deleted in the work tree are skipped, not an error.
        (cd "$PKG_ROOT" &&
            git ls-files -z --cached --others --exclude-standard |
            while IFS= read -r -d '' f; do
                if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
            done |
            tar --null --no-recursion -T - -cf -) | tar -C "$dest" -xf -
    else
        [ "$mode" = --head ] && pkg_die "--head needs a git checkout"
        tar -C "$PKG_ROOT" --exclude=./.git --exclude='./build' --exclude='./build-*' \
            -cf - . | tar -C "$dest" -xf -
    fi
}

# pkg_apt_install PACKAGE...: installs the Debian packages that are missing,
# as root; anyone else is told what to install.
pkg_apt_install() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" = 0 ] ||
        pkg_die "missing Debian packages: ${missing[*]} (install them: sudo apt-get install ${missing[*]})"
    pkg_say "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}
