/* test_fault_matrix.c — the relay on a three-broker Kafka cluster (replication
 * factor 3, min.insync.replicas 2) through the faults such a cluster has in
 * production, one row each, under load: a backlog being drained while four
 * writers commit one event per transaction. Run by tests/fault-matrix
 * (docs/guarantees.md), outside CI's time budget: suite fault-matrix only.
 *
 * Each row checks at the end, with a read_committed consumer, that every
 * committed event is on Kafka and marked (with capture = wal: the slot
 * confirmed past it), and that the first deliveries of each aggregate are in
 * order (within each partition where the partition count changes), and
 * counts the duplicates. It prints one line, appended to
 * OUTBOX_RELAY_TEST_FAULT_RESULTS when set, with the time the relay took to mark
 * rows again (wal: to confirm a later position): the end of the longest
 * stretch without progress, counted from the fault (or from the brokers'
 * return where it waits for them), sampled every 200 ms; 0 when no stretch
 * lasted PAUSE_MIN_MS; and that stretch's length.
 *
 * OUTBOX_RELAY_TEST_FAULT_ROWS: the backlog (default 3000); OUTBOX_RELAY_TEST_FAULT_ONLY:
 * a comma-separated list of rows to run; OUTBOX_RELAY_TEST_FAULT_CAPTURE=wal for
 * log-based capture; OUTBOX_RELAY_TEST_FAULT_FENCING=none for no fencing;
 * OUTBOX_RELAY_TEST_FAULT_RELAY_OPTIONS: more of the relay's -X options, separated
 * by spaces (e.g. "log.level=debug kafka.debug=eos,broker" to see why a row is slow);
 * OUTBOX_RELAY_TEST_FAULT_HUNG=coordinator: the hung row stops the transaction
 * coordinator instead of the leader of partition 0;
 * OUTBOX_RELAY_TEST_FAULT_UPGRADE_TO: the release the upgrade row (the last: it
 * leaves the cluster on it) moves a 3.x cluster to, default 4.4.0. */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define WRITERS 4
#define WRITER_RATE 25          /* events/s per writer */
#define AGGREGATES 40           /* of the backlog */
#define SAMPLE_MS 200
/* Shorter stretches are the sampling's own: with marks every few tens of ms
 * the longest is one interval, anywhere in the row. */
#define PAUSE_MIN_MS 1000
#define MAX_SAMPLES 6000        /* 20 minutes */

static struct e2e_ctx T;
static struct e2e_relay *R;

/* ---- the cluster --------------------------------------------------------- */

static void kafka_version(char *out, size_t len)
{
    char path[700];
    snprintf(path, sizeof path, "%s/version", T.env->kafka_dir);
    FILE *f = fopen(path, "r");
    snprintf(out, len, "?");
    if (f) {
        if (fscanf(f, "%31s", out) != 1)
            snprintf(out, len, "?");
        fclose(f);
    }
}

static pid_t node_pid(int node)
{
    return (pid_t)e2e_kafka_node_pid(&T, node);
}

static bool node_alive(int node)
{
    pid_t pid = node_pid(node);
    return pid > 0 && kill(pid, 0) == 0;
}

/* As an upgrade stops a broker: SIGTERM, a controlled shutdown. */
static void node_stop(int node)
{
    pid_t pid = node_pid(node);
    cr_assert(pid > 0 && kill(pid, SIGTERM) == 0, "node %d: no process to stop", node);
    for (int i = 0; i < 600 && kill(pid, 0) == 0; i++)
        e2e_sleep_ms(100);
    cr_assert(kill(pid, 0) != 0, "node %d still runs 60 s after SIGTERM", node);
}

/* The active KRaft controller: the leader of the highest epoch any node's
 * quorum-state file records (clients' metadata names no controller in KRaft). */
static int active_controller(void)
{
    int best = -1, best_epoch = -1;
    for (int node = 1; node <= 3; node++) {
        char path[700], buf[512];
        snprintf(path, sizeof path, "%s/node-%d/data/__cluster_metadata-0/quorum-state", T.env->kafka_dir,
                 node);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *l = strstr(buf, "\"leaderId\":"), *e = strstr(buf, "\"leaderEpoch\":");
        if (!l || !e)
            continue;
        int leader = atoi(l + 11), epoch = atoi(e + 14);
        if (epoch > best_epoch && leader >= 1) {
            best = leader;
            best_epoch = epoch;
        }
    }
    return best;
}

