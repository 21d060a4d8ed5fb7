#!/usr/bin/python3
"""debezium_poll.py - relay.profile = debezium polled (relay.capture = poll)
against the same profile read from the WAL, on the same rows.

Log-based capture in this profile is proven byte for byte against Kafka
Connect with Debezium (debezium_compat.py); polling reads the same rows
through the view that `outbox-relay migrate` makes over the table, with each
placed column read in binary and formatted again. So: one Debezium outbox
table with a column of every type the profile places (int2, int4, int8,
uuid, jsonb, json, text), migrated for both modes; the relay publishes its
rows once from the slot and once by polling, to two topic prefixes; every
message must be the same (key, value, headers, timestamp, and the partition
of a keyed one), the rows made before the migration must not be published by
polling, polling must wait until the slot has confirmed past the migration
(the rows before it are the slot's reader's), `verify` must pass over the
polled rows, and `replay` of one row must publish it again as it was (plus
its replay header).

Environment: OUTBOX_RELAY_BIN, OUTBOX_RELAY_TEST_PG (wal_level = logical),
OUTBOX_RELAY_TEST_KAFKA (the mock broker or a real one).
"""
import json
import os
import subprocess
import sys
import time
import uuid

import psycopg2
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

RELAY = os.environ["OUTBOX_RELAY_BIN"]
PG = os.environ["OUTBOX_RELAY_TEST_PG"]
KAFKA = os.environ["OUTBOX_RELAY_TEST_KAFKA"]
RUN = uuid.uuid4().hex[:6]
TABLE = "dbzp_" + RUN
PLACEMENT = ("s:header,b:header,u:header,jb:header,tx:header,b:envelope:bb,js:envelope,"
             "i:partition")


def log(msg):
    print("debezium_poll: " + msg, file=sys.stderr, flush=True)


def sql(query, *args):
    with psycopg2.connect(PG) as c, c.cursor() as cur:
        cur.execute(query, args)
        return cur.fetchall() if cur.description else None


def args(prefix, capture):
    return ["-X", "postgres.conninfo=" + PG, "-X", "kafka.bootstrap.servers=" + KAFKA,
            "-X", "relay.profile=debezium", "-X", "relay.capture=" + capture,
            "-X", "relay.table=" + TABLE, "-X", "relay.slot=" + TABLE,
            "-X", "relay.publication=" + TABLE, "-X", "relay.topic=%s.${routedByValue}" % prefix,
            "-X", "relay.column_created_at=ts", "-X", "relay.additional_placement=" + PLACEMENT,
            "-X", "relay.key_converter=json", "-X", "relay.value_converter=json",
            "-X", "http.listen="]


ROWS = [  # aggregateid, payload, s, b, i, u, jb, js, tx
    ("k1", '{"x": 1}', -5, -9000000000, 1, str(uuid.uuid4()), '{"a": [1, "\u00e9"]}',
     '{ "raw" :  1}', "plain"),
    ("k2", '{"x": 2}', 32767, 9223372036854775807, None, None, None, None, None),
    (None, None, 0, 0, 2, "00000000-0000-0000-0000-000000000000", '"str"', "[1,2]", ""),
    ("k1", '{"x": 3, "s": "caf\u00e9 \u2603"}', None, None, 3, None, "[]", "null", "t"),
]


def insert(rows, old=False):
    ids = []
    with psycopg2.connect(PG) as c, c.cursor() as cur:
        for r in rows:
            rid = str(uuid.uuid4())
            cur.execute('INSERT INTO "%s" (id, aggregatetype, aggregateid, type, payload, ts, s, b, '
                        "i, u, jb, js, tx) VALUES (%%s, 'order', %%s, 'T', %%s::jsonb, "
                        "TIMESTAMP '2026-03-01 12:00:00' + %%s * INTERVAL '1 ms', "
                        "%%s, %%s, %%s, %%s, %%s, %%s, %%s)" % TABLE,
                        (rid, r[0], r[1], len(ids)) + tuple(r[2:]))
            ids.append(rid)
    return ids


