#!/usr/bin/python3
"""debezium_compat.py - the relay in relay.profile = debezium against the real thing.

Kafka Connect standalone with debezium-connector-postgres and its Outbox Event
Router (tests/support/debezium.sh) and outbox-relay (relay.capture = wal) read
the same rows of one Debezium outbox table, each through its own slot, and
publish to two topic prefixes of one broker. Their topics are then compared
message by message, partition by partition, in offset order: key bytes,
value bytes, header names and values in order, timestamp (messages without a
key, of a NULL aggregateid, by their id header: each producer picks their
partition its own way). Any difference fails with the first differing
message shown.

Connect is configured as a Debezium outbox user typically does: key and value
StringConverter (the key is aggregateid's text, the value the payload's JSON
text as PostgreSQL prints the jsonb; the Event Router's default
table.expand.json.payload = false), the default header converter, and
table.field.event.timestamp set to a `timestamp` column (without it the Event
Router stamps messages with the time Connect processed them, which nothing
else can reproduce). extended.headers.enabled = false: Debezium 3 otherwise
adds its own __debezium.context.* headers, which the relay does not write.

A second round (json_round()) runs the other Connect configuration Debezium's
documentation shows: key and value JsonConverter (schemas.enable = false),
table.expand.json.payload = true and columns placed in the value's envelope,
against the relay's relay.key_converter = json, relay.value_converter = json,
relay.expand_json_payload = true and envelope placement, on payloads of
every shape the expansion treats differently.

Then the takeovers of docs/migrating-from-debezium.md on that connector
(debezium_takeover.py): on its slot and publication (takeover()), writers
write while the connector stops, the relay starts on its slot (the same
topics), the relay confirms a fence, and the rollback brings the connector
back; every event must be on Kafka, the first deliveries of each aggregate in
sequence order, and every duplicate one copy on each side of a switch. Then
by polling (poll_takeover()): migrate, the relay polling, the connector
stopped, every duplicate identical on both sides.

Environment: OUTBOX_RELAY_BIN, OUTBOX_RELAY_TEST_PG and a real broker in
OUTBOX_RELAY_TEST_REAL_KAFKA (tests/run's kafka lane). PostgreSQL must run
with wal_level = logical.
"""
import json
import os
import subprocess
import sys
import time
import uuid

import psycopg2

from debezium_common import (DEBEZIUM_SH, KAFKA, PARTITIONS, PG, PLACEMENT, RELAY, RUN, TABLE,
                             TYPES, WORK, clean_up, compare, create_topics, describe, log,
                             read_all, relay_args, sql, stop_connect)
from debezium_takeover import poll_takeover, takeover


def create_table():
    # Debezium's documented outbox table, with an optional timestamp and an
    # extra column placed in a header; aggregateid without its NOT NULL, as
    # some applications' tables have it (a NULL is then a message without a key).
    sql('CREATE TABLE "%s" (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, '
        'aggregateid varchar(255), type varchar(255) NOT NULL, payload jsonb, '
        '"timestamp" timestamp NOT NULL, tenant varchar(64))' % TABLE)


def write_rows():
    """What applications write: single events, several in one transaction,
    inserted and deleted in one transaction, a NULL payload, a NULL placed
    column, a NULL aggregateid, non-ASCII text, an update (which both ignore).
    Returns the count of events."""
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
        if i % 41 == 8:
            key = None
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


def bad_input():
    """A table without a column the profile reads, or with a wrong type, is
    refused at start (exit 78, the column named); an aggregatetype that makes
    an invalid topic halts relaying (the poison rule of capture = wal), no crash."""
    sql('DROP VIEW IF EXISTS "%s_relay"' % TABLE)  # poll_takeover's, which reads aggregateid
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
        # Halted, with nothing in flight, it stops at once (the operator's
        # next step is to fix the row and restart it), not at its deadline.
        t = time.time()
        relay.terminate()
        if relay.wait(30) != 0 or time.time() - t > 5:
            return "a halted relay: exit %r %.1f s after SIGTERM (log %s)" % (
                relay.returncode, time.time() - t, bad_log)
    finally:
        if relay.poll() is None:
            relay.terminate()
            relay.wait(30)
    return None


JSON_TABLE = "dbzj_" + RUN
JSON_PLACEMENT = "tenant:envelope,version:envelope:v,type:header:eventType,part:partition"
SCHEMA_PLACEMENT = "tenant:envelope,type:header:eventType,version:envelope:v,part:partition"


