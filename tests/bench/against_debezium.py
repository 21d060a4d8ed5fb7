#!/usr/bin/python3
"""against_debezium.py - outbox-relay and Debezium's Outbox Event Router side by side.

Both read the same kind of table (outbox-relay's, migrated by the relay) in
one PostgreSQL with wal_level = logical and publish to the same Kafka broker;
both are timed the same way, by one read_committed consumer of the topic.

  drain      N single-row transactions written while the system is stopped
             (for Debezium: after its slot exists), then the system started:
             rows/s from the start to the last message, and from the first
             message to the last; the process's CPU per 100k events and peak RSS.
  latency    single-row transactions at RATE/s for S seconds while the system
             runs: commit -> received by the consumer, p50 / p99 / max.

Systems: the relay with its defaults; Debezium with its defaults; Debezium
tuned for latency (poll.interval.ms=10, the producer's linger.ms=0). Drains
are repeated --rounds times, the systems' order rotated each round. The
latency is also measured for the relay with relay.fencing = none: like
Debezium's, its producer then commits no Kafka transactions (and fences no
deposed leader), so that both pay for the same guarantee.

    against_debezium.py --relay BIN [--rows N] [--rate R] [--seconds S] [--rounds K]

The stack's environment (tests/support/stack.sh: OUTBOX_RELAY_TEST_PG, and a
real broker in OUTBOX_RELAY_TEST_KAFKA) must be set; tests/bench/run
--against debezium does that. Prints a JSON report on stdout, a table on stderr.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import psycopg2
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

HERE = os.path.dirname(os.path.abspath(__file__))
DEBEZIUM_SH = os.path.join(HERE, "..", "support", "debezium.sh")
PG = os.environ["OUTBOX_RELAY_TEST_PG"]
KAFKA = os.environ["OUTBOX_RELAY_TEST_KAFKA"]
WORK = tempfile.mkdtemp(prefix="outbox-relay-vs-debezium.")
# Every run names its tables, and so its topics, anew: a topic left by an
# earlier run would hand the consumer its old messages.
RUN = uuid.uuid4().hex[:6]
TUNED = ["poll.interval.ms=10", "producer.override.linger.ms=0",
         "worker.connector.client.config.override.policy=All"]


def log(msg):
    print("against_debezium: " + msg, file=sys.stderr, flush=True)


def sql(query, *args):
    with psycopg2.connect(PG) as c, c.cursor() as cur:
        cur.execute(query, args)
        return cur.fetchall() if cur.description else None


def fresh_table(relay, table):
    sql('DROP TABLE IF EXISTS "public"."%s" CASCADE' % table)
    subprocess.run([relay, "migrate", "-X", "postgres.conninfo=" + PG, "-X", "relay.table=" + table],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    topic = table + ".order"
    admin = AdminClient({"bootstrap.servers": KAFKA})
    fut = admin.create_topics([NewTopic(topic, 4, 1)])[topic]
    try:
        fut.result(30)
    except Exception as e:  # an existing topic is a left-over of an earlier run
        if "TOPIC_ALREADY_EXISTS" not in str(e):
            raise
    return topic


def write_rows(table, n):
    """n single-row transactions, one COMMIT each, inside PostgreSQL."""
    c = psycopg2.connect(PG)
    c.autocommit = True
    try:
        c.cursor().execute(
            'DO $$ BEGIN FOR i IN 1..%d LOOP PERFORM "public"."%s_enqueue"(\'order\', '
            "'o' || (i %% 5000), 'OrderPlaced', jsonb_build_object('seq', i, 'pad', "
            "repeat('x', 200))); COMMIT; END LOOP; END $$" % (n, table))
    finally:
        c.close()


class Reader:
    """A read_committed consumer of every partition of a topic from its start."""

    def __init__(self, topic):
        self.c = Consumer({"bootstrap.servers": KAFKA, "group.id": "bench-" + uuid.uuid4().hex,
                           "isolation.level": "read_committed", "enable.auto.commit": False,
                           "fetch.wait.max.ms": 5})
        md = self.c.list_topics(topic, timeout=30).topics[topic]
        self.c.assign([TopicPartition(topic, p, 0) for p in md.partitions])
        self.received = {}
        self.first = self.last = None
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            m = self.c.poll(0.05)
            if m is None or m.error():
                continue
            t = time.time()
            seq = json.loads(m.value())["seq"]
            if seq not in self.received:
                self.received[seq] = t
                self.first = self.first or t
                self.last = t

    def close(self):
        self.stop = True
        self.thread.join()
        self.c.close()


def proc_cost(pid):
    """(CPU seconds, peak RSS in MB) of a running process."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open("/proc/%d/status" % pid) as f:
        hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
    return cpu, hwm / 1024.0


