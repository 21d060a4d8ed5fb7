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

Systems: the relay with its defaults (relay.fencing = transactional: every
batch a Kafka transaction); the relay with relay.fencing = none (no
transactions); Debezium with its defaults and tuned for latency
(poll.interval.ms=10, the producer's linger.ms=0), both on Kafka Connect
standalone, whose producer commits no transactions; and Debezium with
exactly-once source support (KIP-618: Connect distributed with one worker,
exactly.once.source.support=enabled, the connector with
exactly.once.support=required and transaction.boundary=poll, tuned for latency
as above), whose producer commits a Kafka transaction per poll, like the
relay's default. Pairs: relay-no-fencing against both Debezium without
transactions, relay against debezium-eos. Every system is measured --rounds
times, drain and latency, the systems' order rotated each round; the medians
and every sample are reported, with the share of the machine's CPU that was
busy (everything on it) during each measurement. Connect's JVM runs with the
flags of Kafka's start scripts (OUTBOX_RELAY_TEST_KAFKA_JVM=stock, set by
tests/bench/run).

Targets: the relay with fencing = none at or below tuned Debezium's p50 and
p99; the relay with fencing = transactional at or below Debezium exactly-once
on p50 and p99 (medians over the rounds).

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
# debezium.sh's environment: Connect distributed with the stock JVM took 150 s
# to run its task on a loaded 2-core machine. (Not the relay's: it refuses an
# OUTBOX_RELAY_ variable it does not know.)
CONNECT_ENV = dict(os.environ, OUTBOX_RELAY_DEBEZIUM_START_TIMEOUT=os.environ.get(
    "OUTBOX_RELAY_DEBEZIUM_START_TIMEOUT", "400"))
TUNED = ["poll.interval.ms=10", "producer.override.linger.ms=0",
         "worker.connector.client.config.override.policy=All"]
EXACTLY_ONCE = ["worker.exactly.once.source.support=enabled", "exactly.once.support=required",
                "transaction.boundary=poll"]


def log(msg):
    print("against_debezium: " + msg, file=sys.stderr, flush=True)


def sql(query, *args):
    with psycopg2.connect(PG) as c, c.cursor() as cur:
        cur.execute(query, args)
        return cur.fetchall() if cur.description else None


def fresh_table(relay, table):
    sql('DROP TABLE IF EXISTS "public"."%s" CASCADE' % table)
    r = subprocess.run([relay, "migrate", "-X", "postgres.conninfo=" + PG, "-X", "relay.table=" + table],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit("outbox-relay migrate of %s failed (%d): %s" % (table, r.returncode, r.stderr))
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


def machine_cpu():
    """(busy, total) jiffies of every core, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def machine_busy(m0):
    m1 = machine_cpu()
    return (m1[0] - m0[0]) / max(m1[1] - m0[1], 1)


def topic_offsets(topic):
    """The sum of the topic's partitions' end offsets: transaction markers take offsets, so
    with transactions it is above the number of messages."""
    c = Consumer({"bootstrap.servers": KAFKA, "group.id": "bench-" + uuid.uuid4().hex})
    try:
        md = c.list_topics(topic, timeout=30).topics[topic]
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                   for p in md.partitions)
    finally:
        c.close()


def proc_cost(pid):
    """(CPU seconds, peak RSS in MB) of a running process."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open("/proc/%d/status" % pid) as f:
        hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
    return cpu, hwm / 1024.0


class System:
    def __init__(self, name, relay, sets=(), opts=(), distributed=False):
        self.name, self.relay, self.sets, self.opts = name, relay, list(sets), list(opts)
        self.distributed = distributed
        self.proc = self.dir = None

    def prepare(self, table):
        """Debezium only publishes what is written once its slot exists: the slot and the
        publication it would make are made before the rows (Connect then streams from the
        slot's start, as after a start and stop of its own, without the minute of a start)."""
        if self.relay is None:
            sql('CREATE PUBLICATION "p_%s" FOR TABLE "public"."%s"' % (table, table))
            sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", "s_" + table)

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
        if self.distributed:
            cmd.append("--distributed")
        for s in self.sets:
            cmd += ["--set", s]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=CONNECT_ENV,
                                     stderr=open(os.path.join(WORK, table + ".log"), "a"))
        pidfile = os.path.join(self.dir, "pid")
        for _ in range(3000):
            text = open(pidfile).read().strip() if os.path.exists(pidfile) else ""
            if text:
                return int(text)
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        raise SystemExit("debezium.sh did not start Connect (see %s)" % WORK)

    def pid(self):
        return self.proc.pid if self.relay is not None else int(open(os.path.join(self.dir, "pid")).read())

    def wait_running(self):
        if self.relay is None and self.proc.wait(300) != 0:
            raise SystemExit("debezium.sh start failed (see %s)" % WORK)

    def stop(self):
        if self.relay is not None:
            self.proc.terminate()
            self.proc.wait(60)
        else:
            self.proc.wait(300)  # debezium.sh start returns once the connector runs
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