def converters(schemas):
    return ["key.converter=org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable=%s" % str(schemas).lower(),
            "value.converter=org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable=%s" % str(schemas).lower()]

# Payloads whose expansion differs in kind: members left out (null, empty
# arrays), numbers of each width and doubles as Java writes them, escapes,
# objects of an array merged, and shapes the Event Router keeps as text.
JSON_PAYLOADS = [
    '{"id": 1, "lineItems": [{"id": 1, "item": "Debezium in Action", "status": "ENTERED", '
    '"quantity": 2, "totalPrice": 39.98}, {"id": 2, "item": "Debezium for Dummies", '
    '"quantity": 1, "totalPrice": 29.99, "note": null}], "orderDate": "2019-01-31T12:13:01", '
    '"customerId": 123}',
    '{"big": 5000000000, "neg": -17, "f": [0.1, 1.5e-7, 12345678.9, 150.5, -0.5], "t": true, '
    '"none": null, "empty": [], "o": {}, "deep": {"a": {"b": [[1, 2], [3]]}}}',
    r'{"s": "tab\there \"quoted\" back\\slash \u0001 caf\u00e9 \u2603 \ud83d\ude00 /"}',
    '{"items": [{"id": 1}, {"id": 2, "extra": true}], "same": [{"k": 1}, null, {"k": 2}], '
    '"tags": ["a", null, "b"]}',
    '{"f": [1e2, 0.5]}',
    '{"mixed": [1, 2.5]}',
    '{"onlynull": [null]}',
    '"just a string"',
    '42',
    None,
]


def write_rows_json(table, null_keys):
    c = psycopg2.connect(PG)
    cur = c.cursor()
    ins = ('INSERT INTO "%s" (id, aggregatetype, aggregateid, type, payload, "timestamp", '
           "tenant, version, part) VALUES (%%s, %%s, %%s, %%s, %%s::jsonb, "
           "TIMESTAMP '2026-03-01 12:00:00' + %%s * INTERVAL '1 ms', %%s, %%s, %%s)" % table)
    n = 0
    for i in range(3 * len(JSON_PAYLOADS)):
        kind = TYPES[i % len(TYPES)]
        key = None if null_keys and i % 11 == 4 else 'agg "%d"' % (i % 5)
        tenant = None if i % 4 == 1 else "t%d" % (i % 3)
        version = None if i % 6 == 2 else i
        cur.execute(ins, (str(uuid.uuid4()), kind, key, "Ev%d" % (i % 2),
                          JSON_PAYLOADS[i % len(JSON_PAYLOADS)], i, tenant, version,
                          None if i % 3 else i % PARTITIONS))
        n += 1
        if i % 2:
            c.commit()
    c.commit()
    c.close()
    return n