class System:
    def __init__(self, name, relay, tuned=False, opts=()):
        self.name, self.relay, self.tuned, self.opts = name, relay, tuned, list(opts)
        self.proc = self.dir = None

    def prepare(self, table):
        """Debezium only publishes what is written once its slot exists."""
        if self.relay is None:
            self.start(table)
            self.stop()

    def start(self, table):
        if self.relay is not None:
            self.proc = subprocess.Popen(
                [self.relay, "run", "-X", "postgres.conninfo=" + PG, "-X",
                 "kafka.bootstrap.servers=" + KAFKA, "-X", "relay.table=" + table, "-X",
                 "relay.topic=%s.${aggregate_type}" % table, "-X", "http.listen="] + self.opts,
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(WORK, table + ".log"), "a"))
            return self.proc.pid
        self.dir = os.path.join(WORK, "connect-" + table)
        cmd = [DEBEZIUM_SH, "start", self.dir, "--pg", PG, "--bootstrap", KAFKA, "--table",
               "public." + table, "--slot", "s_" + table, "--publication", "p_" + table,
               "--topic-prefix", table, "--relay-columns"]
        for s in TUNED if self.tuned else []:
            cmd += ["--set", s]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(WORK, table + ".log"), "a"))
        pidfile = os.path.join(self.dir, "pid")
        for _ in range(1000):
            text = open(pidfile).read().strip() if os.path.exists(pidfile) else ""
            if text:
                return int(text)
            time.sleep(0.01)
        raise SystemExit("debezium.sh did not start Connect (see %s)" % WORK)

    def wait_running(self):
        if self.relay is None and self.proc.wait(180) != 0:
            raise SystemExit("debezium.sh start failed (see %s)" % WORK)

    def stop(self):
        if self.relay is not None:
            self.proc.terminate()
            self.proc.wait(60)
        else:
            self.proc.wait(180)  # debezium.sh start returns once the connector runs
            subprocess.run([DEBEZIUM_SH, "stop", self.dir], check=False)


def drop_slot(table):
    """Drops the table's slot once its walsender has gone (a moment after Connect)."""
    for _ in range(300):
        active = sql("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", "s_" + table)
        if not active or active[0][0] is None:
            break
        time.sleep(0.1)
    else:
        sql("SELECT pg_terminate_backend(%s)", active[0][0])
        time.sleep(1)
    sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
        "s_" + table)
    sql('DROP PUBLICATION IF EXISTS "p_%s"' % table)


def drain(system, relay, rows, rnd):
    table = "vs_%s_drain_%d_%s" % (system.name.replace("-", "_"), rnd, RUN)
    topic = fresh_table(relay, table)
    system.prepare(table)
    write_rows(table, rows)
    reader = Reader(topic)
    t0 = time.time()
    pid = system.start(table)
    cost = (0.0, 0.0)
    while len(reader.received) < rows:
        if time.time() - t0 > 900:
            raise SystemExit("%s: drain of %s did not finish" % (system.name, table))
        time.sleep(0.01)
        try:
            cost = proc_cost(pid)  # CPU from the start, start-up included
        except OSError:
            pass
    cpu, rss = cost
    reader.close()
    system.stop()
    if system.relay is None:
        drop_slot(table)
    sql('DROP TABLE IF EXISTS "public"."%s" CASCADE' % table)
    return {"rows": rows, "from_start_rows_per_s": rows / (reader.last - t0),
            "first_to_last_rows_per_s": rows / max(reader.last - reader.first, 1e-9),
            "cpu_s_per_100k": cpu * 100000.0 / rows, "peak_rss_mb": rss}


