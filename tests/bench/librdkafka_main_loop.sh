#!/usr/bin/env bash
# librdkafka_main_loop.sh SRC OUT — builds librdkafka from the source tree SRC
# (Debian 12's 2.0.2: `apt-get source librdkafka`, or the v2.0.2 tag) with
# one change, upstream's fix to its main thread's wait (librdkafka 2.4.0,
# "Fix to main loop timeout calculation"), into OUT, to measure what that
# fix is worth to the relay:
#
#   tests/bench/librdkafka_main_loop.sh ~/src/librdkafka-2.0.2 /tmp/rdk-fixed
#   LD_LIBRARY_PATH=/tmp/rdk-fixed tests/bench/run --latency-only --rates 1000,5000
#
# Before 2.4.0 the main thread, woken less than a millisecond before its next
# timer, waits with a timeout rounded down to 0 ms and so spins until the
# timer fires. Every Kafka transaction arms a 1 ms timer twice (registering
# its partitions with the coordinator), so a relay that commits a few hundred
# transactions a second spends a large share of its CPU there
# (docs/performance.md). Everything else, the relay included, stays as is.
set -euo pipefail
src=${1:?usage: librdkafka_main_loop.sh SRC OUT}
out=${2:?usage: librdkafka_main_loop.sh SRC OUT}
src=$(cd "$src" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -a "$src/." "$work/"
cd "$work"

# The line as 2.0.2 has it, and as 2.4.0 has it (ceiling division).
old='rd_kafka_q_serve(rk->rk_ops, (int)(sleeptime / 1000), 0,'
new='rd_kafka_q_serve(rk->rk_ops, (int)((sleeptime + 999) / 1000), 0,'
if ! grep -qF "$old" src/rdkafka.c; then
    grep -qF '(sleeptime + 999) / 1000' src/rdkafka.c &&
        echo "librdkafka_main_loop.sh: $src has the fix already" >&2 ||
        echo "librdkafka_main_loop.sh: $src/src/rdkafka.c: the main loop's wait is not the one expected" >&2
    exit 1
fi
sed -i "s|$(printf '%s' "$old" | sed 's/[][\.*^$|]/\\&/g')|$new|" src/rdkafka.c
grep -qF "$new" src/rdkafka.c

./configure >build-configure.txt 2>&1 || { tail -20 build-configure.txt >&2; exit 1; }
make -j"$(nproc)" -C src >build-make.txt 2>&1 || { tail -20 build-make.txt >&2; exit 1; }
mkdir -p "$out"
cp -a src/librdkafka.so.1 "$out/"
ln -sf librdkafka.so.1 "$out/librdkafka.so"
echo "librdkafka_main_loop.sh: $out/librdkafka.so.1 built; run with LD_LIBRARY_PATH=$out" >&2