def json_round(schemas):
    """JsonConverter, expanded payloads and the envelope (schemas.enable =
    false), or expanded payloads with their schemas (schemas.enable = true,
    the converter's default, no envelope, a NOT NULL key): returns a failure
    or None."""
    t0 = time.time()
    tag = "s" if schemas else "j"
    dbz, rly, table = "dbz%s_%s_c" % (tag, RUN), "rly%s_%s" % (tag, RUN), JSON_TABLE + tag
    placement = SCHEMA_PLACEMENT if schemas else JSON_PLACEMENT
    sql('CREATE TABLE "%s" (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, '
        'aggregateid varchar(255)%s, type varchar(255) NOT NULL, payload jsonb, '
        '"timestamp" timestamp NOT NULL, tenant varchar(64), version int, part int)' % (
            table, " NOT NULL" if schemas else ""))
    topics_dbz = create_topics([dbz])
    topics_rly = create_topics([rly])
    connect_dir = os.path.join(WORK, "connect-" + tag)
    conv = "json_with_schema" if schemas else "json"
    args = relay_args(rly) + ["-X", "relay.table=" + table,
                              "-X", "relay.additional_placement=" + placement,
                              "-X", "relay.key_converter=" + conv,
                              "-X", "relay.value_converter=" + conv,
                              "-X", "relay.expand_json_payload=true",
                              "-X", "relay.tombstone_on_empty_payload=%s" % str(not schemas).lower(),
                              "-X", "relay.connect_topic_prefix=%s-cdc" % dbz]
    relay = None
    try:
        sets = []
        for kv in converters(schemas) + [
                "transforms.outbox.table.field.event.timestamp=timestamp",
                "transforms.outbox.table.fields.additional.placement=" + placement,
                "transforms.outbox.table.expand.json.payload=true",
                "transforms.outbox.route.tombstone.on.empty.payload=%s" % str(not schemas).lower(),
                "extended.headers.enabled=false", "poll.interval.ms=50"]:
            sets += ["--set", kv]
        subprocess.run([DEBEZIUM_SH, "start", connect_dir, "--pg", PG, "--bootstrap", KAFKA,
                        "--table", "public." + table, "--slot", dbz, "--publication", dbz,
                        "--topic-prefix", dbz] + sets, check=True)
        subprocess.run([RELAY, "migrate"] + args, check=True)
        n = write_rows_json(table, not schemas)
        relay_log = open(os.path.join(WORK, "relay-%s.log" % tag), "w")
        relay = subprocess.Popen([RELAY, "run"] + args, stdout=relay_log, stderr=relay_log)
        got_dbz, n_dbz = read_all(topics_dbz, n, False)
        got_rly, n_rly = read_all(topics_rly, n, True)
        diff = compare(got_dbz, got_rly)
        if diff:
            return "DIFFERENT: " + diff
        if n_dbz != n or n_rly != n:
            return "expected %d messages on each side, Debezium published %d, the relay %d" % (
                n, n_dbz, n_rly)
        # A payload Debezium's task fails on (a top-level array) halts the
        # relay before it, as that task stops: nothing published past it.
        sql('INSERT INTO "%s" (id, aggregatetype, aggregateid, type, payload, "timestamp") '
            "VALUES (gen_random_uuid(), 'order', 'k', 'T', '[1, 2]', now())" % table)
        deadline = time.time() + 30
        while "top-level array" not in open(relay_log.name).read():
            if relay.poll() is not None or time.time() > deadline:
                return "a top-level array: no halt (exit %r; log %s)" % (relay.poll(), relay_log.name)
            time.sleep(0.2)
        if schemas:
            # Debezium writes a column's DEFAULT into its schema: refused at start.
            sql('ALTER TABLE "%s" ALTER COLUMN payload SET DEFAULT \'{}\'' % table)
            p = subprocess.run([RELAY, "run"] + args, capture_output=True, text=True)
            if p.returncode != 78 or "DEFAULT" not in p.stderr:
                return "a payload column with a DEFAULT: exit %d, %s" % (p.returncode,
                                                                         p.stderr[-300:])
        first = [m for msgs in got_dbz.values() for m in msgs if b"lineItems" in (m.value() or b"")]
        log("%s round identical: %d messages in %.1f s; an expanded one: %s" % (
            "schema" if schemas else "json", n, time.time() - t0,
            describe(first[0]) if first else "(none)"))
        return None
    finally:
        clean_up(relay, connect_dir, (dbz, rly), table)


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
        relay.terminate()
        relay.wait(30)
        relay = None
        for name, scenario in (("takeover", takeover), ("poll takeover", poll_takeover)):
            t1 = time.time()
            bad = scenario(connect_dir, dbz)
            if bad:
                log("%s: %s (logs in %s)" % (name, bad, WORK))
                return 1
            log("%s: nothing lost, order per aggregate kept, in %.1f s" % (name, time.time() - t1))
        stop_connect(connect_dir)
        bad = bad_input()
        if bad:
            log("bad input: " + bad)
            return 1
        log("bad input refused at start (exit 78) and halted on (invalid topic)")
        for schemas in (False, True):
            bad = json_round(schemas)
            if bad:
                log("%s round: %s (logs in %s)" % ("schema" if schemas else "json", bad, WORK))
                return 1
        first = got_dbz[sorted(got_dbz)[0]][0]
        log("identical: %d messages over %d partitions (%d without a key), in %.1f s; "
            "the first: %s" % (n, len([w for w in got_dbz if w[1] >= 0]),
                               sum(len(v) for w, v in got_dbz.items() if w[1] < 0),
                               time.time() - t0, describe(first)))
        return 0
    finally:
        clean_up(relay, connect_dir, (dbz, rly), TABLE)


if __name__ == "__main__":
    sys.exit(main())