/* The broker coordinating the relay's transactional.id: the leader of the
 * __transaction_state partition Kafka hashes the id to (Java's
 * String.hashCode, made non-negative, modulo the 4 partitions kafka.sh sets). */
static int transaction_coordinator(void)
{
    char id[160];
    snprintf(id, sizeof id, "outbox-relay.public.%s", T.table);
    return e2e_txn_coordinator(T.kafka, id);
}

static int topic_leader(int partition)
{
    char topic[128];
    snprintf(topic, sizeof topic, "%s.order", T.table);
    return e2e_partition_leader(T.kafka, topic, partition);
}

static void *restart_main(void *arg)
{
    char dir[700], node[8];
    snprintf(dir, sizeof dir, "%s", T.env->kafka_dir);
    snprintf(node, sizeof node, "%d", (int)(intptr_t)arg);
    const char *argv[] = {T.env->kafka_sh, "restart", dir, node, NULL};
    char *out = NULL, *err = NULL;
    int rc = e2e_run_cmd(argv, 180000, &out, &err);
    if (rc != 0)
        fprintf(stderr, "fault-matrix: kafka.sh restart %s: exit %d\n%s", node, rc, err ? err : "");
    free(out);
    free(err);
    return NULL;
}

/* Every node that is down started again, at the same time: a node waits for
 * a controller quorum (two of three) before it is up. Stopped ones resumed. */
static void restart_dead_nodes(void)
{
    pthread_t th[3];
    bool started[3] = {false};
    for (int node = 1; node <= 3; node++) {
        if (node_pid(node) > 0)
            kill(node_pid(node), SIGCONT);
        if (!node_alive(node))
            started[node - 1] = pthread_create(&th[node - 1], NULL, restart_main, (void *)(intptr_t)node) == 0;
    }
    for (int i = 0; i < 3; i++)
        if (started[i])
            pthread_join(th[i], NULL);
    for (int node = 1; node <= 3; node++)
        cr_assert(node_alive(node), "node %d did not start again", node);
}

/* ---- load: writers, and the marks sampled ------------------------------- */

struct writer {
    pthread_t th;
    int id;
    atomic_long committed;
};

static struct writer W[WRITERS];
static int writer_keys = 1; /* aggregates per writer, written in turn */
static atomic_bool stop_writers, stop_sampler;
static pthread_t sampler_th;
static int64_t sample_ms[MAX_SAMPLES];
static long long sample_sent[MAX_SAMPLES];
static atomic_int n_samples;

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    char sql[512];
    PGconn *c = e2e_pg_connect();
    int64_t start = e2e_now_ms();
    for (long seq = 1; !atomic_load(&stop_writers); seq++) {
        snprintf(sql, sizeof sql, "SELECT %s('order', 'w%d-%ld', 'created', jsonb_build_object('i', %ld))",
                 T.qenqueue, w->id, seq % writer_keys, seq);
        PGresult *res = PQexec(c, sql);
        if (PQresultStatus(res) == PGRES_TUPLES_OK)
            atomic_fetch_add(&w->committed, 1);
        PQclear(res);
        int64_t due = start + seq * 1000 / WRITER_RATE - e2e_now_ms();
        if (due > 0)
            e2e_sleep_ms((int)due);
    }
    PQfinish(c);
    return NULL;
}

/* What says the relay published more: in polling mode the rows marked; with
 * capture = wal, which marks nothing, the position it confirmed on the slot
 * (after Kafka committed what came before it). */
static void progress_sql(char *sql, size_t len)
{
    if (T.wal)
        snprintf(sql, len,
                 "SELECT coalesce((SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots "
                 "WHERE slot_name = '%s'), 0)",
                 T.table);
    else
        snprintf(sql, len, "SELECT count(*) FROM %s WHERE sent_at IS NOT NULL", T.qtable);
}

