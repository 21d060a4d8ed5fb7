#!/usr/bin/python3
"""debezium_compat.py - the relay in relay.profile = debezium against the real thing.

Kafka Connect standalone with debezium-connector-postgres and its Outbox Event
Router (tests/support/debezium.sh) and outbox-relay (relay.capture = wal) read
the same rows of one Debezium outbox table, each through its own slot, and
publish to two topic prefixes of one broker. Their topics are then compared
message by message, partition by partition, in offset order: key bytes,
value bytes, header names and values in order, timestamp. Any difference fails
with the first differing message shown.

Connect is configured as a Debezium outbox user typically does: key and value
StringConverter (the key is aggregateid's text, the value the payload's JSON
text as PostgreSQL prints the jsonb; the Event Router's default
table.expand.json.payload = false), the default header converter, and
table.field.event.timestamp set to a `timestamp` column (without it the Event
Router stamps messages with the time Connect processed them, which nothing
else can reproduce). extended.headers.enabled = false: Debezium 3 otherwise
adds its own __debezium.context.* headers, which the relay does not write.

Environment: OUTBOX_RELAY_BIN, OUTBOX_RELAY_TEST_PG and a real broker in
OUTBOX_RELAY_TEST_REAL_KAFKA (tests/run's kafka lane). PostgreSQL must run
with wal_level = logical.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

import psycopg2
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

HERE = os.path.dirname(os.path.abspath(__file__))
DEBEZIUM_SH = os.path.join(HERE, "..", "support", "debezium.sh")
RELAY = os.environ["OUTBOX_RELAY_BIN"]
PG = os.environ["OUTBOX_RELAY_TEST_PG"]
KAFKA = os.environ.get("OUTBOX_RELAY_TEST_REAL_KAFKA", "")
RUN = uuid.uuid4().hex[:6]
TABLE = "dbz_" + RUN
TYPES = ["order", "customer", "Invoice-2"]
PARTITIONS = 4
PLACEMENT = "type:header:eventType,tenant:header:tenant"
WORK = tempfile.mkdtemp(prefix="outbox-relay-debezium-compat.")


def log(msg):
    print("debezium_compat: " + msg, file=sys.stderr, flush=True)


def sql(query, *args):
    with psycopg2.connect(PG) as c, c.cursor() as cur:
        cur.execute(query, args)
        return cur.fetchall() if cur.description else None


def create_table():
    # Debezium's documented outbox table, with an optional timestamp and an
    # extra column placed in a header.
    sql('CREATE TABLE "%s" (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, '
        'aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb, '
        '"timestamp" timestamp NOT NULL, tenant varchar(64))' % TABLE)


def create_topics(prefixes):
    admin = AdminClient({"bootstrap.servers": KAFKA})
    names = ["%s.%s" % (p, t) for p in prefixes for t in TYPES]
    for name, fut in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names]).items():
        fut.result(30)
    return names


def relay_args(prefix):
    return ["-X", "postgres.conninfo=" + PG, "-X", "kafka.bootstrap.servers=" + KAFKA,
            "-X", "relay.profile=debezium", "-X", "relay.table=" + TABLE,
            "-X", "relay.slot=" + prefix, "-X", "relay.publication=" + prefix,
            "-X", "relay.topic=%s.${routedByValue}" % prefix,
            "-X", "relay.column_created_at=timestamp",
            "-X", "relay.additional_placement=" + os.environ.get("COMPAT_RELAY_PLACEMENT", PLACEMENT),
            "-X", "http.listen="]


def write_rows():
    """What applications write: single events, several in one transaction,
    inserted and deleted in one transaction, a NULL payload, a NULL placed
    column, non-ASCII text, an update (which both ignore). Returns the count
    of events."""
    c = psycopg2.connect(PG)
    cur = c.cursor()
    n = 0
    ins = ('INSERT INTO "%s" (id, aggregatetype, aggregateid, type, payload, "timestamp", tenant) '
           "VALUES (%%s, %%s, %%s, %%s, %%s::jsonb, "
           "TIMESTAMP '2026-03-01 12:00:00' + %%s * INTERVAL '1.001 ms', %%s)" % TABLE)
    for i in range(240):
        kind = TYPES[i % len(TYPES)]
        key = "%s-%d" % (kind, i % 17)
        payload = json.dumps({"seq": i, "name": "caf\u00e9 \u2603", "n": [1, 2.5, None, True],
                              "nested": {"k": "v\"q"}}, ensure_ascii=False)
        if i % 29 == 5:
            payload = None
        tenant = None if i % 7 == 3 else "t%d" % (i % 3)
        rid = str(uuid.uuid4())
        cur.execute(ins, (rid, kind, key, "Ev%d" % (i % 4), payload, i, tenant))
        n += 1
        if i % 10 == 9:
            # the pattern Debezium's documentation recommends
            cur.execute('DELETE FROM "%s" WHERE id = %%s' % TABLE, (rid,))
        if i % 3 != 0:
            c.commit()
    cur.execute('UPDATE "%s" SET tenant = \'updated\' WHERE aggregateid = \'order-0\'' % TABLE)
    c.commit()
    c.close()
    return n


def read_all(topics, expected, read_committed):
    """Every message of @topics, per (topic suffix, partition), in offset order."""
    c = Consumer({"bootstrap.servers": KAFKA, "group.id": "compat-" + uuid.uuid4().hex,
                  "enable.auto.commit": False,
                  "isolation.level": "read_committed" if read_committed else "read_uncommitted"})
    c.assign([TopicPartition(t, p, 0) for t in topics for p in range(PARTITIONS)])
    got = {}
    count = 0
    deadline = time.time() + 90
    quiet_until = None
    while time.time() < deadline:
        m = c.poll(0.2)
        if m is None:
            if count >= expected and quiet_until is None:
                quiet_until = time.time() + 2  # anything more (a duplicate) shows now
            if quiet_until and time.time() > quiet_until:
                break
            continue
        if m.error():
            continue
        suffix = m.topic().split(".", 1)[1]
        got.setdefault((suffix, m.partition()), []).append(m)
        count += 1
    c.close()
    return got, count


def describe(m):
    if m is None:
        return "(none)"
    return "topic=%s partition=%d offset=%d key=%r value=%r headers=%r timestamp=%r" % (
        m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.headers(), m.timestamp())


def compare(dbz, rly):
    """The first difference, or None."""
    for where in sorted(set(dbz) | set(rly)):
        a, b = dbz.get(where, []), rly.get(where, [])
        for i in range(max(len(a), len(b))):
            x = a[i] if i < len(a) else None
            y = b[i] if i < len(b) else None
            same = x is not None and y is not None and x.key() == y.key() and \
                x.value() == y.value() and (x.headers() or []) == (y.headers() or []) and \
                x.timestamp() == y.timestamp()
            if not same:
                return "message %d of %s partition %d differs:\n  debezium: %s\n  relay:    %s" % (
                    i, where[0], where[1], describe(x), describe(y))
    return None


def stop_connect(d):
    subprocess.run([DEBEZIUM_SH, "stop", d], check=False)


def drop_slot(name):
    for _ in range(100):
        if not sql("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active", name):
            break
        time.sleep(0.1)
    sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
        "WHERE slot_name = %s AND NOT active", name)
    sql('DROP PUBLICATION IF EXISTS "%s"' % name)


def bad_input():
    """A table without a column the profile reads, or with a wrong type, is
    refused at start (exit 78, the column named); an aggregatetype that makes
    an invalid topic halts relaying (the poison rule of capture = wal), no crash."""
    sql('ALTER TABLE "%s" DROP COLUMN aggregateid' % TABLE)
    p = subprocess.run([RELAY, "run"] + relay_args("rly_" + RUN), capture_output=True, text=True)
    if p.returncode != 78 or '"aggregateid"' not in p.stderr:
        return "a missing aggregateid: exit %d, %s" % (p.returncode, p.stderr[-300:])
    sql('ALTER TABLE "%s" ADD COLUMN aggregateid int' % TABLE)
    p = subprocess.run([RELAY, "run"] + relay_args("rly_" + RUN), capture_output=True, text=True)
    if p.returncode != 78 or "int4" not in p.stderr:
        return "an int aggregateid: exit %d, %s" % (p.returncode, p.stderr[-300:])
    sql('ALTER TABLE "%s" ALTER COLUMN aggregateid TYPE varchar(255)' % TABLE)
    bad_log = os.path.join(WORK, "relay-poison.log")
    with open(bad_log, "w") as out:
        relay = subprocess.Popen([RELAY, "run"] + relay_args("rly_" + RUN), stdout=out, stderr=out)
    try:
        time.sleep(1)
        sql('INSERT INTO "%s" (id, aggregatetype, aggregateid, type, payload, "timestamp") '
            "VALUES (gen_random_uuid(), 'no topic!', '1', 'T', '{}', now())" % TABLE)
        deadline = time.time() + 30
        while "relaying halted" not in open(bad_log).read():
            if relay.poll() is not None or time.time() > deadline:
                return "an invalid topic: no halt (exit %r; log %s)" % (relay.poll(), bad_log)
            time.sleep(0.2)
        if relay.poll() is not None:
            return "an invalid topic: the relay exited %d" % relay.returncode
    finally:
        relay.terminate()
        relay.wait(30)
    return None


def main():
    if not KAFKA:
        log("no real broker (OUTBOX_RELAY_TEST_REAL_KAFKA): skipped")
        return 77
    if sql("SHOW wal_level")[0][0] != "logical":
        log("PostgreSQL must run with wal_level = logical")
        return 1
    t0 = time.time()
    dbz, rly = "dbz_" + RUN + "_c", "rly_" + RUN
    create_table()
    topics_dbz = create_topics([dbz])
    topics_rly = create_topics([rly])
    connect_dir = os.path.join(WORK, "connect")
    relay = None
    try:
        log("starting Kafka Connect with Debezium")
        subprocess.run([DEBEZIUM_SH, "start", connect_dir, "--pg", PG, "--bootstrap", KAFKA,
                        "--table", "public." + TABLE, "--slot", dbz, "--publication", dbz,
                        "--topic-prefix", dbz,
                        "--set", "transforms.outbox.table.field.event.timestamp=timestamp",
                        "--set", "transforms.outbox.table.fields.additional.placement=" + PLACEMENT,
                        "--set", "extended.headers.enabled=false",
                        "--set", "poll.interval.ms=50"], check=True)
        log("Connect running after %.1f s" % (time.time() - t0))
        subprocess.run([RELAY, "migrate"] + relay_args(rly), check=True)
        n = write_rows()
        relay_log = open(os.path.join(WORK, "relay.log"), "w")
        relay = subprocess.Popen([RELAY, "run"] + relay_args(rly), stdout=relay_log,
                                 stderr=relay_log)
        got_dbz, n_dbz = read_all(topics_dbz, n, False)
        got_rly, n_rly = read_all(topics_rly, n, True)
        log("%d events written; Debezium published %d, the relay %d" % (n, n_dbz, n_rly))
        diff = compare(got_dbz, got_rly)
        if diff:
            log("DIFFERENT: " + diff + "\n(logs in %s)" % WORK)
            return 1
        if n_dbz != n or n_rly != n:
            log("expected %d messages on each side (logs in %s)" % (n, WORK))
            return 1
        stop_connect(connect_dir)
        relay.terminate()
        relay.wait(30)
        relay = None
        bad = bad_input()
        if bad:
            log("bad input: " + bad)
            return 1
        log("bad input refused at start (exit 78) and halted on (invalid topic)")
        first = got_dbz[sorted(got_dbz)[0]][0]
        log("identical: %d messages over %d partitions, in %.1f s; the first: %s" % (
            n, len(got_dbz), time.time() - t0, describe(first)))
        return 0
    finally:
        if relay:
            relay.terminate()
            relay.wait(30)
        stop_connect(connect_dir)
        drop_slot(dbz)
        drop_slot(rly)
        sql('DROP TABLE IF EXISTS "%s"' % TABLE)


if __name__ == "__main__":
    sys.exit(main())