def latency(system, relay, rate, seconds):
    table = "vs_%s_latency_%s" % (system.name.replace("-", "_"), RUN)
    topic = fresh_table(relay, table)
    reader = Reader(topic)
    system.start(table)
    system.wait_running()
    conn = psycopg2.connect(PG)
    conn.autocommit = True
    cur = conn.cursor()
    enqueue = 'SELECT "public"."%s_enqueue"(\'order\', %%s, \'OrderPlaced\', %%s::jsonb)' % table
    # A warm-up event: the system is up and the topic has its consumer.
    cur.execute(enqueue, ("warmup", json.dumps({"seq": -1})))
    deadline = time.time() + 120
    while -1 not in reader.received:
        if time.time() > deadline:
            raise SystemExit("%s: the warm-up event never arrived" % system.name)
        time.sleep(0.01)
    n = int(rate * seconds)
    commit = [0.0] * n
    t0 = time.time() + 0.05
    for i in range(n):
        due = t0 + i / rate
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        cur.execute(enqueue, ("o%d" % (i % 5000), json.dumps({"seq": i})))
        commit[i] = time.time()
    end = time.time() + 30
    while len(reader.received) < n + 1 and time.time() < end:
        time.sleep(0.05)
    reader.close()
    pid = system.proc.pid if system.relay is not None else int(open(os.path.join(system.dir, "pid")).read())
    cpu, rss = proc_cost(pid)
    system.stop()
    if system.relay is None:
        drop_slot(table)
    sql('DROP TABLE IF EXISTS "public"."%s" CASCADE' % table)
    lat = sorted((reader.received[i] - commit[i]) * 1000 for i in range(n) if i in reader.received)
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None
    return {"rate": rate, "events": n, "received": len(lat), "achieved_rate": n / (commit[-1] - t0),
            "p50_ms": pick(0.50), "p99_ms": pick(0.99), "max_ms": lat[-1] if lat else None,
            "peak_rss_mb": rss}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--relay", required=True)
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if sql("SHOW wal_level")[0][0] != "logical":
        raise SystemExit("PostgreSQL must run with wal_level = logical")
    log("fetching Kafka Connect and Debezium (once)")
    subprocess.run([DEBEZIUM_SH, "fetch"], check=True, stdout=subprocess.DEVNULL)
    systems = [System("relay", a.relay), System("debezium", None),
               System("debezium-tuned", None, tuned=True)]
    drains = {s.name: [] for s in systems}
    for rnd in range(a.rounds):
        order = systems[rnd % 3:] + systems[:rnd % 3]
        for s in order:
            log("round %d: drain of %d single-row transactions, %s" % (rnd + 1, a.rows, s.name))
            drains[s.name].append(drain(s, a.relay, a.rows, rnd))
    with open(os.path.join(WORK, "drains.json"), "w") as f:
        json.dump(drains, f, indent=1)
    lats = {}
    no_fencing = System("relay-no-fencing", a.relay, opts=["-X", "relay.fencing=none"])
    for s in systems + [no_fencing]:
        log("latency at %d/s for %.0f s, %s" % (a.rate, a.seconds, s.name))
        lats[s.name] = latency(s, a.relay, a.rate, a.seconds)
    med = lambda name, key: statistics.median(d[key] for d in drains[name])
    report = {"rows": a.rows, "rounds": a.rounds, "drains": drains, "latency": lats,
              "medians": {s.name: {k: med(s.name, k) for k in drains[s.name][0]} for s in systems}}
    r, d, t = (report["medians"][n] for n in ("relay", "debezium", "debezium-tuned"))
    best_lat = min(lats["debezium"]["p99_ms"], lats["debezium-tuned"]["p99_ms"])
    report["targets"] = {
        "drain_first_to_last_ge_3x": r["first_to_last_rows_per_s"] >= 3 * max(
            d["first_to_last_rows_per_s"], t["first_to_last_rows_per_s"]),
        "latency_p99_le_tenth": lats["relay"]["p99_ms"] <= best_lat / 10,
        "latency_p99_le_tenth_no_fencing": lats["relay-no-fencing"]["p99_ms"] <= best_lat / 10,
        "rss_le_thirtieth": r["peak_rss_mb"] <= min(d["peak_rss_mb"], t["peak_rss_mb"]) / 30,
    }
    json.dump(report, sys.stdout, indent=1)
    print()
    print("\n%-16s %12s %12s %10s %9s %12s %12s" % (
        "system", "from start", "first-last", "CPU/100k", "RSS MB", "p50 ms", "p99 ms"), file=sys.stderr)
    for s in systems:
        m, l = report["medians"][s.name], lats[s.name]
        print("%-16s %12.0f %12.0f %10.2f %9.1f %12.1f %12.1f" % (
            s.name, m["from_start_rows_per_s"], m["first_to_last_rows_per_s"], m["cpu_s_per_100k"],
            max(m["peak_rss_mb"], l["peak_rss_mb"]), l["p50_ms"], l["p99_ms"]), file=sys.stderr)
    l = lats["relay-no-fencing"]
    print("%-16s %12s %12s %10s %9s %12.1f %12.1f" % (
        "relay, fencing=none", "", "", "", "", l["p50_ms"], l["p99_ms"]), file=sys.stderr)
    for s in systems:
        print("%s drains from start: %s" % (s.name, " ".join(
            "%.0f" % x["from_start_rows_per_s"] for x in drains[s.name])), file=sys.stderr)
    print("targets: %s; logs in %s" % (report["targets"], WORK), file=sys.stderr)


if __name__ == "__main__":
    main()