static void *sampler_main(void *arg)
{
    (void)arg;
    PGconn *c = e2e_pg_connect();
    char sql[512];
    progress_sql(sql, sizeof sql);
    while (!atomic_load(&stop_sampler)) {
        PGresult *res = PQexec(c, sql);
        int i = atomic_load(&n_samples);
        if (PQresultStatus(res) == PGRES_TUPLES_OK && i < MAX_SAMPLES) {
            sample_ms[i] = e2e_now_ms();
            sample_sent[i] = atoll(PQgetvalue(res, 0, 0));
            atomic_store(&n_samples, i + 1);
        }
        PQclear(res);
        e2e_sleep_ms(SAMPLE_MS);
    }
    PQfinish(c);
    return NULL;
}

static long long progress_now(void)
{
    char sql[512];
    progress_sql(sql, sizeof sql);
    return e2e_query_int(T.conn, "%s", sql);
}

/* Seconds from @p from_ms to the end of the longest stretch without a new
 * mark after it (a stretch that began before counts from it; one not over
 * yet ends at the last sample); 0 when none lasted PAUSE_MIN_MS. */
static int64_t pause_ms; /* the length of that stretch, for the result line */

static double resumed_after(int64_t from_ms)
{
    int n = atomic_load(&n_samples);
    int64_t last_change = n > 0 ? sample_ms[0] : from_ms, best_end = from_ms, best_len = -1;
    for (int i = 1; i < n; i++) {
        if (sample_sent[i] == sample_sent[i - 1])
            continue;
        if (sample_ms[i] >= from_ms) {
            int64_t begin = last_change > from_ms ? last_change : from_ms;
            if (sample_ms[i] - begin > best_len) {
                best_len = sample_ms[i] - begin;
                best_end = sample_ms[i];
            }
        }
        last_change = sample_ms[i];
    }
    /* A stretch still going on at the last sample: the relay has not marked
     * rows again yet, and the longest stretch may be this one. */
    if (n > 0) {
        int64_t begin = last_change > from_ms ? last_change : from_ms;
        if (sample_ms[n - 1] - begin > best_len) {
            best_len = sample_ms[n - 1] - begin;
            best_end = sample_ms[n - 1];
        }
    }
    pause_ms = best_len > 0 ? best_len : 0;
    if (best_len < PAUSE_MIN_MS)
        return 0.0;
    return (double)(best_end - from_ms) / 1000.0;
}

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static int backlog(void)
{
    return env_int("OUTBOX_RELAY_TEST_FAULT_ROWS", 3000);
}

static const char *fencing(void)
{
    const char *v = getenv("OUTBOX_RELAY_TEST_FAULT_FENCING");
    return v && *v ? v : "transactional";
}

static const char *row_option; /* one more -X option, of the row itself */
static char kafka_before[32];  /* the version the row began on, when it changes it */

/* The relay's -X options: the fencing mode, the row's, then those of
 * OUTBOX_RELAY_TEST_FAULT_RELAY_OPTIONS; @p buf holds their text. */
static void relay_options(const char **opts, size_t max, char *buf, size_t len)
{
    size_t n = 0;
    int w = snprintf(buf, len, "relay.fencing=%s", fencing());
    opts[n++] = buf;
    if (row_option)
        opts[n++] = row_option;
    const char *more = getenv("OUTBOX_RELAY_TEST_FAULT_RELAY_OPTIONS");
    if (more && *more && (size_t)w + 1 < len) {
        char *p = buf + w + 1;
        snprintf(p, len - (size_t)w - 1, "%s", more);
        for (char *tok = strtok(p, " "); tok && n + 1 < max; tok = strtok(NULL, " "))
            opts[n++] = tok;
    }
    opts[n] = NULL;
}

/* ---- one row -------------------------------------------------------------- */

static void fini(void)
{
    atomic_store(&stop_writers, true);
    atomic_store(&stop_sampler, true);
    if (T.env && T.env->kafka_dir)
        restart_dead_nodes();
    e2e_teardown(&T);
}

/* The row's table and a cluster of three nodes up, unless the row is not
 * selected (skipped). */
