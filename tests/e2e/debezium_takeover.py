"""debezium_takeover.py - the takeovers of docs/migrating-from-debezium.md
on a running connector, with writers writing throughout: the relay on the
connector's slot and the rollback (takeover()), and the relay polling the
table after `outbox-relay migrate` (poll_takeover()). Each returns a failure,
or None."""
import json
import os
import random
import re
import subprocess
import threading
import time
import uuid

import psycopg2
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from debezium_common import (KAFKA, PARTITIONS, PG, RELAY, RUN, TABLE, WORK, connect_rest,
                             describe, log, lsn_int, relay_args, slot_status, sql, wait_until)

TK_TYPES = ["tk_order", "tk_customer"]
TK_WRITERS = 4
TK_AGGREGATES = 4  # per writer


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


def read_messages(topics, marks, ids, timeout=60):
    """Every message of @topics (read_committed) from @marks on, until every
    id of @ids came and 2 s passed without more."""
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
        got.append(m)
        seen.add((dict(m.headers() or []).get("id") or b"").decode())
    c.close()
    return got


def read_since(topics, marks, ids, timeout=60):
    """read_messages() as (topic, partition, offset, key, id header) tuples."""
    return [(m.topic(), m.partition(), m.offset(), m.key().decode(),
             (dict(m.headers() or []).get("id") or b"").decode())
            for m in read_messages(topics, marks, ids, timeout)]


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


def poll_switch(connect_dir, dbz, args, writers, relay_log):
    """docs/migrating-from-debezium.md, "Taking over by polling", steps 2 to
    4: returns (migrate's position, special row ids, switch and stop times),
    or a failure string."""
    p = subprocess.run([RELAY, "migrate"] + args, capture_output=True, text=True)
    found = re.search(r"position=([0-9A-F]+/[0-9A-F]+)", p.stderr + p.stdout)
    if p.returncode != 0 or not found:
        return "migrate: exit %d, %s" % (p.returncode, (p.stderr + p.stdout)[-300:])
    boundary = lsn_int(found.group(1))
    specials = special_rows()
    # An aggregatetype that makes no valid topic: its row is dead-lettered
    # (relay.on_poison = dead_letter), nothing else held.
    sql('INSERT INTO "%s" (id, aggregatetype, aggregateid, type, payload, "timestamp") VALUES '
        "(gen_random_uuid(), 'no topic!', 'bad-1', 'T', '{}', clock_timestamp()::timestamp)" % TABLE)
    relay = subprocess.Popen([RELAY, "run"] + args, stdout=relay_log, stderr=relay_log)
    try:
        return poll_switched(connect_dir, dbz, args, writers, relay, relay_log, boundary, specials)
    finally:
        if relay.poll() is None:
            relay.terminate()
            relay.wait(30)


def poll_switched(connect_dir, dbz, args, writers, relay, relay_log, boundary, specials):
    """poll_switch() once the relay runs: it claims nothing until the
    connector's slot has confirmed past migrate's position; then the
    connector stops."""
    wait_until("the connector's slot confirmed past migrate's position",
               lambda: lsn_int(slot_status(dbz)["confirmed_flush_lsn"]) >= boundary, 60)
    t_switch = time.time()
    time.sleep(1.5)
    connect_rest(connect_dir, "PUT", "/stop")
    wait_until("the slot inactive", lambda: not slot_status(dbz)["active"], 60)
    t_stop = time.time()
    time.sleep(2)
    writers.stop()
    wait_until("every row marked sent or dead", lambda: sql(
        'SELECT count(*) FROM "%s" WHERE relay_sent_at IS NULL AND relay_dead_at IS NULL'
        % TABLE)[0][0] == 0, 60)
    dead = json.loads(subprocess.run([RELAY, "dead", "list", "--json"] + args,
                                     capture_output=True, text=True).stdout or "[]")
    rows = dead.get("rows", dead) if isinstance(dead, dict) else dead
    if [r.get("aggregate_id") for r in rows] != ["bad-1"] or \
            "invalid topic" not in (rows[0].get("last_error") or ""):
        return "dead list: expected the row of an invalid topic alone, got %r" % (rows,)
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
    args = relay_args(dbz) + ["-X", "relay.capture=poll", "-X", "relay.on_poison=dead_letter"]
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
    # is marked by the relay (but the dead one).
    before, unmarked = sql('SELECT count(*) FILTER (WHERE relay_seq IS NULL AND '
                           "relay_sent_at = '-infinity'), count(*) FILTER (WHERE relay_seq IS NOT "
                           "NULL AND relay_dead_at IS NULL AND (relay_sent_at IS NULL OR relay_sent_at = "
                           "'-infinity')) "
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
