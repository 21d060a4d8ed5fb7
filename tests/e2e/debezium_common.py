"""debezium_common.py - what the Debezium tests share (debezium_compat.py,
debezium_takeover.py): the run's names, PostgreSQL, the relay's arguments,
reading and comparing topics, Connect's REST API, the slot's status."""
import json
import os
import subprocess
import sys
import tempfile
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


def _canon(v, loose, key=None):
    """@p v (objects as ("obj", pairs)) with the member order of objects in
    arrays, and the field order of an array's element schema ("items"),
    made canonical; everything else keeps its order."""
    if isinstance(v, tuple):
        pairs = [(k, _canon(x, loose or k == "items", k)) for k, x in v[1]]
        return ("obj", sorted(pairs, key=repr) if loose else pairs)
    if isinstance(v, list):
        elems = [_canon(e, True) for e in v]
        return sorted(elems, key=repr) if loose and key == "fields" else elems
    return v


def same_but_merged_order(a, b):
    """True if JSON values @p a and @p b differ at most in the member order of
    objects in arrays. The Event Router merges the schemas of an array's
    objects in a HashSet's order, and a Connect schema's hash includes an
    enum's identity hash: when an array's objects have different members,
    the merged order changes from one Connect process to the next, so no
    byte-exact copy of it exists."""
    try:
        hook = lambda pairs: ("obj", pairs)
        x, y = json.loads(a, object_pairs_hook=hook), json.loads(b, object_pairs_hook=hook)
    except (TypeError, ValueError):
        return False
    return _canon(x, False) == _canon(y, False)


def compare(dbz, rly):
    """The first difference, or None."""
    for where in sorted(set(dbz) | set(rly)):
        a, b = dbz.get(where, []), rly.get(where, [])
        for i in range(max(len(a), len(b))):
            x = a[i] if i < len(a) else None
            y = b[i] if i < len(b) else None
            same = x is not None and y is not None and x.key() == y.key() and \
                (x.value() == y.value() or same_but_merged_order(x.value(), y.value())) and \
                (x.headers() or []) == (y.headers() or []) and x.timestamp() == y.timestamp()
            if not same:
                part = "partition %d" % where[1] if where[1] >= 0 else "(no key)"
                return "message %d of %s %s differs:\n  debezium: %s\n  relay:    %s" % (
                    i, where[0], part, describe(x), describe(y))
    return None


def stop_connect(d):
    """Once a round has read what it needs: nothing waits for Connect's
    graceful stop (its offsets), so it gets one second."""
    subprocess.run([DEBEZIUM_SH, "stop", d, "1"], check=False)


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


def lsn_int(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


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