static void row_setup(const char *name)
{
    const char *only = getenv("OUTBOX_RELAY_TEST_FAULT_ONLY");
    if (only && *only) {
        char list[512];
        snprintf(list, sizeof list, ",%s,", only);
        char me[80];
        snprintf(me, sizeof me, ",%s,", name);
        if (!strstr(list, me))
            cr_skip_test("not in OUTBOX_RELAY_TEST_FAULT_ONLY");
    }
    e2e_setup(&T, name);
    if (!T.env->kafka_dir || e2e_kafka_node_count(&T) != 3)
        cr_skip_test("needs the stack's own three-node Kafka (OUTBOX_RELAY_TEST_KAFKA_NODES=3)");
    /* A node lost outside the rows (its start failed) would make every row
     * a two-node one. */
    restart_dead_nodes();
}

/* The backlog, the relay draining it and the writers writing; returns once
 * half the backlog is marked. */
static void row_load(void)
{
    const char *capture = getenv("OUTBOX_RELAY_TEST_FAULT_CAPTURE");
    if (capture && !strcmp(capture, "wal"))
        e2e_wal_enable(&T);
    e2e_migrate(&T);
    /* With capture = wal the backlog is 20 transactions: the fault strikes
     * once the slot is confirmed past the tenth (a transaction is confirmed
     * whole). */
    char half_lsn[64] = "";
    int slices = T.wal ? 20 : 1;
    for (int i = 0; i < slices; i++) {
        e2e_enqueue_series(&T, "order", "a", AGGREGATES, "changed", 1 + i * backlog() / slices,
                           (i + 1) * backlog() / slices, 0);
        if (T.wal && i == slices / 2 - 1) {
            PGresult *res = e2e_query(T.conn, "SELECT pg_current_wal_insert_lsn()::text");
            snprintf(half_lsn, sizeof half_lsn, "%s", PQgetvalue(res, 0, 0));
            PQclear(res);
        }
    }
    char buf[512];
    const char *extra[12];
    relay_options(extra, 12, buf, sizeof buf);
    R = e2e_relay_start(&T, extra);
    atomic_store(&n_samples, 0);
    atomic_store(&stop_sampler, false);
    atomic_store(&stop_writers, false);
    cr_assert_eq(pthread_create(&sampler_th, NULL, sampler_main, NULL), 0);
    for (int i = 0; i < WRITERS; i++) {
        W[i].id = i;
        atomic_store(&W[i].committed, 0);
        cr_assert_eq(pthread_create(&W[i].th, NULL, writer_main, &W[i]), 0);
    }
    if (T.wal)
        cr_assert(e2e_wait_sql(&T, 180000,
                               "SELECT confirmed_flush_lsn >= '%s'::pg_lsn FROM pg_replication_slots "
                               "WHERE slot_name = '%s'",
                               half_lsn, T.table),
                  "half the backlog not confirmed within 180 s (log %s)", R->log_path);
    else
        cr_assert(e2e_wait_sql(&T, 180000, "SELECT count(*) >= %d FROM %s WHERE sent_at IS NOT NULL",
                               backlog() / 2, T.qtable),
                  "half the backlog not marked within 180 s (log %s)", R->log_path);
}

static void row_begin(const char *name)
{
    row_setup(name);
    row_load();
}

/* Writers stopped, the brokers all up again, every row marked. */
static long row_settle(void)
{
    e2e_sleep_ms(5000); /* load after the recovery too */
    atomic_store(&stop_writers, true);
    long written = 0;
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(W[i].th, NULL);
        written += atomic_load(&W[i].committed);
    }
    restart_dead_nodes();
    if (T.wal)
        cr_assert(e2e_wal_wait_confirmed(&T, 300000), "the slot was not confirmed past the last event (log %s)",
                  R->log_path);
    else
        e2e_wait_all_sent(&T, 300000);
    atomic_store(&stop_sampler, true);
    pthread_join(sampler_th, NULL);
    return written;
}

/* The check and the result line, after row_settle. @p resumed: seconds until
 * the relay marked rows again. */