def read(topic, n, timeout=30):
    """The messages of @topic by their id header, once @n came (or @timeout
    passed) and half a second brought no more. Partitions assigned, not
    subscribed: a group's join can take longer than a short read."""
    c = Consumer({"bootstrap.servers": KAFKA, "group.id": "dp-" + uuid.uuid4().hex,
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    got, deadline = {}, time.time() + timeout
    parts = []
    while not parts and time.time() < deadline:
        t = c.list_topics(topic, timeout=5).topics.get(topic)
        parts = list(t.partitions) if t is not None and not t.error else []
        if not parts:
            time.sleep(0.2)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    quiet = None
    while time.time() < deadline or quiet:
        m = c.poll(0.2)
        if m is None:
            if len(got) >= n and quiet is None:
                quiet = time.time() + 0.5  # anything more (a message too many) shows now
            if quiet and time.time() > quiet:
                break
            continue
        if not m.error():
            got.setdefault(dict(m.headers() or []).get("id", b"").decode(), []).append(m)
    c.close()
    return got


def run_until(argv, done, what, log_path):
    with open(log_path, "w") as out:
        relay = subprocess.Popen([RELAY, "run"] + argv, stdout=out, stderr=out)
    try:
        deadline = time.time() + 60
        while not done():
            if relay.poll() is not None or time.time() > deadline:
                raise RuntimeError("%s: not done (exit %r, log %s)" % (what, relay.poll(), log_path))
            time.sleep(0.2)
    finally:
        relay.terminate()
        relay.wait(30)


def same(a, b):
    return a.key() == b.key() and a.value() == b.value() and a.headers() == b.headers() and \
        a.timestamp() == b.timestamp() and (a.key() == b"null" or a.partition() == b.partition())


def check(ids, old):
    wal, poll = read("w%s.order" % RUN, len(ids)), read("p%s.order" % RUN, len(ids))
    for rid in ids:
        if len(wal.get(rid, [])) != 1 or len(poll.get(rid, [])) != 1:
            return "row %s: %d messages from the slot, %d polled" % (
                rid, len(wal.get(rid, [])), len(poll.get(rid, [])))
        a, b = wal[rid][0], poll[rid][0]
        if not same(a, b):
            return "row %s differs:\n  wal:  %r %r %r %r\n  poll: %r %r %r %r" % (
                rid, a.key(), a.value(), a.headers(), a.partition(),
                b.key(), b.value(), b.headers(), b.partition())
    if any(rid in poll for rid in old):
        return "a row made before the migration was published by polling"
    if set(poll) - set(ids):
        return "polled messages of no row: %r" % sorted(set(poll) - set(ids))
    return None


def verify_and_replay(ids):
    p = subprocess.run([RELAY, "verify", "--json"] + args("p" + RUN, "poll"),
                       capture_output=True, text=True)
    total = json.loads(p.stdout or "{}").get("total", {})
    if p.returncode != 0 or total.get("sent") != len(ids) or total.get("mismatched"):
        return "verify: exit %d, %r %s" % (p.returncode, total, p.stderr[-300:])
    p = subprocess.run([RELAY, "replay", "--from-id", "1", "--to-id", "1", "--topic",
                        "r%s.order" % RUN] + args("p" + RUN, "poll"), capture_output=True, text=True)
    again = read("r%s.order" % RUN, 1).get(ids[0], [])
    first = read("p%s.order" % RUN, len(ids)).get(ids[0], [])
    if p.returncode != 0 or len(again) != 1:
        return "replay: exit %d, %d messages, %s" % (p.returncode, len(again), p.stderr[-300:])
    a, b = first[0], again[0]
    if (a.key(), a.value(), a.timestamp(), a.partition()) != \
            (b.key(), b.value(), b.timestamp(), b.partition()) or \
            a.headers() != [h for h in b.headers() if h[0] != "replay"]:
        return "replay differs: %r %r / %r %r" % (a.value(), a.headers(), b.value(), b.headers())
    return None


def main():
    if sql("SHOW wal_level")[0][0] != "logical":
        log("PostgreSQL must run with wal_level = logical")
        return 1
    sql('CREATE TABLE "%s" (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, '
        'aggregateid varchar(255), type varchar(255) NOT NULL, payload jsonb, ts timestamp, '
        's int2, b int8, i int4, u uuid, jb jsonb, js json, tx text)' % TABLE)
    work = os.environ.get("OUTBOX_RELAY_TEST_STACK_DIR", "/tmp")
    try:
        old = insert(ROWS[:2], True)
        for capture in ("wal", "poll"):
            subprocess.run([RELAY, "migrate"] + args("w" + RUN, capture), check=True,
                           capture_output=True)
        ids = insert(ROWS)
        # Polling first: the slot (relay.slot, here the slot the relay reads
        # in wal mode) has not confirmed past migrate's position, so the
        # polling relay waits, claiming nothing, until the other has run.
        poll_log = os.path.join(work, "dbzp-poll.log")
        with open(poll_log, "w") as out:
            polling = subprocess.Popen([RELAY, "run"] + args("p" + RUN, "poll"), stdout=out,
                                       stderr=out)
        try:
            wait = time.time() + 30
            while "not yet the position" not in open(poll_log).read() and time.time() < wait:
                time.sleep(0.2)
            time.sleep(1)  # a relay that did not wait would have marked rows by now
            unsent = sql('SELECT count(*) FROM "%s" WHERE relay_sent_at IS NULL' % TABLE)[0][0]
            if unsent != len(ids) or "not yet the position" not in open(poll_log).read():
                log("polling did not wait for the slot: %d of %d rows unsent (log %s)" % (
                    unsent, len(ids), poll_log))
                return 1
            run_until(args("w" + RUN, "wal"), lambda: len(read("w%s.order" % RUN, len(ids), 2))
                      >= len(ids), "capture = wal", os.path.join(work, "dbzp-wal.log"))
            wait = time.time() + 30
            while sql('SELECT count(*) FROM "%s" WHERE relay_sent_at IS NULL' % TABLE)[0][0]:
                if polling.poll() is not None or time.time() > wait:
                    log("capture = poll: not done once the slot moved (log %s)" % poll_log)
                    return 1
                time.sleep(0.2)
        finally:
            polling.terminate()
            polling.wait(30)
        bad = check(ids, old) or verify_and_replay(ids)
        if bad:
            log(bad)
            return 1
        log("%d rows: polling waited for the slot, then the same messages from the slot and "
            "polled (int2, int4 partition, int8, uuid, jsonb, json and text placed; NULLs), "
            "verify and replay on the view" % len(ids))
        return 0
    finally:
        sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s AND NOT active", TABLE)
        sql('DROP PUBLICATION IF EXISTS "%s"' % TABLE)
        sql('DROP TABLE IF EXISTS "%s" CASCADE' % TABLE)


if __name__ == "__main__":
    sys.exit(main())
