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

Then the takeover of docs/migrating-from-debezium.md on that connector's slot
and publication (takeover()): writers write while the connector stops, the
relay starts on its slot (the same topics), the relay confirms a fence, and
the rollback brings the connector back; every event must be on Kafka, the
first deliveries of each aggregate in sequence order, and every duplicate one
copy on each side of a switch.

Environment: OUTBOX_RELAY_BIN, OUTBOX_RELAY_TEST_PG and a real broker in
OUTBOX_RELAY_TEST_REAL_KAFKA (tests/run's kafka lane). PostgreSQL must run
with wal_level = logical.
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
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
    # extra column placed in a header; aggregateid without its NOT NULL, as
    # some applications' tables have it (a NULL is then a message without a key).
    sql('CREATE TABLE "%s" (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, '
        'aggregateid varchar(255), type varchar(255) NOT NULL, payload jsonb, '
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


def read_all(topics, expected, read_committed):
    """Every message of @topics, per (topic suffix, partition), in offset order;
    those without a key per (topic suffix, None), in the order of their id
    header: a producer puts them on any partition (Java's sticky partitioner,
    librdkafka's random one), so only what they carry can be the same."""
    # earliest: a fetch from a topic just created can be answered "offset out
    # of range", and the default reset (latest) would then skip every message.
    c = Consumer({"bootstrap.servers": KAFKA, "group.id": "compat-" + uuid.uuid4().hex,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
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
        got.setdefault((suffix, m.partition() if m.key() is not None else -1), []).append(m)
        count += 1
    c.close()
    for where, msgs in got.items():
        if where[1] == -1:
            msgs.sort(key=lambda m: dict(m.headers() or []).get("id", b""))
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
                part = "partition %d" % where[1] if where[1] >= 0 else "(no key)"
                return "message %d of %s %s differs:\n  debezium: %s\n  relay:    %s" % (
                    i, where[0], part, describe(x), describe(y))
    return None


def stop_connect(d):
    subprocess.run([DEBEZIUM_SH, "stop", d], check=False)


def clean_up(relay, connect_dir, slots, table):
    """What a round leaves: the relay, Connect, both slots and the table."""
    if relay:
        relay.terminate()
        relay.wait(30)
    stop_connect(connect_dir)
    for slot in slots:
        drop_slot(slot)
    sql('DROP TABLE IF EXISTS "%s" CASCADE' % table)


def drop_slot(name):
    for _ in range(100):
        if not sql("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active", name):
            break
        time.sleep(0.1)
    sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
        "WHERE slot_name = %s AND NOT active", name)
    sql('DROP PUBLICATION IF EXISTS "%s"' % name)


# ---- takeover: the connector stops, the relay continues on its slot ------

TK_TYPES = ["tk_order", "tk_customer"]
TK_WRITERS = 4
TK_AGGREGATES = 4  # per writer


def lsn_int(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


class Writer:
    """One application process: its own aggregates, each with a sequence
    number in the payload; one to three events per transaction, and one
    transaction in four deletes its rows before it commits (the pattern
    Debezium's documentation recommends). Every committed event is kept with
    the WAL insert position read right after its commit: its commit record
    ends at or before it."""

    def __init__(self, w, keep_rows=False):
        self.w = w
        self.keep_rows = keep_rows
        self.aggs = ["tk-w%d-%d" % (w, k) for k in range(TK_AGGREGATES)]
        self.seq = {a: 0 for a in self.aggs}
        self.events = []  # (id, aggregate, seq, commit time, lsn after commit)
        self.error = None
        self.rnd = random.Random(RUN + str(w))

    def txn(self, c, n=None, delete=None):
        """One transaction of @n events (random when None)."""
        cur = c.cursor()
        ins = ('INSERT INTO "%s" (id, aggregatetype, aggregateid, type, payload, "timestamp", '
               "tenant) VALUES (%%s, %%s, %%s, 'TkEvent', %%s::jsonb, "
               "clock_timestamp()::timestamp, %%s)" % TABLE)
        pending = []
        for _ in range(n or self.rnd.randint(1, 3)):
            k = self.rnd.randrange(TK_AGGREGATES)
            agg = self.aggs[k]
            self.seq[agg] += 1
            rid = str(uuid.uuid4())
            cur.execute(ins, (rid, TK_TYPES[k % 2], agg,
                              json.dumps({"writer": self.w, "seq": self.seq[agg]}), "w%d" % self.w))
            pending.append((rid, agg, self.seq[agg]))
        if delete if delete is not None else not self.keep_rows and self.rnd.randrange(4) == 0:
            cur.execute('DELETE FROM "%s" WHERE id = ANY(%%s::uuid[])' % TABLE,
                        ([p[0] for p in pending],))
        c.commit()
        cur.execute("SELECT pg_current_wal_insert_lsn()::text")
        after = lsn_int(cur.fetchone()[0])
        c.commit()
        now = time.time()
        self.events.extend((rid, agg, sq, now, after) for rid, agg, sq in pending)

    def loop(self, stop):
        try:
            c = psycopg2.connect(PG)
            while not stop.is_set():
                self.txn(c)
                time.sleep(self.rnd.uniform(0.005, 0.02))
            c.close()
        except Exception as e:  # reported by the scenario
            self.error = repr(e)


class Writers:
    def __init__(self, keep_rows=False):
        self.all = [Writer(w, keep_rows) for w in range(TK_WRITERS)]
        self.stop_ev = None
        self.threads = []

    def start(self):
        self.stop_ev = threading.Event()
        self.threads = [threading.Thread(target=w.loop, args=(self.stop_ev,)) for w in self.all]
        for t in self.threads:
            t.start()

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join()
        errors = [w.error for w in self.all if w.error]
        if errors:
            raise RuntimeError("a writer failed: " + errors[0])

    def events(self):
        return [e for w in self.all for e in w.events]


def connect_rest(connect_dir, method, path):
    port = open(os.path.join(connect_dir, "rest_port")).read().strip()
    req = urllib.request.Request("http://127.0.0.1:%s/connectors/outbox-debezium%s" % (port, path),
                                 method=method)
    with urllib.request.urlopen(req, timeout=30) as resp:
        body = resp.read()
        return json.loads(body) if body else None


def slot_status(name):
    """`outbox-relay slot status --json` for the slot @name, as the doc runs it."""
    p = subprocess.run([RELAY, "slot", "status", "--json"] + relay_args(name),
                       capture_output=True, text=True)
    return json.loads(p.stdout)


def wait_until(what, cond, timeout):
    deadline = time.time() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.time() > deadline:
            raise RuntimeError("timed out waiting for " + what)
        time.sleep(0.1)


def watermarks(topics):
    c = Consumer({"bootstrap.servers": KAFKA, "group.id": "tk-" + uuid.uuid4().hex})
    marks = {}
    for t in topics:
        for p in range(PARTITIONS):
            for attempt in range(50):  # a topic just created has no leader for a moment
                try:
                    marks[(t, p)] = c.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
                    break
                except Exception:
                    if attempt == 49:
                        raise
                    time.sleep(0.2)
    c.close()
    return marks


def settled_watermarks(topics):
    """The topics' end offsets once no writer of Kafka adds to them (1 s unchanged)."""
    last, same_since = None, time.time()
    while True:
        m = watermarks(topics)
        if m != last:
            last, same_since = m, time.time()
        elif time.time() - same_since >= 1.0:
            return m
        time.sleep(0.2)


def fence(slot, marker_row):
    """pg_logical_emit_message(true, 'fence', ''), then the slot confirmed past it."""
    at = lsn_int(sql("SELECT pg_logical_emit_message(true, 'fence', '')::text")[0][0])
    if marker_row:
        marker_row()
    t = time.time()
    wait_until("the slot confirmed past the fence",
               lambda: lsn_int(slot_status(slot)["confirmed_flush_lsn"]) > at, 60)
    return time.time() - t


def read_since(topics, marks, ids, timeout=60):
    """Every message of @topics (read_committed) from @marks on, in offset order
    per partition, until every id of @ids came and 2 s passed without more."""
    c = Consumer({"bootstrap.servers": KAFKA, "group.id": "tk-" + uuid.uuid4().hex,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed"})
    c.assign([TopicPartition(t, p, marks.get((t, p), 0)) for t in topics for p in range(PARTITIONS)])
    got, seen = [], set()
    deadline, quiet_until = time.time() + timeout, None
    while time.time() < deadline:
        m = c.poll(0.2)
        if m is None:
            if ids <= seen and quiet_until is None:
                quiet_until = time.time() + 2
            if quiet_until and time.time() > quiet_until:
                break
            continue
        if m.error():
            continue
        h = dict(m.headers() or [])
        rid = (h.get("id") or b"").decode()
        got.append((m.topic(), m.partition(), m.offset(), m.key().decode(), rid))
        seen.add(rid)
    c.close()
    return got


def takeover(connect_dir, dbz):
    """docs/migrating-from-debezium.md, "Taking over" and "Rolling back", with
    writers writing throughout: returns a failure, or None."""
    t0 = time.time()
    topics = ["%s.%s" % (dbz, t) for t in TK_TYPES]
    admin = AdminClient({"bootstrap.servers": KAFKA})
    for _, fut in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in topics]).items():
        fut.result(30)
    start_marks = watermarks(topics)
    writers = Writers()
    relay = None
    relay_log = open(os.path.join(WORK, "relay-takeover.log"), "w")
    try:
        writers.start()
        time.sleep(2)  # Debezium publishes
        # Step 2: stop the connector and wait until the slot has no reader.
        t_stop = time.time()
        connect_rest(connect_dir, "PUT", "/stop")
        wait_until("the slot inactive", lambda: not slot_status(dbz)["active"], 60)
        mark1 = settled_watermarks(topics)
        x1 = lsn_int(slot_status(dbz)["confirmed_flush_lsn"])
        log("takeover: connector stopped in %.1f s; the slot confirmed %X/%X" % (
            time.time() - t_stop, x1 >> 32, x1 & 0xffffffff))
        # Step 3: the relay on the connector's slot and publication.
        relay = subprocess.Popen([RELAY, "run"] + relay_args(dbz), stdout=relay_log,
                                 stderr=relay_log)
        t_switch = time.time()
        time.sleep(3)
        writers.stop()
        waited = fence(dbz, None)
        log("takeover: the relay confirmed the fence %.1f s after the writers stopped" % waited)
        # Rolling back: writers again, the relay stops, the connector resumes.
        writers.start()
        time.sleep(1)
        t_back = time.time()
        relay.terminate()
        if relay.wait(30) != 0:
            return "the relay exited %d on SIGTERM (log %s)" % (relay.returncode, relay_log.name)
        relay = None
        wait_until("the slot inactive", lambda: not slot_status(dbz)["active"], 30)
        mark2 = settled_watermarks(topics)
        x2 = lsn_int(slot_status(dbz)["confirmed_flush_lsn"])
        # The connector's own offset is where it stopped; the relay moved the
        # slot on, and once the slot's restart_lsn passes that offset the task
        # fails at start ("no longer available on the server"). Without an
        # offset (snapshot.mode = no_data) it starts from the slot's position.
        connect_rest(connect_dir, "DELETE", "/offsets")
        connect_rest(connect_dir, "PUT", "/resume")
        wait_until("the connector's task running", lambda: any(
            t.get("state") == "RUNNING"
            for t in connect_rest(connect_dir, "GET", "/status").get("tasks", [])), 60)
        time.sleep(2)
        writers.stop()
        # Debezium confirms a position only when it publishes an event (its
        # "LSN flush mode 'connector'", no heartbeat here): one more event
        # after the fence lets it confirm past it.
        def marker():
            with psycopg2.connect(PG) as c:
                writers.all[0].txn(c, 1, True)
        try:
            waited = fence(dbz, marker)
        except RuntimeError as e:
            tasks = connect_rest(connect_dir, "GET", "/status").get("tasks", [])
            return "rollback: %s; the connector's task: %s" % (
                e, (tasks[0].get("state"), (tasks[0].get("trace") or "")[:300]) if tasks else None)
        log("rollback: the connector confirmed the fence %.1f s after the writers stopped" % waited)
    finally:
        if relay:
            relay.terminate()
            relay.wait(30)
        if writers.stop_ev and not writers.stop_ev.is_set():
            writers.stop_ev.set()
            for t in writers.threads:
                t.join()
        relay_log.close()
    events = writers.events()
    by_id = {e[0]: e for e in events}
    got = read_since(topics, start_marks, set(by_id))

    def segment(topic, part, off):
        return 0 if off < mark1[(topic, part)] else 1 if off < mark2[(topic, part)] else 2

    copies, unknown, key_part = {}, [], {}
    last_seq, order_breaks = {}, []
    for topic, part, off, key, rid in sorted(got):
        if rid not in by_id:
            unknown.append((topic, part, off, key, rid))
            continue
        key_part.setdefault(key, set()).add((topic, part))
        first = rid not in copies
        copies.setdefault(rid, []).append((segment(topic, part, off), topic, part, off))
        if first:
            seq = by_id[rid][2]
            if seq <= last_seq.get(key, 0):
                order_breaks.append("%s seq %d after seq %d (%s[%d]@%d)" % (
                    key, seq, last_seq[key], topic, part, off))
            last_seq[key] = max(seq, last_seq.get(key, 0))
    lost = [e for e in events if e[0] not in copies]
    dups = {rid: c for rid, c in copies.items() if len(c) > 1}
    per_switch = {1: 0, 2: 0}
    bad_dups = []
    for rid, c in sorted(dups.items(), key=lambda kv: by_id[kv[0]][3]):
        segs = [s for s, _, _, _ in c]
        e = by_id[rid]
        where = "%s seq %d (committed %+.2f s from the switch), copies in %s" % (
            e[1], e[2], e[3] - (t_switch if min(segs) == 0 else t_back),
            ", ".join("%s[%d]@%d" % (t, p, o) for _, t, p, o in c))
        if len(c) != 2 or segs[1] != segs[0] + 1:
            bad_dups.append("not once on each side of one switch: " + where)
            continue
        per_switch[segs[1]] += 1
        # PostgreSQL sends again only what committed at or after the slot's
        # confirmed position.
        if e[4] <= (x1 if segs[1] == 1 else x2):
            bad_dups.append("committed before the slot's confirmed position: " + where)
        log("duplicate: " + where)
    split = [k for k, v in key_part.items() if len(v) > 1]
    log("takeover: %d events by %d writers on %d aggregates (%d before the switch, %d after the "
        "relay started, %d after the rollback); %d messages; duplicates: %d at the takeover, %d at "
        "the rollback; %.1f s" % (
            len(events), TK_WRITERS, TK_WRITERS * TK_AGGREGATES,
            sum(1 for e in events if e[3] < t_stop), sum(1 for e in events if t_switch <= e[3] < t_back),
            sum(1 for e in events if e[3] >= t_back), len(got), per_switch[1], per_switch[2],
            time.time() - t0))
    problems = []
    if lost:
        problems.append("%d events never reached Kafka, the first: %s seq %d id %s (committed "
                        "%+.2f s from the switch)" % (len(lost), lost[0][1], lost[0][2], lost[0][0],
                                                      lost[0][3] - t_switch))
    if unknown:
        problems.append("%d messages of no written event, the first: %r" % (len(unknown), unknown[0]))
    if order_breaks:
        problems.append("%d first deliveries out of order, the first: %s" % (
            len(order_breaks), order_breaks[0]))
    if split:
        problems.append("aggregate %s on several partitions: %s" % (split[0], key_part[split[0]]))
    if bad_dups:
        problems.append("%d duplicates not explained by a switch, the first: %s" % (
            len(bad_dups), bad_dups[0]))
    return "; ".join(problems) or None


# ---- taking over by polling: the application keeps its rows ----------------

def special_rows():
    """Rows of every shape the claim reads apart, inserted while both sides
    publish: a NULL payload, a NULL aggregateid, a NULL placed column,
    non-ASCII text. Returns their ids."""
    ids = []
    with psycopg2.connect(PG) as c, c.cursor() as cur:
        for i, (key, payload, tenant) in enumerate([
                ("sp-1", None, "t1"), (None, '{"k": "caf\u00e9 \u2603"}', "t2"),
                ("sp-2", '{"n": [1, 2.5, null]}', None), ("sp-1", '{"last": true}', "t1")]):
            rid = str(uuid.uuid4())
            cur.execute('INSERT INTO "%s" (id, aggregatetype, aggregateid, type, payload, '
                        '"timestamp", tenant) VALUES (%%s, %%s, %%s, \'Special\', %%s::jsonb, '
                        "clock_timestamp()::timestamp, %%s)" % TABLE,
                        (rid, TK_TYPES[i % 2], key, payload, tenant))
            ids.append(rid)
    return ids


def read_messages(topics, marks, ids, timeout=60):
    """Every message of @topics (read_committed) from @marks on, until every
    id of @ids came and 2 s passed without more."""
    c = Consumer({"bootstrap.servers": KAFKA, "group.id": "pt-" + uuid.uuid4().hex,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed"})
    c.assign([TopicPartition(t, p, marks.get((t, p), 0)) for t in topics for p in range(PARTITIONS)])
    got, seen = [], set()
    deadline, quiet_until = time.time() + timeout, None
    while time.time() < deadline:
        m = c.poll(0.2)
        if m is None:
            if ids <= seen and quiet_until is None:
                quiet_until = time.time() + 2
            if quiet_until and time.time() > quiet_until:
                break
            continue
        if m.error():
            continue
        got.append(m)
        seen.add((dict(m.headers() or []).get("id") or b"").decode())
    c.close()
    return got


def poll_switch(connect_dir, dbz, args, writers, relay_log):
    """docs/migrating-from-debezium.md, "Taking over by polling", steps 2 to
    4: returns (migrate's position, special row ids, switch and stop times),
    or a failure string."""
    p = subprocess.run([RELAY, "migrate"] + args, capture_output=True, text=True)
    found = re.search(r"position=([0-9A-F]+/[0-9A-F]+)", p.stderr + p.stdout)
    if p.returncode != 0 or not found:
        return "migrate: exit %d, %s" % (p.returncode, (p.stderr + p.stdout)[-300:])
    boundary = lsn_int(found.group(1))
    wait_until("the connector's slot confirmed past migrate's position",
               lambda: lsn_int(slot_status(dbz)["confirmed_flush_lsn"]) >= boundary, 60)
    specials = special_rows()
    relay = subprocess.Popen([RELAY, "run"] + args, stdout=relay_log, stderr=relay_log)
    t_switch = time.time()
    time.sleep(1.5)
    connect_rest(connect_dir, "PUT", "/stop")
    wait_until("the slot inactive", lambda: not slot_status(dbz)["active"], 60)
    t_stop = time.time()
    time.sleep(2)
    writers.stop()
    wait_until("every row marked sent", lambda: sql(
        'SELECT count(*) FROM "%s" WHERE relay_sent_at IS NULL' % TABLE)[0][0] == 0, 60)
    relay.terminate()
    if relay.wait(30) != 0:
        return "the relay exited %d on SIGTERM (log %s)" % (relay.returncode, relay_log.name)
    return boundary, specials, t_switch, t_stop


def same_message(a, b):
    """Two copies of one event, one per producer: every byte the same, and the
    partition unless there is no key (each producer picks one of its own)."""
    return a.key() == b.key() and a.value() == b.value() and \
        (a.headers() or []) == (b.headers() or []) and a.timestamp() == b.timestamp() and \
        (a.key() is None or (a.topic(), a.partition()) == (b.topic(), b.partition()))


def poll_check(got, events, specials, t_stop):
    """What a consumer checks after the switch: returns a failure or None."""
    by_id = {e[0]: e for e in events}
    copies, unknown, last_seq, order_breaks, key_part = {}, [], {}, [], {}
    for m in sorted(got, key=lambda m: (m.topic(), m.partition(), m.offset())):
        rid = (dict(m.headers() or []).get("id") or b"").decode()
        if rid not in by_id and rid not in specials:
            unknown.append(describe(m))
            continue
        first = rid not in copies
        copies.setdefault(rid, []).append(m)
        if rid in by_id:
            key = m.key().decode()
            key_part.setdefault(key, set()).add((m.topic(), m.partition()))
            seq = by_id[rid][2]
            if first and seq <= last_seq.get(key, 0):
                order_breaks.append("%s seq %d after seq %d" % (key, seq, last_seq[key]))
            last_seq[key] = max(seq, last_seq.get(key, 0))
    relayed = {r[0] for r in sql('SELECT id::text FROM "%s" WHERE relay_seq IS NOT NULL' % TABLE)}
    lost = [rid for rid in list(by_id) + specials if rid not in copies]
    dups = {rid: c for rid, c in copies.items() if len(c) > 1}
    bad = [rid for rid, c in dups.items() if len(c) != 2 or rid not in relayed or
           (rid in by_id and by_id[rid][3] > t_stop)]
    differ = [(c[0], c[1]) for c in dups.values() if len(c) == 2 and not same_message(c[0], c[1])]
    problems = []
    if lost:
        problems.append("%d events never reached Kafka, the first: %s" % (len(lost), lost[0]))
    if unknown:
        problems.append("%d messages of no written event, the first: %s" % (len(unknown), unknown[0]))
    if order_breaks:
        problems.append("%d first deliveries out of order, the first: %s" % (
            len(order_breaks), order_breaks[0]))
    split = [k for k, v in key_part.items() if len(v) > 1]
    if split:
        problems.append("aggregate %s on several partitions: %s" % (split[0], key_part[split[0]]))
    if bad:
        problems.append("%d duplicates not of a row the relay owns and the connector published "
                        "before it stopped, the first: %s" % (len(bad), bad[0]))
    if differ:
        problems.append("%d events published differently by the two, the first:\n  %s\n  %s" % (
            len(differ), describe(differ[0][0]), describe(differ[0][1])))
    if not any(rid in dups for rid in specials):
        problems.append("no special row published by both: the identity went unchecked")
    return "; ".join(problems) or None, len(dups), sum(1 for rid in copies if rid in relayed)


def poll_takeover(connect_dir, dbz):
    """docs/migrating-from-debezium.md, "Taking over by polling", with writers
    that keep their rows writing throughout: returns a failure, or None."""
    t0 = time.time()
    topics = ["%s.%s" % (dbz, t) for t in TK_TYPES]
    start_marks = settled_watermarks(topics)
    writers = Writers(keep_rows=True)
    args = relay_args(dbz) + ["-X", "relay.capture=poll"]
    relay_log = open(os.path.join(WORK, "relay-poll.log"), "w")
    try:
        writers.start()
        time.sleep(2)  # Debezium publishes
        switched = poll_switch(connect_dir, dbz, args, writers, relay_log)
    finally:
        if writers.stop_ev and not writers.stop_ev.is_set():
            writers.stop_ev.set()
            for t in writers.threads:
                t.join()
        relay_log.close()
    if isinstance(switched, str):
        return switched
    boundary, specials, t_switch, t_stop = switched
    events = writers.events()
    got = read_messages(topics, start_marks, {e[0] for e in events} | set(specials))
    bad, n_dups, n_relayed = poll_check(got, events, specials, t_stop)
    # The marks: the rows made before migrate count as sent, each later one
    # is marked by the relay.
    before, unmarked = sql('SELECT count(*) FILTER (WHERE relay_seq IS NULL AND '
                           "relay_sent_at = '-infinity'), count(*) FILTER (WHERE relay_seq IS NOT "
                           "NULL AND (relay_sent_at IS NULL OR relay_sent_at = '-infinity')) "
                           'FROM "%s"' % TABLE)[0]
    if not bad and (before == 0 or unmarked):
        bad = "marks: %d rows of before migrate count as sent, %d later rows unmarked" % (
            before, unmarked)
    # Step 5: verify over the relay's rows: each on Kafka as the relay writes it.
    p = subprocess.run([RELAY, "verify", "--json"] + args, capture_output=True, text=True)
    report = json.loads(p.stdout) if p.stdout.startswith("{") else {}
    total = report.get("total", {})
    if not bad and (p.returncode != 0 or not total.get("sent")):
        bad = "verify: exit %d, %s %s" % (p.returncode, p.stdout[-600:], p.stderr[-300:])
    log("poll takeover: verify: %s" % json.dumps(total))
    log("poll takeover: %d events by %d writers (%d before the connector stopped), %d rows the "
        "relay owned, %d messages, %d duplicates (each identical on both sides); migrate at "
        "%X/%X; %.1f s" % (len(events) + len(specials), TK_WRITERS,
                           sum(1 for e in events if e[3] < t_stop), n_relayed, len(got), n_dups,
                           boundary >> 32, boundary & 0xffffffff, time.time() - t0))
    return bad


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
    finally:
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
        t1 = time.time()
        bad = takeover(connect_dir, dbz)
        if bad:
            log("takeover: " + bad + " (logs in %s)" % WORK)
            return 1
        log("takeover: nothing lost, order per aggregate kept, in %.1f s" % (time.time() - t1))
        t1 = time.time()
        bad = poll_takeover(connect_dir, dbz)
        if bad:
            log("poll takeover: " + bad + " (logs in %s)" % WORK)
            return 1
        log("poll takeover: nothing lost, order per aggregate kept, in %.1f s" % (time.time() - t1))
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