static void row_report(const char *name, const char *what, long written, double resumed,
                       const char *order_note)
{
    size_t dups = e2e_check_delivered(&T, what, !T.wal, false, 0);
    long long rows = e2e_query_int(T.conn, "SELECT count(*) FROM %s", T.qtable);
    char version[32];
    kafka_version(version, sizeof version);
    char line[512];
    snprintf(line, sizeof line,
             "fault-matrix\t%s\tkafka=%s%s%s\tcapture=%s\tfencing=%s\trows=%lld\twritten=%ld\tlost=0"
             "\tduplicates=%zu\torder=%s\tresumed_s=%.1f\tpause_s=%.1f\tproducers_given_up=%d\n",
             name, kafka_before, *kafka_before ? "->" : "", version, T.wal ? "wal" : "poll", fencing(), rows,
             written, dups, order_note, resumed, (double)pause_ms / 1000.0,
             R ? e2e_relay_log_count(R, "stopped answering; replacing") : 0);
    fputs(line, stderr);
    const char *out = getenv("OUTBOX_RELAY_TEST_FAULT_RESULTS");
    FILE *f = out && *out ? fopen(out, "a") : NULL;
    if (f) {
        fputs(line, f);
        fclose(f);
    }
    if (R && R->pid)
        cr_assert_eq(e2e_relay_stop(R, 30000), 0, "the relay did not exit 0 on SIGTERM");
}

static void row_end(const char *name, const char *what, double resumed, const char *order_note)
{
    long written = row_settle();
    row_report(name, what, written, resumed, order_note);
}

/* @p node killed -9 and left dead for @p dead_s seconds: the relay must go on
 * with the two others. */
static void kill_and_wait(const char *name, const char *what, int node, int dead_s)
{
    cr_assert(node >= 1 && node <= 3, "%s: no such node (%d)", name, node);
    fprintf(stderr, "fault-matrix: %s: killing node %d\n", name, node);
    int64_t at = e2e_now_ms();
    e2e_kafka_node(&T, "kill", node);
    e2e_sleep_ms(dead_s * 1000);
    double resumed = resumed_after(at);
    cr_assert(resumed < dead_s - 1, "%s: nothing marked for %.1f s with node %d dead (log %s)", name,
              resumed, node, R->log_path);
    row_end(name, what, resumed, "kept");
}

Test(fault_matrix, partition_leader_killed, .fini = fini, .timeout = 900)
{
    row_begin("leader");
    kill_and_wait("leader", "partition leader killed -9", topic_leader(0), 30);
}

Test(fault_matrix, transaction_coordinator_killed, .fini = fini, .timeout = 900)
{
    row_begin("coordinator");
    int node = transaction_coordinator();
    /* Without transactions a cluster may have no transaction state log at all. */
    if (node < 1 && !strcmp(fencing(), "none"))
        cr_skip_test("relay.fencing = none: no transaction coordinator on this cluster");
    kill_and_wait("coordinator", "transaction coordinator killed -9", node, 30);
}

Test(fault_matrix, active_controller_killed, .fini = fini, .timeout = 900)
{
    row_begin("controller");
    kill_and_wait("controller", "active controller killed -9", active_controller(), 30);
}

/* The node the hung row stops: the leader of partition 0, or the transaction
 * coordinator (OUTBOX_RELAY_TEST_FAULT_HUNG=coordinator), for which two of the
 * relay's requests can wait in turn. */
static int hung_node(void)
{
    const char *v = getenv("OUTBOX_RELAY_TEST_FAULT_HUNG");
    if (v && !strcmp(v, "coordinator")) {
        cr_assert(strcmp(fencing(), "none") != 0,
                  "OUTBOX_RELAY_TEST_FAULT_HUNG=coordinator needs relay.fencing = transactional");
        return transaction_coordinator();
    }
    cr_assert(!v || !*v || !strcmp(v, "leader"), "OUTBOX_RELAY_TEST_FAULT_HUNG=%s: leader or coordinator", v);
    return topic_leader(0);
}

Test(fault_matrix, broker_stopped_30s, .fini = fini, .timeout = 900)
{
    row_begin("hung");
    int node = hung_node();
    cr_assert(node >= 1 && node <= 3, "no node to stop");
    char hms[16]; /* UTC, as the relay logs: to find the fault window there */
    time_t t = time(NULL);
    strftime(hms, sizeof hms, "%H:%M:%SZ", gmtime(&t));
    fprintf(stderr, "fault-matrix: hung: SIGSTOP to node %d for 30 s at %s (leader of partition 0: node %d, "
            "coordinator: node %d, controller: node %d)\n",
            node, hms, topic_leader(0), transaction_coordinator(), active_controller());
    int64_t at = e2e_now_ms();
    e2e_kafka_node(&T, "pause", node);
    e2e_sleep_ms(30000);
    double resumed = resumed_after(at);
    e2e_kafka_node(&T, "resume", node);
    cr_assert(resumed < 29, "hung: nothing marked for %.1f s with node %d stopped (log %s)", resumed, node,
              R->log_path);
    row_end("hung", "broker stopped (SIGSTOP) 30 s", resumed, "kept");
}