def finish(system, table):
    system.stop()
    if system.relay is None:
        drop_slot(table)
    sql('DROP TABLE IF EXISTS "public"."%s" CASCADE' % table)


def drain(system, relay, rows, rnd):
    table = "vs_%s_drain_%d_%s" % (system.name.replace("-", "_"), rnd, RUN)
    topic = fresh_table(relay, table)
    system.prepare(table)
    write_rows(table, rows)
    reader = Reader(topic)
    m0 = machine_cpu()
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
    busy = machine_busy(m0)
    cpu, rss = cost
    reader.close()
    finish(system, table)
    return {"rows": rows, "from_start_rows_per_s": rows / (reader.last - t0),
            "first_to_last_rows_per_s": rows / max(reader.last - reader.first, 1e-9),
            "cpu_s_per_100k": cpu * 100000.0 / rows, "peak_rss_mb": rss, "machine_busy": busy}


def latency(system, relay, rate, seconds, rnd):
    table = "vs_%s_latency_%d_%s" % (system.name.replace("-", "_"), rnd, RUN)
    topic = fresh_table(relay, table)
    reader = Reader(topic)
    system.start(table)
    system.wait_running()
    enqueue = 'SELECT "public"."%s_enqueue"(\'order\', %%s, \'OrderPlaced\', %%s::jsonb)' % table
    # A writer per 250 events/s: one durable writer (a commit waits for its
    # WAL's flush) falls behind 1,000/s on a busy machine.
    conns = [psycopg2.connect(PG) for _ in range(max(1, -(-rate // 250)))]
    for c in conns:
        c.autocommit = True
    # A warm-up event: the system is up and the topic has its consumer.
    conns[0].cursor().execute(enqueue, ("warmup", json.dumps({"seq": -1})))
    deadline = time.time() + 120
    while -1 not in reader.received:
        if time.time() > deadline:
            raise SystemExit("%s: the warm-up event never arrived" % system.name)
        time.sleep(0.01)
    n = int(rate * seconds)
    commit = [0.0] * n
    cpu0 = proc_cost(system.pid())[0]
    m0 = machine_cpu()
    t0 = time.time() + 0.05

    def writer(w):
        cur = conns[w].cursor()
        for i in range(w, n, len(conns)):
            wait = t0 + i / rate - time.time()
            if wait > 0:
                time.sleep(wait)
            cur.execute(enqueue, ("o%d" % (i % 5000), json.dumps({"seq": i})))
            commit[i] = time.time()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(len(conns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in conns:
        c.close()
    end = time.time() + 30
    while len(reader.received) < n + 1 and time.time() < end:
        time.sleep(0.05)
    busy = machine_busy(m0)
    reader.close()
    cpu, rss = proc_cost(system.pid())
    offsets = topic_offsets(topic)
    finish(system, table)
    lat = sorted((reader.received[i] - commit[i]) * 1000 for i in range(n) if i in reader.received)
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None
    return {"rate": rate, "events": n, "received": len(lat), "writers": len(conns),
            "achieved_rate": n / (max(commit) - t0),
            "p50_ms": pick(0.50), "p99_ms": pick(0.99), "max_ms": lat[-1] if lat else None,
            "cpu_s_per_100k": (cpu - cpu0) * 100000.0 / n, "peak_rss_mb": rss,
            "topic_offsets_per_message": offsets / (n + 1.0), "machine_busy": busy}


DRAIN_KEYS = ["from_start_rows_per_s", "first_to_last_rows_per_s", "cpu_s_per_100k", "peak_rss_mb",
              "machine_busy"]
LATENCY_KEYS = ["achieved_rate", "p50_ms", "p99_ms", "max_ms", "cpu_s_per_100k", "peak_rss_mb",
                "topic_offsets_per_message", "machine_busy"]
# (the relay's system, the peer's, whether it is a target): the relay with no
# transactions against Debezium without, the transactional one against
# Debezium's exactly-once.
PAIRS = [("relay-no-fencing", "debezium-tuned", True), ("relay-no-fencing", "debezium", False),
         ("relay", "debezium-eos", True)]


def verdict(mine, peer):
    if mine <= peer:
        return "met (%.1f ms at or below %.1f ms)" % (mine, peer)
    return "missed by %.1f ms (%.1f against %.1f ms, %.2fx)" % (mine - peer, mine, peer, mine / peer)


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
    pg_settings = {k: sql("SHOW " + k)[0][0] for k in ("synchronous_commit", "fsync", "full_page_writes")}
    log("PostgreSQL %s; Connect's JVM: %s" % (pg_settings, os.environ.get("OUTBOX_RELAY_TEST_KAFKA_JVM", "lean")))
    log("fetching Kafka Connect and Debezium (once)")
    subprocess.run([DEBEZIUM_SH, "fetch"], check=True, stdout=subprocess.DEVNULL)
    systems = [System("relay", a.relay),
               System("relay-no-fencing", a.relay, opts=["-X", "relay.fencing=none"]),
               System("debezium", None),
               System("debezium-tuned", None, sets=TUNED),
               System("debezium-eos", None, sets=TUNED + EXACTLY_ONCE, distributed=True)]
    drains = {s.name: [] for s in systems}
    lats = {s.name: [] for s in systems}
    for rnd in range(a.rounds):
        k = rnd % len(systems)
        for s in systems[k:] + systems[:k]:
            log("round %d: drain of %d single-row transactions, %s" % (rnd + 1, a.rows, s.name))
            drains[s.name].append(drain(s, a.relay, a.rows, rnd))
            log("round %d: latency at %d/s for %.0f s, %s" % (rnd + 1, a.rate, a.seconds, s.name))
            lats[s.name].append(latency(s, a.relay, a.rate, a.seconds, rnd))
            with open(os.path.join(WORK, "samples.json"), "w") as f:
                json.dump({"drains": drains, "latency": lats}, f, indent=1)
    med = lambda samples, key: statistics.median(x[key] for x in samples)
    medians = {s.name: {"drain": {k: med(drains[s.name], k) for k in DRAIN_KEYS},
                        "latency": {k: med(lats[s.name], k) for k in LATENCY_KEYS}} for s in systems}
    targets = {}
    for mine, peer, is_target in PAIRS:
        for q in ("p50_ms", "p99_ms"):
            m, p = medians[mine]["latency"][q], medians[peer]["latency"][q]
            targets["%s %s <= %s" % (mine, q, peer)] = {
                "target": is_target, "met": m <= p, "relay_ms": m, "peer_ms": p,
                "by_ms": m - p, "verdict": verdict(m, p)}
    report = {"rows": a.rows, "rate": a.rate, "seconds": a.seconds, "rounds": a.rounds,
              "postgresql": pg_settings, "broker": os.environ.get("BENCH_BROKER", ""),
              "connect_jvm": os.environ.get("OUTBOX_RELAY_TEST_KAFKA_JVM", "lean"),
              "drains": drains, "latency": lats, "medians": medians, "targets": targets}
    json.dump(report, sys.stdout, indent=1)
    print()
    err = lambda s="": print(s, file=sys.stderr)
    err("\nmedians of %d round(s); drain %d rows; latency at %d/s for %.0f s" % (
        a.rounds, a.rows, a.rate, a.seconds))
    err("%-17s %10s %10s %9s %8s %8s %8s %8s %9s %8s %6s %5s" % (
        "system", "from start", "first-last", "CPU/100k", "RSS MB", "p50 ms", "p99 ms", "max ms",
        "CPU/100k", "RSS MB", "offs/m", "busy"))
    for s in systems:
        d, l = medians[s.name]["drain"], medians[s.name]["latency"]
        err("%-17s %10.0f %10.0f %9.2f %8.1f %8.1f %8.1f %8.0f %9.2f %8.1f %6.2f %4.0f%%" % (
            s.name, d["from_start_rows_per_s"], d["first_to_last_rows_per_s"], d["cpu_s_per_100k"],
            d["peak_rss_mb"], l["p50_ms"], l["p99_ms"], l["max_ms"], l["cpu_s_per_100k"],
            l["peak_rss_mb"], l["topic_offsets_per_message"],
            100 * statistics.median([x["machine_busy"] for x in drains[s.name] + lats[s.name]])))
    err("(drain: rows/s, CPU s per 100k, peak RSS; latency: p50/p99/max, CPU s per 100k, peak RSS;"
        " offs/m: topic offsets per message, above 1 with transactions; busy: the machine's CPU)")
    err("samples, round by round:")
    for s in systems:
        err("  %-17s drain from start %s; first-last %s; p50 %s; p99 %s; max %s; rate %s/s; busy %s" % (
            s.name,
            " / ".join("%.0f" % x["from_start_rows_per_s"] for x in drains[s.name]),
            " / ".join("%.0f" % x["first_to_last_rows_per_s"] for x in drains[s.name]),
            " / ".join("%.1f" % x["p50_ms"] for x in lats[s.name]),
            " / ".join("%.1f" % x["p99_ms"] for x in lats[s.name]),
            " / ".join("%.0f" % x["max_ms"] for x in lats[s.name]),
            " / ".join("%.0f" % x["achieved_rate"] for x in lats[s.name]),
            " / ".join("%.0f%%" % (100 * x["machine_busy"]) for x in drains[s.name] + lats[s.name])))
    for name, t in targets.items():
        err("%s %s: %s" % ("target" if t["target"] else "compared", name, t["verdict"]))
    err("logs in %s" % WORK)


if __name__ == "__main__":
    main()