/* Kills @p n nodes (the last ones), holds @p hold_s: nothing may be marked and
 * /readyz must fail; then starts them again. @return seconds from their
 * return to marks again. */
static double nodes_down(int n, int hold_s, const char *name)
{
    for (int node = 3; node > 3 - n; node--)
        e2e_kafka_node(&T, "kill", node);
    e2e_sleep_ms(5000); /* what was acknowledged before is marked */
    long long before = progress_now();
    e2e_sleep_ms((hold_s - 5) * 1000);
    long long after = progress_now();
    char *body = NULL;
    int status = e2e_relay_http_get(R, "/readyz?verbose", &body);
    cr_assert_eq(after, before, "%s: %lld rows marked while %d of 3 brokers were down", name, after - before,
                 n);
    cr_assert_eq(status, 503, "%s: /readyz answered %d with %d of 3 brokers down:\n%s", name, status, n,
                 body ? body : "");
    free(body);
    cr_assert(e2e_relay_alive(R), "%s: the relay exited (log %s)", name, R->log_path);
    int64_t back = e2e_now_ms();
    if (n == 3) {
        restart_dead_nodes();
    } else {
        e2e_kafka_node(&T, "restart", 3 - n + 1);
    }
    e2e_sleep_ms(20000);
    return resumed_after(back);
}

Test(fault_matrix, two_of_three_down, .fini = fini, .timeout = 900)
{
    row_begin("twodown");
    double resumed = nodes_down(2, 20, "twodown");
    row_end("twodown", "two of three brokers down 20 s, one back", resumed, "kept");
}

Test(fault_matrix, all_down_60s, .fini = fini, .timeout = 900)
{
    row_begin("alldown");
    double resumed = nodes_down(3, 60, "alldown");
    row_end("alldown", "all brokers down 60 s", resumed, "kept");
}

Test(fault_matrix, rolling_restart, .fini = fini, .timeout = 900)
{
    row_begin("rolling");
    int64_t at = e2e_now_ms();
    for (int node = 1; node <= 3; node++) {
        fprintf(stderr, "fault-matrix: rolling: stopping node %d\n", node);
        node_stop(node);
        e2e_sleep_ms(3000);
        e2e_kafka_node(&T, "restart", node);
        e2e_sleep_ms(10000); /* back in the ISRs before the next */
    }
    row_end("rolling", "rolling restart (SIGTERM, start) of the three brokers", resumed_after(at), "kept");
}

Test(fault_matrix, relay_and_coordinator_killed, .fini = fini, .timeout = 900)
{
    row_begin("relaycoord");
    int node = transaction_coordinator();
    cr_assert(node >= 1 && node <= 3, "no transaction coordinator known");
    fprintf(stderr, "fault-matrix: relaycoord: killing the relay and node %d\n", node);
    int64_t at = e2e_now_ms();
    e2e_relay_kill(R);
    e2e_kafka_node(&T, "kill", node);
    char buf[512];
    const char *extra[12];
    relay_options(extra, 12, buf, sizeof buf);
    R = e2e_relay_start(&T, extra);
    e2e_sleep_ms(30000);
    double resumed = resumed_after(at);
    cr_assert(resumed < 29, "relaycoord: nothing marked for %.1f s (log %s)", resumed, R->log_path);
    row_end("relaycoord", "relay and transaction coordinator killed -9, relay started again", resumed, "kept");
}

/* ---- the partition count raised ------------------------------------------ */

#define PARTITIONS_BEFORE 4     /* kafka.sh's num.partitions */
#define PARTITIONS_AFTER 8

static void partitions_raise(const char *topic, int total)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", T.kafka, errstr, sizeof errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    cr_assert(rk, "rd_kafka_new: %s", errstr);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_NewPartitions_t *np = rd_kafka_NewPartitions_new(topic, (size_t)total, errstr, sizeof errstr);
    cr_assert(np, "NewPartitions: %s", errstr);
    rd_kafka_CreatePartitions(rk, &np, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 60000);
    cr_assert(ev, "CreatePartitions %s: no answer within 60 s", topic);
    const rd_kafka_CreatePartitions_result_t *res = rd_kafka_event_CreatePartitions_result(ev);
    size_t n = 0;
    const rd_kafka_topic_result_t **tr = res ? rd_kafka_CreatePartitions_result_topics(res, &n) : NULL;
    cr_assert(n == 1 && rd_kafka_topic_result_error(tr[0]) == RD_KAFKA_RESP_ERR_NO_ERROR,
              "CreatePartitions %s: %s", topic,
              n ? rd_kafka_topic_result_error_string(tr[0]) : rd_kafka_event_error_string(ev));
    rd_kafka_event_destroy(ev);
    rd_kafka_NewPartitions_destroy(np);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
}

struct key_spread {
    char key[32];
    unsigned partitions;        /* bit per partition holding the key */
    int64_t min_id[PARTITIONS_AFTER], max_id[PARTITIONS_AFTER];
};

/* Reads the topic back and says how many keys landed in more than one
 * partition, and of those how many were cut cleanly (every event in the old
 * partition older than every one in the new). */
static void partitions_spread(const char *topic, char *note, size_t len)
{
    struct e2e_msgs msgs = {0};
    const char *topics[] = {topic};
    e2e_consume_from(T.kafka, true, topics, 1, 60000, &msgs);
    struct key_spread keys[AGGREGATES + WRITERS * 10 + 8];
    size_t n_keys = 0;
    for (size_t i = 0; i < msgs.n; i++) {
        const struct e2e_msg *m = &msgs.v[i];
        const char *oid = e2e_msg_header(m, "outbox_id");
        if (!m->key || !oid || m->partition < 0 || m->partition >= PARTITIONS_AFTER)
            continue;
        struct key_spread *k = NULL;
        for (size_t j = 0; j < n_keys && !k; j++)
            if (!strcmp(keys[j].key, m->key))
                k = &keys[j];
        if (!k) {
            cr_assert(n_keys < sizeof keys / sizeof keys[0], "more keys than written");
            k = &keys[n_keys++];
            memset(k, 0, sizeof *k);
            snprintf(k->key, sizeof k->key, "%s", m->key);
        }
        int p = m->partition;
        int64_t id = atoll(oid);
        if (!(k->partitions & (1u << p)) || id < k->min_id[p])
            k->min_id[p] = id;
        if (!(k->partitions & (1u << p)) || id > k->max_id[p])
            k->max_id[p] = id;
        k->partitions |= 1u << p;
    }
    int moved = 0, clean = 0;
    for (size_t j = 0; j < n_keys; j++) {
        if (__builtin_popcount(keys[j].partitions) < 2)
            continue;
        moved++;
        bool cut = true;
        for (int p = 0; p < PARTITIONS_AFTER; p++)
            for (int q = 0; q < PARTITIONS_AFTER; q++)
                if (p != q && (keys[j].partitions & (1u << p)) && (keys[j].partitions & (1u << q)) &&
                    keys[j].min_id[p] < keys[j].min_id[q] && keys[j].max_id[p] > keys[j].min_id[q])
                    cut = false;
        clean += cut;
    }
    snprintf(note, len, "per-partition;moved=%d/%zu;clean_cut=%d", moved, n_keys, clean);
    e2e_msgs_free(&msgs);
}

/* The topic grows from 4 to 8 partitions under load. librdkafka sees the new
 * count at its next metadata refresh: 5 minutes by default, 5 s in this row
 * (kafka.topic.metadata.refresh.interval.ms) so that the row is short. From
 * then on a key may hash to another partition: the check is per partition,
 * and the row counts the keys that moved. The writers write 40 aggregates
 * here, since the backlog's are drained before the relay sees the new count. */
Test(fault_matrix, partitions_raised, .fini = fini, .timeout = 900)
{
    row_option = "kafka.topic.metadata.refresh.interval.ms=5000";
    writer_keys = 10; /* the backlog is drained before the new count is seen: the writers' keys move */
    row_begin("partitions");
    char topic[128];
    snprintf(topic, sizeof topic, "%s.order", T.table);
    fprintf(stderr, "fault-matrix: partitions: %s from %d to %d partitions\n", topic, PARTITIONS_BEFORE,
            PARTITIONS_AFTER);
    int64_t at = e2e_now_ms();
    partitions_raise(topic, PARTITIONS_AFTER);
    e2e_sleep_ms(30000);
    double resumed = resumed_after(at);
    long written = row_settle();
    e2e_keys_may_move = true;
    char note[128];
    partitions_spread(topic, note, sizeof note);
    row_report("partitions", "partition count raised from 4 to 8", written, resumed, note);
    e2e_keys_may_move = false;
}

/* ---- a rolling upgrade ----------------------------------------------------- */

/* Before the roll: a 3.x cluster must be on metadata.version 3.3 or later for
 * 4.x to start on it (describe's output goes to the log). */
static void upgrade_check_from(const char *to)
{
    char mv[32];
    int major = 0, minor = 0;
    e2e_kafka_feature_level(&T, to, "metadata.version", mv, sizeof mv);
    bool ok = sscanf(mv, "%d.%d", &major, &minor) == 2 && major * 100 + minor >= 303;
    cr_assert(ok, "upgrade: metadata.version %s: Kafka 4.x needs 3.3 or later", mv);
}

/* Once every node runs @p to: the upgrade finalized as Kafka's notes say,
 * `kafka-features.sh upgrade --release-version` @p release (every feature to
 * its level, not only metadata.version), 10 s of load on it, then
 * metadata.version checked. */
static void upgrade_finalize(const char *to, const char *release)
{
    const char *finalize[] = {"upgrade", "--release-version", release, NULL};
    char *out = e2e_kafka_features(&T, to, finalize);
    fprintf(stderr, "fault-matrix: upgrade: kafka-features.sh upgrade --release-version %s:\n%s", release, out);
    free(out);
    e2e_sleep_ms(10000);
    char mv[32];
    e2e_kafka_feature_level(&T, to, "metadata.version", mv, sizeof mv);
    cr_assert(!strncmp(mv, release, strlen(release)) && mv[strlen(release)] == '-',
              "upgrade: metadata.version %s after finalizing %s", mv, release);
}

/* Kafka's upgrade notes for 4.x: each broker stopped, its code replaced and
 * started again, one at a time; once all run the new release, the upgrade
 * finalized. The relay publishes on through the mixed cluster and through
 * the feature change. OUTBOX_RELAY_TEST_FAULT_UPGRADE_TO picks the release
 * (default 4.4.0, fetched once like the stack's). */
Test(fault_matrix, upgrade_rolling_to_4, .fini = fini, .timeout = 1500)
{
    row_setup("upgrade");
    const char *to = getenv("OUTBOX_RELAY_TEST_FAULT_UPGRADE_TO");
    to = to && *to ? to : "4.4.0";
    int major = 0, minor = 0;
    cr_assert(sscanf(to, "%d.%d", &major, &minor) == 2 && major >= 4, "upgrade: to %s: not 4.x", to);
    char from[32], release[16];
    kafka_version(from, sizeof from);
    if (atoi(from) != 3)
        cr_skip_test("the upgrade row starts on Kafka 3.x; this cluster runs %s", from);
    upgrade_check_from(to);
    row_load();
    int64_t at = e2e_now_ms();
    for (int node = 1; node <= 3; node++) {
        fprintf(stderr, "fault-matrix: upgrade: stopping node %d, starting it on Kafka %s\n", node, to);
        node_stop(node);
        e2e_sleep_ms(3000);
        e2e_kafka_node_upgrade(&T, node, to);
        e2e_sleep_ms(10000); /* back in the ISRs before the next, as in the rolling restart */
    }
    snprintf(release, sizeof release, "%d.%d", major, minor);
    upgrade_finalize(to, release);
    double resumed = resumed_after(at);
    snprintf(kafka_before, sizeof kafka_before, "%s", from);
    row_end("upgrade", "rolling upgrade (SIGTERM, start on the new release) of the three brokers, finalized",
            resumed, "kept");
}
