/* bench.c — the performance harness of outbox-relay: drain rate against
 * the SQL floor, commit→consumer latency, memory and CPU cost.
 *
 * It drives the real binary against the stack of tests/support/stack.sh
 * (OUTBOX_RELAY_TEST_PG, OUTBOX_RELAY_TEST_KAFKA) and prints one JSON report
 * on stdout and a short table on stderr. Every figure of one report comes
 * from the same run on the same machine: compare ratios, not absolutes.
 *
 *   outbox-relay-bench --relay PATH [--peers DIR] [--rows N] [--aggregates N]
 *                      [--latency-seconds S] [--rates R1,R2] [--smoke]
 *                      [--long-txn-rows N] [--fresh-rate R]
 *                      [--relay-opt section.key=value]...   (extra -X for the relay)
 *
 * Every relay drain is compared, in the same run and on identical fresh
 * tables, with two floors (PL/pgSQL loops inside PostgreSQL: the minimal one
 * claims ids only, the wide one reads the relay's columns) and with two
 * honest peers, relays a careful engineer writes by hand in Python:
 * tests/bench/peer_minimal.py (two headers) and tests/bench/peer_same.py (the
 * relay's exact messages).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/kafka_rules.h"
#include "core/sql.h"

#ifndef PEER_DIR
#define PEER_DIR "tests/bench"
#endif

static const char *pg_conninfo;
static const char *kafka_servers;
static const char *relay_bin;
static const char *peer_dir = PEER_DIR;
static char workdir[256];
static const char *relay_opts[16]; /* --relay-opt: extra -X for every relay run */
static int n_relay_opts;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* The stack's librdkafka mock cluster, which the stack controls through a FIFO. */
static bool broker_is_mock(void)
{
    return getenv("OUTBOX_RELAY_TEST_MOCK_CONTROL") != NULL;
}

/* What the figures were measured against: tests/bench/run names it. */
static const char *broker_name(void)
{
    const char *named = getenv("BENCH_BROKER");
    if (named && *named)
        return named;
    return broker_is_mock() ? "librdkafka mock cluster" : "external";
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* ---- PostgreSQL ---------------------------------------------------------- */

static PGconn *pg_open(void)
{
    PGconn *c = PQconnectdb(pg_conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        die("postgres: %s", PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}

static void pg_exec(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void pg_exec(PGconn *c, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        die("sql failed: %s\n%s", PQresultErrorMessage(r), sql);
    PQclear(r);
}

static long long pg_int(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static long long pg_int(PGconn *c, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        die("sql failed: %s\n%s", PQresultErrorMessage(r), sql);
    long long v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

/* ---- the relay process --------------------------------------------------- */

struct relay_proc {
    pid_t pid;
    double started;
};

static pid_t run_cmd(const char *const argv[], const char *log)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        /* A session of its own, as a service has a cgroup of its own: with
         * autogroup scheduling the kernel shares the CPU between sessions, and
         * every PostgreSQL backend starts one, so in the benchmark's session
         * the relay would share one backend's share with the load generator.
         * Out of the terminal's process group, it must still end with us. */
        setsid();
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 2);
            dup2(fd, 1);
            close(fd);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static void base_args(const char **argv, int *n, const char *table)
{
    static char pg[1024], kafka[1024], tbl[128], topic[160];
    snprintf(pg, sizeof(pg), "postgres.conninfo=%s", pg_conninfo);
    snprintf(kafka, sizeof(kafka), "kafka.bootstrap.servers=%s", kafka_servers);
    snprintf(tbl, sizeof(tbl), "relay.table=%s", table);
    snprintf(topic, sizeof(topic), "relay.topic=%s.${aggregate_type}", table);
    argv[(*n)++] = "-X";
    argv[(*n)++] = strdup(pg);
    argv[(*n)++] = "-X";
    argv[(*n)++] = strdup(kafka);
    argv[(*n)++] = "-X";
    argv[(*n)++] = strdup(tbl);
    argv[(*n)++] = "-X";
    argv[(*n)++] = strdup(topic);
}

static void migrate(const char *table)
{
    const char *argv[16];
    int n = 0;
    argv[n++] = relay_bin;
    argv[n++] = "migrate";
    base_args(argv, &n, table);
    argv[n] = NULL;
    char log[512];
    snprintf(log, sizeof(log), "%s/migrate.log", workdir);
    int st;
    waitpid(run_cmd(argv, log), &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("migrate %s failed (see %s)", table, log);
}

/* A peer: a relay written by hand (@p script in peer_dir), with Debian's python3. */
static struct relay_proc peer_start(const char *script, const char *table)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", peer_dir, script);
    const char *argv[] = { "/usr/bin/python3", path, pg_conninfo, kafka_servers, table, NULL };
    char log[512];
    snprintf(log, sizeof(log), "%s/peer-%s.log", workdir, table);
    struct relay_proc p = { .started = now_s() };
    p.pid = run_cmd(argv, log);
    return p;
}

static struct relay_proc relay_start(const char *table, const char *const *extra)
{
    const char *argv[40];
    int n = 0;
    argv[n++] = relay_bin;
    argv[n++] = "run";
    base_args(argv, &n, table);
    for (; extra && *extra; extra++) {
        argv[n++] = "-X";
        argv[n++] = *extra;
    }
    for (int i = 0; i < n_relay_opts; i++) {
        argv[n++] = "-X";
        argv[n++] = relay_opts[i];
    }
    argv[n] = NULL;
    char log[512];
    snprintf(log, sizeof(log), "%s/relay-%s.log", workdir, table);
    struct relay_proc p = { .started = now_s() };
    p.pid = run_cmd(argv, log);
    return p;
}

/* CPU seconds (user + system) a process has used; -1 when it is gone. */
static double proc_cpu_s(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    double cpu = -1;
    if (f && fgets(line, sizeof(line), f)) {
        /* Fields after the command name in parentheses: utime is the 14th. */
        char *p = strrchr(line, ')');
        unsigned long ut = 0, st = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
            cpu = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    }
    if (f)
        fclose(f);
    return cpu;
}

/* The whole machine's CPU time so far, every core, from /proc/stat: what the
 * stack, the relay and the benchmark itself took together. A figure measured
 * while it was all busy says more about the machine than about the relay. */
struct machine_cpu {
    unsigned long long busy, total;
};

static struct machine_cpu machine_cpu_now(void)
{
    struct machine_cpu m = { 0, 0 };
    unsigned long long v[8] = { 0 };
    FILE *f = fopen("/proc/stat", "r");
    if (f && fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                    &v[4], &v[5], &v[6], &v[7]) == 8) {
        for (int i = 0; i < 8; i++)
            m.total += v[i];
        m.busy = m.total - v[3] - v[4]; /* idle and iowait */
    }
    if (f)
        fclose(f);
    return m;
}

/* The share of all cores busy between @p a and @p b; -1 when unknown. */
static double machine_busy(struct machine_cpu a, struct machine_cpu b)
{
    if (b.total <= a.total)
        return -1;
    return (double)(b.busy - a.busy) / (double)(b.total - a.total);
}

/* Peak resident memory (VmHWM) in MB and CPU seconds of a process. */
static void relay_cost(pid_t pid, double *rss_mb, double *cpu_s)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    *rss_mb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            *rss_mb = strtod(line + 6, NULL) / 1024.0;
    if (f)
        fclose(f);
    *cpu_s = proc_cpu_s(pid);
}

/* CPU seconds of the PostgreSQL backends serving other clients than the
 * benchmark (@p c) and @p except: during a drain, the relay's or the peer's.
 * They connected for the drain, so what they used is the drain's. */
static double client_backends_cpu_s(PGconn *c, int except)
{
    PGresult *r = PQexec(c, "SELECT pid FROM pg_stat_activity WHERE backend_type = "
                            "'client backend' AND pid <> pg_backend_pid()");
    double sum = -1; /* none: the client is gone (the peer exits when done) */
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        die("pg_stat_activity: %s", PQresultErrorMessage(r));
    for (int i = 0; i < PQntuples(r); i++) {
        int pid = atoi(PQgetvalue(r, i, 0));
        double cpu = pid == except ? -1 : proc_cpu_s(pid);
        if (cpu >= 0)
            sum = (sum < 0 ? 0 : sum) + cpu;
    }
    PQclear(r);
    return sum;
}

static void relay_stop(struct relay_proc *p)
{
    kill(p->pid, SIGTERM);
    int st;
    for (int i = 0; i < 300; i++) {
        if (waitpid(p->pid, &st, WNOHANG) == p->pid)
            return;
        sleep_s(0.05);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &st, 0);
}

/* A command run to its end: wall time, exit status and peak RSS from wait4
 * (ru_maxrss, the child's own high-water mark). */
struct cmd_cost {
    double seconds;
    double peak_rss_mb;
    int status; /* exit status, or -1 when killed by a signal */
};

static struct cmd_cost run_measured(const char *const argv[], const char *log)
{
    struct cmd_cost c = { 0 };
    double t0 = now_s();
    pid_t pid = run_cmd(argv, log);
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) != pid)
        die("wait4: %s", strerror(errno));
    c.seconds = now_s() - t0;
    c.peak_rss_mb = (double)ru.ru_maxrss / 1024.0;
    c.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return c;
}

/* ---- seeding ------------------------------------------------------------- */

/* N rows over A aggregates with a JSON payload of about 250 bytes. */
static void seed(PGconn *c, const char *table, long rows, int aggregates)
{
    pg_exec(c,
            "INSERT INTO \"public\".\"%s\" (\"aggregate_type\", \"aggregate_id\", \"event_type\", "
            "\"payload\") SELECT 'order', (i %% %d)::text, 'OrderUpdated', "
            "jsonb_build_object('order_id', i, 'customer', 'customer-' || (i %% 977), "
            "'status', 'paid', 'amount', (i %% 10000) / 100.0, 'currency', 'EUR', "
            "'note', repeat('x', 120)) FROM generate_series(1, %ld) AS i",
            table, aggregates, rows);
    pg_exec(c, "VACUUM ANALYZE \"public\".\"%s\"", table);
}

static void drop(PGconn *c, const char *table)
{
    pg_exec(c, "DROP TABLE IF EXISTS \"public\".\"%s\" CASCADE", table);
    /* A fresh database has no bookkeeping table yet. */
    pg_exec(c, "DO $$ BEGIN IF to_regclass('public.outbox_relay_migrations') IS NOT NULL THEN "
               "DELETE FROM \"public\".\"outbox_relay_migrations\" WHERE \"table_name\" = "
               "'public.%s'; END IF; END $$", table);
}

/* ---- scenario 1: drain, next to the floors and the peer ------------------ */

struct drain_result {
    long rows;
    double seconds;
    double rows_per_s;
    double peak_rss_mb;     /* -1: not measured (the peer exits by itself) */
    double cpu_s;
    double pg_cpu_s;        /* PostgreSQL backends doing the drain; -1: not measured */
    double machine_busy;    /* share of all cores busy during it; -1: not measured */
};

enum runner { RUN_RELAY, RUN_PEER_MINIMAL, RUN_PEER_SAME };

/* A snapshot held open on another connection, as a long report or a
 * forgotten BEGIN would: the row versions the drain makes dead stay visible
 * to it, so neither VACUUM nor index scans can drop them. */
static PGconn *hold_snapshot(void)
{
    PGconn *h = pg_open();
    pg_exec(h, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    pg_exec(h, "SELECT 1");
    return h;
}

static void release_snapshot(PGconn *h)
{
    pg_exec(h, "COMMIT");
    PQfinish(h);
}

/* The relay's own claim (relay/sql.c) under EXPLAIN (ANALYZE, BUFFERS):
 * its execution time and the shared buffers it touched. The plan goes to
 * WORKDIR/claim-plan-TABLE-LABEL.txt. */
struct claim_plan {
    double ms;
    long buffers;
};

static struct claim_plan explain_claim(PGconn *c, const char *table, const char *label)
{
    struct sql_statements q;
    if (sql_statements_init(&q, "public", table, "outbox_relay", SQL_HOLD_AGGREGATE) < 0)
        die("cannot build the claim for %s", table);
    char *sql;
    if (asprintf(&sql, "EXPLAIN (ANALYZE, BUFFERS) %s", q.claim) < 0)
        die("out of memory");
    sql_statements_free(&q);
    const char *params[] = { "1000", "1", "0", "{}" }; /* a full batch, nothing in flight */
    PGresult *r = PQexecParams(c, sql, 4, NULL, params, NULL, NULL, 0);
    free(sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        die("EXPLAIN of the claim: %s", PQresultErrorMessage(r));
    struct claim_plan plan = { -1, -1 };
    char path[512];
    snprintf(path, sizeof(path), "%s/claim-plan-%s-%s.txt", workdir, table, label);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < PQntuples(r); i++) {
        const char *line = PQgetvalue(r, i, 0);
        if (f)
            fprintf(f, "%s\n", line);
        const char *hit = strstr(line, "Buffers: shared hit=");
        if (hit && plan.buffers < 0) /* the first is the top node's: the whole plan */
            plan.buffers = strtol(hit + 20, NULL, 10);
        if (strncmp(line, "Execution Time: ", 16) == 0)
            plan.ms = strtod(line + 16, NULL);
    }
    if (f)
        fclose(f);
    PQclear(r);
    return plan;
}

struct drain_opts {
    enum runner runner;
    const char *const *extra; /* relay: more -X */
    bool deleting;            /* relay.on_sent=delete: done when the table is empty */
    bool hold;                /* a REPEATABLE READ snapshot open during the drain */
    struct claim_plan *plan;  /* if set: the claim's plan at the end, before the hold ends */
};

static struct drain_result drain(PGconn *c, const char *table, long rows, int aggregates,
                                 const struct drain_opts *o)
{
    drop(c, table);
    migrate(table);
    seed(c, table, rows, aggregates);

    /* Whether the last row is done is one index lookup; whether every row
     * is walks the dead entries the drain leaves in the partial index, more
     * of them every time: done only once the last row is, or the poll would
     * load the server under the relay (and not under the floors). */
    long long last_id = pg_int(c, "SELECT max(\"id\") FROM \"public\".\"%s\"", table);
    PGconn *holder = o->hold ? hold_snapshot() : NULL;
    int holder_pid = holder ? PQbackendPID(holder) : 0;
    struct drain_result r = { .rows = rows, .peak_rss_mb = -1, .cpu_s = -1, .pg_cpu_s = -1 };
    struct machine_cpu m0 = machine_cpu_now();
    struct relay_proc p = o->runner == RUN_PEER_MINIMAL ? peer_start("peer_minimal.py", table)
                          : o->runner == RUN_PEER_SAME ? peer_start("peer_same.py", table)
                                                       : relay_start(table, o->extra);
    const char *who = o->runner == RUN_RELAY ? "relay" : "peer";
    double deadline = p.started + 1800;
    bool exited = false;
    for (;;) {
        long long last_left = o->deleting
            ? pg_int(c, "SELECT count(*) FROM \"public\".\"%s\" WHERE \"id\" = %lld", table,
                     last_id)
            : pg_int(c, "SELECT count(*) FROM \"public\".\"%s\" WHERE \"id\" = %lld AND "
                        "\"sent_at\" IS NULL", table, last_id);
        long long left = last_left ? 1
            : o->deleting
            ? pg_int(c, "SELECT count(*) FROM (SELECT 1 FROM \"public\".\"%s\" LIMIT 1) s", table)
            : pg_int(c, "SELECT count(*) FROM (SELECT 1 FROM \"public\".\"%s\" WHERE "
                        "\"sent_at\" IS NULL AND \"dead_at\" IS NULL LIMIT 1) s", table);
        if (left == 0)
            break;
        if (exited)
            die("%s exited before the drain of %s finished (see %s)", who, table, workdir);
        if (now_s() > deadline)
            die("drain of %s did not finish", table);
        int st;
        /* The peer exits when it finds nothing: look at the table once more. */
        if (waitpid(p.pid, &st, WNOHANG) == p.pid) {
            exited = true;
            continue;
        }
        sleep_s(0.02);
    }
    double end = now_s();
    r.machine_busy = machine_busy(m0, machine_cpu_now());
    if (!exited)
        r.pg_cpu_s = client_backends_cpu_s(c, holder_pid);
    if (!exited && o->runner == RUN_RELAY)
        relay_cost(p.pid, &r.peak_rss_mb, &r.cpu_s);
    if (!exited)
        relay_stop(&p);
    if (o->plan)
        *o->plan = explain_claim(c, table, o->hold ? "snapshot-held" : "no-snapshot");
    if (holder)
        release_snapshot(holder);
    r.seconds = end - p.started;
    r.rows_per_s = (double)rows / r.seconds;
    if (!o->deleting) {
        long long unsent = pg_int(c, "SELECT count(*) FROM \"public\".\"%s\" WHERE \"sent_at\" "
                                     "IS NULL", table);
        if (unsent)
            die("%lld rows of %s unsent after the drain", unsent, table);
    }
    return r;
}

/* Runs a floor procedure on a fresh, seeded table; the procedure commits
 * after each batch, as the relay does. */
static struct drain_result floor_run(PGconn *c, const char *table, long rows, int aggregates,
                                     const char *body, int batch)
{
    drop(c, table);
    migrate(table);
    seed(c, table, rows, aggregates);
    pg_exec(c,
            "CREATE OR REPLACE PROCEDURE \"public\".\"%s_floor\"(p_batch int) LANGUAGE plpgsql "
            "AS $$ DECLARE ids bigint[]; bytes bigint; BEGIN LOOP %s "
            "EXIT WHEN ids IS NULL; "
            "UPDATE \"public\".\"%s\" SET \"sent_at\" = clock_timestamp() "
            "WHERE \"id\" = ANY(ids) AND \"sent_at\" IS NULL; COMMIT; END LOOP; END $$",
            table, body, table);
    struct drain_result r = { .rows = rows, .peak_rss_mb = -1, .cpu_s = -1 };
    double cpu0 = proc_cpu_s(PQbackendPID(c));
    struct machine_cpu m0 = machine_cpu_now();
    double t0 = now_s();
    pg_exec(c, "CALL \"public\".\"%s_floor\"(%d)", table, batch);
    r.seconds = now_s() - t0;
    r.machine_busy = machine_busy(m0, machine_cpu_now());
    double cpu1 = proc_cpu_s(PQbackendPID(c));
    r.pg_cpu_s = cpu0 >= 0 && cpu1 >= 0 ? cpu1 - cpu0 : -1;
    r.rows_per_s = (double)rows / r.seconds;
    return r;
}

/* The minimal floor: only the ids of the oldest unsent rows, then the
 * conditional UPDATE. Nothing a relay could do with less. */
static struct drain_result minimal_floor(PGconn *c, const char *table, long rows, int aggregates,
                                         int batch)
{
    char body[512];
    snprintf(body, sizeof(body),
             "SELECT array_agg(s.id) INTO ids FROM (SELECT o.\"id\" AS id FROM \"public\".\"%s\" "
             "AS o WHERE o.\"sent_at\" IS NULL AND o.\"dead_at\" IS NULL ORDER BY o.\"id\" "
             "LIMIT p_batch) s;",
             table);
    return floor_run(c, table, rows, aggregates, body, batch);
}

/* The wide floor: the same claim and conditional UPDATE as the relay, the
 * relay's columns read and formatted as text (to_char() of created_at too, as
 * the claim did before it read binary), done entirely inside PostgreSQL. */
static struct drain_result wide_floor(PGconn *c, const char *table, long rows, int aggregates,
                                      int batch)
{
    char body[1024];
    snprintf(body, sizeof(body),
             "SELECT array_agg(s.id), sum(length(s.payload) + length(s.headers)) INTO ids, bytes "
             "FROM (SELECT o.\"id\" AS id, o.\"event_id\"::text AS ev, o.\"payload\"::text AS "
             "payload, coalesce(o.\"headers\"::text, '') AS headers, "
             "floor(extract(epoch FROM o.\"created_at\") * 1000)::bigint AS ms, "
             "to_char(o.\"created_at\" AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') "
             "AS ts FROM \"public\".\"%s\" AS o WHERE o.\"sent_at\" IS NULL AND o.\"dead_at\" "
             "IS NULL ORDER BY o.\"id\" LIMIT p_batch) s;",
             table);
    return floor_run(c, table, rows, aggregates, body, batch);
}

/* ---- scenario 2: latency ------------------------------------------------- */

struct latency_run {
    const char *table;
    int rate;
    double seconds;
    long n;                 /* room in commit and recv */
    double *commit;         /* by the event's sequence number (its payload's "seq") */
    double *recv;
    volatile bool stop;
    rd_kafka_t *consumer;
    double t0;              /* when event 0 is due */
    int writers;            /* connections writing: event n is written by writer n % writers */
};

/* The sequence number a latency event carries in its payload. */
static long latency_seq(const rd_kafka_message_t *m)
{
    static const char tag[] = "\"seq\": ";
    const char *v = m->payload;
    size_t len = m->len;
    for (size_t i = 0; v && i + sizeof(tag) - 1 < len; i++)
        if (!memcmp(v + i, tag, sizeof(tag) - 1))
            return strtol(v + i + sizeof(tag) - 1, NULL, 10);
    return -1;
}

static void *consume_thread(void *arg)
{
    struct latency_run *L = arg;
    while (!L->stop) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(L->consumer, 50);
        if (!m)
            continue;
        double t = now_s();
        long idx = m->err ? -1 : latency_seq(m);
        if (idx >= 0 && idx < L->n && L->recv[idx] == 0)
            L->recv[idx] = t;
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

static rd_kafka_t *consumer_at_end(const char *topic)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", kafka_servers, err, sizeof(err));
    rd_kafka_conf_set(conf, "group.id", "outbox-relay-bench", err, sizeof(err));
    rd_kafka_conf_set(conf, "fetch.wait.max.ms", "1", err, sizeof(err));
    rd_kafka_conf_set(conf, "fetch.error.backoff.ms", "5", err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    if (!rk)
        die("consumer: %s", err);
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
    if (rd_kafka_metadata(rk, 0, t, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        md->topic_cnt != 1 || md->topics[0].partition_cnt == 0)
        die("no metadata for %s", topic);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(4);
    for (int i = 0; i < md->topics[0].partition_cnt; i++)
        rd_kafka_topic_partition_list_add(parts, topic, md->topics[0].partitions[i].id)->offset =
            RD_KAFKA_OFFSET_END;
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(t);
    rd_kafka_assign(rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    return rk;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct latency_result {
    int rate;
    double achieved_rate;
    long events;
    long received;
    int writers; /* connections that wrote the events */
    double p50_ms, p99_ms, max_ms;
    double machine_busy; /* share of all cores busy while the events were written; -1: unknown */
    long notifies;       /* NOTIFYs the writers sent (the others left it out: the quiet lock) */
    /* Kafka's floor at the same rate (kafka_floor), with and without
     * transactions, and with the relay's fencing while the same writers
     * write the same events into a table nothing reads (floor_loaded);
     * events 0 when not measured. */
    struct latency_floor {
        long events, received;
        double achieved_rate, p50_ms, p99_ms, max_ms, machine_busy;
    } floor_txn, floor_none, floor_loaded;
};

/* Commit → received percentiles of the first @p n events of @p L. */
static struct latency_result latency_figures(const struct latency_run *L, long n)
{
    struct latency_result res = { .events = n };
    double *lat = calloc((size_t)n + 1, sizeof(double));
    long m = 0;
    for (long k = 0; k < n; k++) {
        if (L->recv[k] > 0 && L->commit[k] > 0) {
            double d = L->recv[k] - L->commit[k];
            lat[m++] = d < 0 ? 0 : d * 1000.0; /* received before the COMMIT reply reached us */
        }
    }
    res.received = m;
    if (m > 0) {
        qsort(lat, (size_t)m, sizeof(double), cmp_double);
        res.p50_ms = lat[(m - 1) * 50 / 100];
        res.p99_ms = lat[(m - 1) * 99 / 100];
        res.max_ms = lat[m - 1];
    }
    free(lat);
    return res;
}

/* Room for @p L's events, and a consumer at the end of @p topic reading
 * them on a thread of its own (returned). */
static pthread_t latency_listen(struct latency_run *L, const char *topic)
{
    L->n = (long)(L->rate * L->seconds) + 16;
    L->commit = calloc((size_t)L->n, sizeof(double));
    L->recv = calloc((size_t)L->n, sizeof(double));
    if (!L->commit || !L->recv)
        die("out of memory");
    L->consumer = consumer_at_end(topic);
    pthread_t th;
    pthread_create(&th, NULL, consume_thread, L);
    sleep_s(1.0); /* let the consumer reach the end of every partition */
    return th;
}

/* Every event of @p L, when it was committed (or produced) and received, in
 * seconds from the first one's due time, into latency-<table>.tsv of the run's
 * directory: the outliers' times show what they line up with (a timer, a
 * backlog count, the relay's debug log). */
static void latency_dump(const struct latency_run *L, long n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/latency-%s.tsv", workdir, L->table);
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "# times in seconds after %.6f (the Unix time event 0 was due)\n", L->t0);
    fprintf(f, "seq\tcommitted_s\treceived_s\tms\n");
    for (long k = 0; k < n; k++) {
        if (L->commit[k] <= 0)
            continue;
        double ms = L->recv[k] > 0 ? (L->recv[k] - L->commit[k]) * 1000.0 : -1;
        fprintf(f, "%ld\t%.6f\t%.6f\t%.3f\n", k, L->commit[k] - L->t0,
                L->recv[k] > 0 ? L->recv[k] - L->t0 : -1.0, ms);
    }
    fclose(f);
}

/* The percentiles of the first @p n events of @p L into @p res; frees @p L's room. */
static void latency_take(struct latency_result *res, struct latency_run *L, long n)
{
    latency_dump(L, n);
    struct latency_result f = latency_figures(L, n);
    res->received = f.received;
    res->p50_ms = f.p50_ms;
    res->p99_ms = f.p99_ms;
    res->max_ms = f.max_ms;
    free(L->commit);
    free(L->recv);
}

/* Waits up to @p wait_s for the first @p n events of @p L to arrive, then
 * stops its consumer (thread @p th) and closes it. */
static void latency_collect(struct latency_run *L, pthread_t th, long n, double wait_s)
{
    for (double waited = 0; waited < wait_s; waited += 0.05) {
        long got = 0;
        for (long k = 0; k < n; k++)
            got += L->recv[k] > 0;
        if (got == n)
            break;
        sleep_s(0.05);
    }
    L->stop = true;
    pthread_join(th, NULL);
    rd_kafka_consumer_close(L->consumer);
    rd_kafka_destroy(L->consumer);
}

/* When event @p n of @p L is due: the writers commit it, Kafka's floor produces it. */
static double latency_due(const struct latency_run *L, long n)
{
    return L->t0 + (double)n / L->rate;
}

/* Runs @p sql, an enqueue taking the event's sequence number @p n as $1, in
 * its own transaction. @return when it committed. */
static double enqueue_seq(PGconn *c, const char *sql, long n)
{
    char arg[24];
    snprintf(arg, sizeof(arg), "%ld", n);
    const char *params[] = { arg };
    PGresult *r = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        die("enqueue: %s", PQresultErrorMessage(r));
    PQclear(r);
    return now_s(); /* autocommit: the row is committed when this returns */
}

/* One writer of the latency run: its own connection, every writers-th event,
 * each a single-row transaction committed at its due time. */
struct latency_writer {
    struct latency_run *L;
    int k;
    long written;
    double last;
};

/* At most this many events a second from one connection: past it a single
 * writer (a round trip and a commit per event) falls behind its schedule. */
#define LATENCY_RATE_PER_WRITER 1000

#define LATENCY_WRITERS_MAX 16

/* The writers a latency run at @p rate needs. */
static int latency_writers(int rate)
{
    int w = (rate + LATENCY_RATE_PER_WRITER - 1) / LATENCY_RATE_PER_WRITER;
    return w > LATENCY_WRITERS_MAX ? LATENCY_WRITERS_MAX : w;
}

static void *latency_writer_thread(void *opaque)
{
    struct latency_writer *w = opaque;
    struct latency_run *L = w->L;
    PGconn *c = pg_open();
    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT \"public\".\"%s_enqueue\"('order', ($1::int %% 500)::text, 'Ping', "
             "jsonb_build_object('ping', true, 'seq', $1::int))",
             L->table);
    for (long n = w->k; n < L->n - 16; n += L->writers) {
        double due = latency_due(L, n);
        if (due > L->t0 + L->seconds)
            break;
        sleep_s(due - now_s());
        L->commit[n] = enqueue_seq(c, sql, n);
        w->written++;
    }
    w->last = now_s();
    PQfinish(c);
    return NULL;
}

/* The writer threads of one latency run. */
struct latency_writers {
    struct latency_writer w[LATENCY_WRITERS_MAX];
    pthread_t t[LATENCY_WRITERS_MAX];
};

/* Starts @p L's writers (L->writers of them) from @p L's t0 on. */
static void writers_start(struct latency_writers *ws, struct latency_run *L)
{
    for (int k = 0; k < L->writers; k++) {
        ws->w[k] = (struct latency_writer){ .L = L, .k = k };
        pthread_create(&ws->t[k], NULL, latency_writer_thread, &ws->w[k]);
    }
}

/* Waits for the writers of @p L. @return the events they wrote; *@p last:
 * when the last of them finished. */
static long writers_join(struct latency_writers *ws, const struct latency_run *L, double *last)
{
    long n = 0;
    *last = L->t0;
    for (int k = 0; k < L->writers; k++) {
        pthread_join(ws->t[k], NULL);
        n += ws->w[k].written;
        *last = ws->w[k].last > *last ? ws->w[k].last : *last;
    }
    return n;
}

struct listener {
    PGconn *conn;
    volatile bool *stop;
    long count;
};

static void *listener_thread(void *arg)
{
    struct listener *l = arg;
    struct pollfd pfd = { .fd = PQsocket(l->conn), .events = POLLIN };
    while (!*l->stop) {
        if (poll(&pfd, 1, 50) > 0 && !PQconsumeInput(l->conn))
            die("listener: %s", PQerrorMessage(l->conn));
        for (PGnotify *nf; (nf = PQnotifies(l->conn)) != NULL; PQfreemem(nf))
            l->count++;
    }
    return NULL;
}

static struct latency_result latency(PGconn *c, const char *table, int rate, double seconds)
{
    struct latency_result res = { .rate = rate };
    drop(c, table);
    migrate(table);
    struct relay_proc p = relay_start(table, NULL);

    /* A first event creates the topic and proves the relay is leading. */
    pg_exec(c, "SELECT \"public\".\"%s_enqueue\"('order', 'warmup', 'Warmup', '{}')", table);
    for (int i = 0; pg_int(c, "SELECT count(*) FROM \"public\".\"%s\" WHERE \"sent_at\" IS NULL",
                           table) > 0; i++) {
        if (i > 600)
            die("latency relay for %s never sent the warm-up event", table);
        sleep_s(0.05);
    }
    char topic[160];
    snprintf(topic, sizeof(topic), "%s.order", table);

    struct latency_run L = { .table = table, .rate = rate, .seconds = seconds };
    L.writers = latency_writers(rate);
    pthread_t th = latency_listen(&L, topic);

    struct latency_writers ws;
    /* Counts the writers' NOTIFYs on the relay's default channel, reading
     * them as they come: unread, they would fill the socket and stall. */
    struct listener ln = { .conn = pg_open(), .stop = &L.stop };
    pg_exec(ln.conn, "LISTEN \"outbox_relay\"");
    pthread_t lt;
    pthread_create(&lt, NULL, listener_thread, &ln);
    L.t0 = now_s() + 0.05;
    struct machine_cpu m0 = machine_cpu_now();
    writers_start(&ws, &L);
    double t1;
    long n = writers_join(&ws, &L, &t1);
    res.machine_busy = machine_busy(m0, machine_cpu_now());
    res.events = n;
    res.writers = L.writers;
    res.achieved_rate = (double)n / (t1 - L.t0);

    latency_collect(&L, th, n, 10.0); /* the stragglers, bounded */
    pthread_join(lt, NULL);
    res.notifies = ln.count;
    PQfinish(ln.conn);
    relay_stop(&p);

    latency_take(&res, &L, n);
    return res;
}

static void ensure_topic(const char *topic);

/* ---- the Kafka floor of latency ------------------------------------------- */

/* What Kafka alone costs an event at a rate, measured like the relay: the
 * same due times, the same producer settings (kafka_rules.c) and the same
 * consumer, but no database: this process produces each event when it is due.
 * With transactions it holds every event due by the time one begins and
 * commits it at once, one transaction after the other (what the relay's
 * joined transactions do at best); without, each event is produced when due.
 * The relay's latency above this floor is what the database, the wake-up and
 * the relay itself add. */
struct kafka_floor {
    struct latency_run *L;
    const char *topic;
    rd_kafka_t *rk;
    bool txn;
    long produced;
    long unacked;   /* produced, no delivery report yet */
    double last;
};

static void floor_delivered(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    struct kafka_floor *F = opaque;
    if (m->err)
        die("floor: delivery failed: %s", rd_kafka_err2str(m->err));
    F->unacked--;
}

/* Waits for every delivery report, as the relay does before it commits (a
 * commit with messages in flight would wait inside librdkafka's flush). */
static void floor_acked(struct kafka_floor *F)
{
    while (F->unacked > 0)
        rd_kafka_poll(F->rk, 100);
}

static rd_kafka_t *floor_producer(struct kafka_floor *F)
{
    bool txn = F->txn;
    char err[512], id[64];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set_dr_msg_cb(conf, floor_delivered);
    rd_kafka_conf_set_opaque(conf, F);
    size_t n;
    const struct kafka_setting *s = kafka_producer_settings(&n);
    for (size_t i = 0; i < n; i++)
        if (rd_kafka_conf_set(conf, s[i].key, s[i].value, err, sizeof(err)) != RD_KAFKA_CONF_OK)
            die("floor producer: %s", err);
    if (txn) {
        snprintf(id, sizeof(id), "outbox-relay-bench-floor-%d", (int)getpid());
        s = kafka_transaction_settings(&n);
        for (size_t i = 0; i < n; i++)
            if (rd_kafka_conf_set(conf, s[i].key, s[i].value ? s[i].value : id, err,
                                  sizeof(err)) != RD_KAFKA_CONF_OK)
                die("floor producer: %s", err);
    }
    rd_kafka_conf_set(conf, "bootstrap.servers", kafka_servers, err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk)
        die("floor producer: %s", err);
    if (txn) {
        rd_kafka_error_t *e = rd_kafka_init_transactions(rk, 30000);
        if (e)
            die("floor producer: init_transactions: %s", rd_kafka_error_string(e));
    }
    return rk;
}

static void floor_produce(struct kafka_floor *F, const char *topic, long k)
{
    char key[16], value[64];
    int klen = snprintf(key, sizeof(key), "%ld", k < 0 ? 0 : k % 500);
    int vlen = snprintf(value, sizeof(value), "{\"ping\": true, \"seq\": %ld}", k);
    rd_kafka_resp_err_t e;
    while ((e = rd_kafka_producev(F->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, (size_t)klen),
                                  RD_KAFKA_V_VALUE(value, (size_t)vlen),
                                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END)) ==
           RD_KAFKA_RESP_ERR__QUEUE_FULL)
        rd_kafka_poll(F->rk, 1);
    if (e)
        die("floor produce: %s", rd_kafka_err2str(e));
    F->unacked++;
}

static void floor_begin(struct kafka_floor *F)
{
    rd_kafka_error_t *e = F->txn ? rd_kafka_begin_transaction(F->rk) : NULL;
    if (e)
        die("floor: begin_transaction: %s", rd_kafka_error_string(e));
}

static void floor_commit(struct kafka_floor *F)
{
    floor_acked(F);
    rd_kafka_error_t *e = F->txn ? rd_kafka_commit_transaction(F->rk, 30000) : NULL;
    if (e)
        die("floor: commit_transaction: %s", rd_kafka_error_string(e));
}

/* Produces every event of the run when it is due; with transactions, each
 * transaction holds the events due when it began. */
static void kafka_floor_run(struct kafka_floor *F)
{
    struct latency_run *L = F->L;
    long next = 0, last = L->n - 16;
    double end = L->t0 + L->seconds;
    while (next < last && latency_due(L, next) <= end) {
        sleep_s(latency_due(L, next) - now_s());
        floor_begin(F);
        double now = now_s();
        for (; next < last && latency_due(L, next) <= now; next++) {
            L->commit[next] = latency_due(L, next); /* available from its due time */
            floor_produce(F, F->topic, next);
            F->produced++;
        }
        if (F->txn)
            floor_commit(F);
        else
            rd_kafka_poll(F->rk, 0); /* serves the reports; no waiting for them */
    }
    F->last = now_s();
    floor_acked(F);
}

/* The writers of a latency run, committing the same events at the same
 * times into an outbox table that no relay reads: what the relay's run puts
 * on the machine besides the relay, its backend and what it asks of Kafka. */
struct writer_load {
    struct latency_run W;
    struct latency_writers ws;
};

static void load_start(struct writer_load *ld, PGconn *c, const char *table, int rate,
                       double seconds, double t0)
{
    drop(c, table);
    migrate(table);
    ld->W = (struct latency_run){ .table = table, .rate = rate, .seconds = seconds, .t0 = t0,
                                  .writers = latency_writers(rate) };
    ld->W.n = (long)(rate * seconds) + 16;
    ld->W.commit = calloc((size_t)ld->W.n, sizeof(double));
    if (!ld->W.commit)
        die("out of memory");
    writers_start(&ld->ws, &ld->W);
}

static void load_stop(struct writer_load *ld, PGconn *c)
{
    double last;
    (void)writers_join(&ld->ws, &ld->W, &last);
    free(ld->W.commit);
    drop(c, ld->W.table);
}

/* Kafka's floor at @p rate into the topic of @p table; with @p load_table,
 * while the writers of the relay's run write into that table (@p c). */
static struct latency_result kafka_floor(const char *table, int rate, double seconds, bool txn,
                                         PGconn *c, const char *load_table)
{
    struct latency_result res = { .rate = rate, .notifies = -1 };
    char topic[160];
    snprintf(topic, sizeof(topic), "%s.order", table);
    ensure_topic(topic);
    struct latency_run L = { .table = table, .rate = rate, .seconds = seconds };
    struct kafka_floor F = { .L = &L, .topic = topic, .txn = txn };
    F.rk = floor_producer(&F);
    /* The topic's metadata and a first transaction before the clock starts,
     * as the relay's warm-up event gives it. */
    floor_begin(&F);
    floor_produce(&F, topic, -1);
    floor_commit(&F);
    pthread_t th = latency_listen(&L, topic);
    struct writer_load ld;
    if (load_table) /* its table made before the clock starts */
        load_start(&ld, c, load_table, rate, seconds, now_s() + 0.25);
    L.t0 = load_table ? ld.W.t0 : now_s() + 0.05;
    struct machine_cpu m0 = machine_cpu_now();
    kafka_floor_run(&F);
    res.machine_busy = machine_busy(m0, machine_cpu_now());
    if (load_table)
        load_stop(&ld, c);
    res.events = F.produced;
    res.achieved_rate = (double)F.produced / (F.last - L.t0);
    latency_collect(&L, th, F.produced, 10.0);
    rd_kafka_destroy(F.rk);
    latency_take(&res, &L, F.produced);
    return res;
}

/* ---- scenario 3: start-up ------------------------------------------------ */

/* Creates @p topic on the broker (one message the relay's consumers ignore:
 * it has no outbox_id), so a consumer can wait at its end before the relay
 * starts. */
static void ensure_topic(const char *topic)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", kafka_servers, err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk)
        die("producer: %s", err);
    if (rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_VALUE("bench", 5),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END))
        die("cannot produce to %s", topic);
    if (rd_kafka_flush(rk, 15000) != RD_KAFKA_RESP_ERR_NO_ERROR)
        die("cannot create topic %s", topic);
    rd_kafka_destroy(rk);
}

struct first_message {
    rd_kafka_t *consumer;
    volatile double at; /* when the first message arrived; 0 before */
    volatile bool stop;
};

static void *first_message_thread(void *arg)
{
    struct first_message *F = arg;
    while (!F->stop && F->at == 0) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(F->consumer, 20);
        if (!m)
            continue;
        if (!m->err)
            F->at = now_s();
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

/* The time of the relay's "became leader" log line (its ts= field, UTC with
 * milliseconds), or 0 while it has not been written. */
static double leader_time(const char *log)
{
    FILE *f = fopen(log, "r");
    char line[2048];
    double t = 0;
    while (f && fgets(line, sizeof(line), f)) {
        if (!strstr(line, "msg=\"became leader\""))
            continue;
        struct tm tm = { 0 };
        int ms = 0;
        if (sscanf(line, "ts=%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) == 7) {
            tm.tm_year -= 1900;
            tm.tm_mon -= 1;
            t = (double)timegm(&tm) + ms / 1000.0;
        }
        break;
    }
    if (f)
        fclose(f);
    return t;
}

struct startup_result {
    long backlog;
    int runs;
    double start_to_leader_ms[8];
    double leader_to_received_ms[8]; /* first message received by a consumer */
    double leader_to_marked_ms[8];   /* first row marked (its sent_at) */
};

static double median(const double *v, int n)
{
    double tmp[8];
    memcpy(tmp, v, sizeof(double) * (size_t)n);
    qsort(tmp, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

static double maximum(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* A relay starts with @p backlog rows waiting: how long from its start, and
 * from its "became leader", to the first message a consumer receives and to
 * the first row marked. @p runs times on the same table, the rows it sent
 * made unsent again in between. */
static struct startup_result startup(PGconn *c, const char *table, long backlog, int aggregates,
                                     int runs)
{
    struct startup_result res = { .backlog = backlog, .runs = runs };
    drop(c, table);
    migrate(table);
    seed(c, table, backlog, aggregates);
    char topic[160], log[512];
    snprintf(topic, sizeof(topic), "%s.order", table);
    snprintf(log, sizeof(log), "%s/relay-%s.log", workdir, table);
    ensure_topic(topic);
    for (int k = 0; k < runs; k++) {
        pg_exec(c, "UPDATE \"public\".\"%s\" SET \"sent_at\" = NULL WHERE \"sent_at\" IS NOT NULL",
                table);
        pg_exec(c, "VACUUM ANALYZE \"public\".\"%s\"", table);
        struct first_message F = { .consumer = consumer_at_end(topic) };
        pthread_t th;
        pthread_create(&th, NULL, first_message_thread, &F);
        sleep_s(1.0); /* let the consumer reach the end of every partition */
        unlink(log);
        struct relay_proc p = relay_start(table, NULL);
        double leader = 0, marked = 0;
        for (int i = 0; i < 1500 && (F.at == 0 || marked == 0); i++) {
            sleep_s(0.01);
            if (leader == 0)
                leader = leader_time(log);
            if (marked == 0)
                marked = (double)pg_int(c, "SELECT coalesce(floor(extract(epoch FROM min("
                                           "\"sent_at\")) * 1e6), 0)::bigint FROM \"public\".\"%s\"",
                                        table) / 1e6;
        }
        F.stop = true;
        pthread_join(th, NULL);
        rd_kafka_consumer_close(F.consumer);
        rd_kafka_destroy(F.consumer);
        relay_stop(&p);
        if (leader == 0)
            leader = leader_time(log);
        if (leader == 0 || F.at == 0 || marked == 0)
            die("start-up of %s: no leader, message or mark within 15 s (see %s)", table, log);
        res.start_to_leader_ms[k] = (leader - p.started) * 1000.0;
        res.leader_to_received_ms[k] = (F.at - leader) * 1000.0;
        res.leader_to_marked_ms[k] = (marked - leader) * 1000.0;
    }
    return res;
}

/* ---- scenario 4: fresh events behind a backlog --------------------------- */

struct fresh_result {
    long backlog;
    int rate;
    double drain_seconds;
    struct latency_result lat;
};

/* While a relay drains @p backlog rows, events are committed at @p rate on
 * their own topic; their commit → consumer latency says how long a new
 * event waits behind the backlog (claims go in id order). */
static struct fresh_result fresh_behind_backlog(PGconn *c, const char *table, long backlog,
                                                int aggregates, int rate)
{
    struct fresh_result res = { .backlog = backlog, .rate = rate };
    drop(c, table);
    migrate(table);
    seed(c, table, backlog, aggregates);
    char topic[160];
    snprintf(topic, sizeof(topic), "%s.fresh", table);
    ensure_topic(topic);

    struct latency_run L = { .table = table, .rate = rate, .seconds = 1800 };
    long base_id = pg_int(c, "SELECT max(\"id\") FROM \"public\".\"%s\"", table);
    pthread_t th = latency_listen(&L, topic);
    long cap = L.n;

    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT \"public\".\"%s_enqueue\"('fresh', ($1::int %% 50)::text, 'Fresh', "
             "jsonb_build_object('fresh', true, 'seq', $1::int))",
             table);
    struct relay_proc p = relay_start(table, NULL);
    double t0 = now_s();
    long n = 0;
    for (; n < cap - 16; n++) {
        sleep_s(t0 + (double)n / rate - now_s());
        /* Until the backlog (ids up to base_id) is sent. */
        if (n % 10 == 0 && pg_int(c, "SELECT count(*) FROM (SELECT 1 FROM \"public\".\"%s\" WHERE "
                                     "\"sent_at\" IS NULL AND \"id\" <= %ld LIMIT 1) s",
                                  table, base_id) == 0)
            break;
        L.commit[n] = enqueue_seq(c, sql, n);
    }
    res.drain_seconds = now_s() - p.started;
    latency_collect(&L, th, n, 30.0);
    relay_stop(&p);
    latency_take(&res.lat, &L, n);
    res.lat.rate = rate;
    res.lat.events = n;
    res.lat.achieved_rate = (double)n / res.drain_seconds;
    return res;
}

/* ---- rounds: the headline ratios, again ----------------------------------- */

/* The minimal floor, both peers and both drains (mark, delete), each on a
 * fresh table, once per round, in an order rotated from round to round. One
 * sample of each can be off by a third on a shared machine (a neighbour, a
 * checkpoint): a ratio of two single samples carries both errors, so each
 * round's ratios are taken within the round, and the targets are checked
 * against their median. */
#define ROUNDS_MAX 8
enum { R_FLOOR, R_PEER_MIN, R_PEER_SAME, R_MARK, R_DELETE, R_N };
static const char *const round_names[R_N] = {
    "minimal_floor", "peer_minimal", "peer_same_messages", "mark", "delete",
};
struct rounds {
    int n;
    double v[R_N][ROUNDS_MAX]; /* rows/s */
};

/* num / den of every round into @p each; @return their median. */
static double rounds_ratio(const struct rounds *R, int num, int den, double *each)
{
    for (int i = 0; i < R->n; i++)
        each[i] = R->v[num][i] / R->v[den][i];
    return median(each, R->n);
}

static void rounds_json_list(FILE *o, const char *name, const double *v, int n, int digits)
{
    fprintf(o, "\"%s\": [", name);
    for (int i = 0; i < n; i++)
        fprintf(o, "%s%.*f", i ? ", " : "", digits, v[i]);
    fprintf(o, "]");
}

static const struct { int num, den; const char *name, *line; } round_ratios[] = {
    { R_MARK, R_PEER_MIN, "mark_per_peer_minimal", "mark / minimal peer" },
    { R_MARK, R_PEER_SAME, "mark_per_peer_same_messages", "mark / same-messages peer" },
    { R_DELETE, R_PEER_MIN, "delete_per_peer_minimal", "delete / minimal peer" },
    { R_DELETE, R_PEER_SAME, "delete_per_peer_same_messages", "delete / same-messages peer" },
    { R_MARK, R_FLOOR, "mark_per_minimal_floor", "mark / minimal floor" },
};
#define N_ROUND_RATIOS (int)(sizeof(round_ratios) / sizeof(round_ratios[0]))

static void rounds_json(FILE *o, const struct rounds *R)
{
    double each[ROUNDS_MAX];
    fprintf(o, "  \"rounds\": {\"n\": %d", R->n);
    for (int k = 0; k < R_N; k++) {
        char name[64];
        snprintf(name, sizeof(name), "%s_rows_per_s", round_names[k]);
        fprintf(o, ", ");
        rounds_json_list(o, name, R->v[k], R->n, 0);
        fprintf(o, ", \"%s_median\": %.0f", name, median(R->v[k], R->n));
    }
    for (int k = 0; k < N_ROUND_RATIOS; k++) {
        double m = rounds_ratio(R, round_ratios[k].num, round_ratios[k].den, each);
        fprintf(o, ", \"%s\": {", round_ratios[k].name);
        rounds_json_list(o, "each", each, R->n, 3);
        fprintf(o, ", \"median\": %.3f}", m);
    }
    fprintf(o, "},\n");
}

static void rounds_line(const struct rounds *R)
{
    double each[ROUNDS_MAX];
    fprintf(stderr, "%d round(s) of the minimal floor, both peers and both drains, order rotated; "
                    "rows/s, then each ratio within its round:\n", R->n);
    for (int k = 0; k < R_N; k++) {
        fprintf(stderr, "  %-28s", round_names[k]);
        for (int i = 0; i < R->n; i++)
            fprintf(stderr, " %7.0f", R->v[k][i]);
        fprintf(stderr, "   median %7.0f\n", median(R->v[k], R->n));
    }
    for (int k = 0; k < N_ROUND_RATIOS; k++) {
        double m = rounds_ratio(R, round_ratios[k].num, round_ratios[k].den, each);
        fprintf(stderr, "  %-28s", round_ratios[k].line);
        for (int i = 0; i < R->n; i++)
            fprintf(stderr, " %7.2f", each[i]);
        fprintf(stderr, "   median %7.2f\n", m);
    }
}

/* ---- report -------------------------------------------------------------- */

/* Whether PostgreSQL flushes each commit to disk (the test stack turns that
 * off for speed; tests/bench/run --durable turns it on). */
static bool pg_durable(PGconn *c)
{
    return pg_int(c, "SELECT (current_setting('fsync')::bool AND current_setting('full_page_writes')"
                     "::bool AND current_setting('synchronous_commit') <> 'off')::int") == 1;
}

static void machine_json(FILE *o, bool durable)
{
    char model[256] = "unknown", line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                snprintf(model, sizeof(model), "%s", p + 2);
                model[strcspn(model, "\n")] = '\0';
            }
            break;
        }
    }
    if (f)
        fclose(f);
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    fprintf(o, "  \"machine\": {\"cpus\": %ld, \"cpu\": \"%s\", \"memory_gib\": %.1f, "
               "\"postgresql\": %d, \"postgresql_durable\": %s, \"librdkafka\": \"%s\", "
               "\"broker\": \"%s\"},\n",
            sysconf(_SC_NPROCESSORS_ONLN), model,
            (double)pages * (double)psize / (1024.0 * 1024 * 1024), PQlibVersion(),
            durable ? "true" : "false", rd_kafka_version_str(), broker_name());
}

static void ratio_json(FILE *o, double v, double by)
{
    if (by > 0)
        fprintf(o, "%.3f", v / by);
    else
        fprintf(o, "null");
}

static void drain_json(FILE *o, const char *name, const struct drain_result *d,
                       const struct drain_result *min_floor, const struct drain_result *wide,
                       const struct drain_result *peer, const struct drain_result *same)
{
    fprintf(o, "  \"%s\": {\"rows\": %ld, \"seconds\": %.3f, \"rows_per_s\": %.0f, ", name,
            d->rows, d->seconds, d->rows_per_s);
    if (d->peak_rss_mb >= 0)
        fprintf(o, "\"peak_rss_mb\": %.1f, \"cpu_s_per_100k\": %.3f, ", d->peak_rss_mb,
                d->cpu_s * 100000.0 / (double)d->rows);
    if (d->pg_cpu_s >= 0)
        fprintf(o, "\"postgres_cpu_s_per_100k\": %.3f, \"postgres_busy\": %.2f, ",
                d->pg_cpu_s * 100000.0 / (double)d->rows, d->pg_cpu_s / d->seconds);
    if (d->machine_busy >= 0)
        fprintf(o, "\"machine_busy\": %.2f, ", d->machine_busy);
    if (min_floor) {
        fprintf(o, "\"vs_minimal_floor\": ");
        ratio_json(o, d->rows_per_s, min_floor->rows_per_s);
        fprintf(o, ", \"vs_wide_floor\": ");
        ratio_json(o, d->rows_per_s, wide->rows_per_s);
        fprintf(o, ", \"vs_peer_minimal\": ");
        ratio_json(o, d->rows_per_s, peer->rows_per_s);
        fprintf(o, ", \"vs_peer_same_messages\": ");
        ratio_json(o, d->rows_per_s, same->rows_per_s);
        fprintf(o, ", ");
    }
    fprintf(o, "\"batch\": 1000},\n");
}

/* ---- scenario: verify and replay on the drained table ---------------------- */

/* The memory each command is documented to stay within (docs/consumers.md, verify and
 * replay): verify holds one slice of rows, about 100 bytes each, on top of
 * its libraries and a bounded prefetch; replay holds one page of 1,000 rows
 * whatever the range. */
static double verify_bound_mb(long slice_rows)
{
    return 32.0 + (double)slice_rows * 100.0 / 1e6;
}

#define REPLAY_BOUND_MB 32.0

struct tool_result {
    long rows;
    long slice_rows; /* verify only */
    double rows_per_s;
    double peak_rss_mb;
    double bound_mb;
    long messages;             /* verify: rows found in Kafka */
    long truncated_partitions; /* verify: partitions whose log starts after the window */
};

struct verify_totals {
    long messages, mismatched, out_of_order, duplicates, truncated_partitions;
};

/* verify --json's report in @p path (its output and log): its totals and how many partitions began
 * after the window. @return false when there is no report to read. */
static bool verify_report(const char *path, struct verify_totals *t)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Its log lines (stderr) share the file: the report is the line that
     * opens an object. */
    const char *js = buf[0] == '{' ? buf : strstr(buf, "\n{");
    cJSON *root = js ? cJSON_Parse(js) : NULL;
    const cJSON *total = cJSON_GetObjectItemCaseSensitive(root, "total");
    if (!cJSON_IsObject(total)) {
        cJSON_Delete(root);
        return false;
    }
    const char *names[] = { "messages", "mismatched", "out_of_order", "duplicates" };
    long *into[] = { &t->messages, &t->mismatched, &t->out_of_order, &t->duplicates };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(total, names[i]);
        *into[i] = cJSON_IsNumber(v) ? (long)v->valuedouble : -1;
    }
    const cJSON *tp = cJSON_GetObjectItemCaseSensitive(root, "truncated_partitions");
    t->truncated_partitions = cJSON_IsNumber(tp) ? (long)tp->valuedouble : 0;
    cJSON_Delete(root);
    return true;
}

static struct tool_result verify_run(const char *table, long rows, long slice_rows)
{
    const char *argv[24];
    int n = 0;
    argv[n++] = relay_bin;
    argv[n++] = "verify";
    base_args(argv, &n, table);
    char slice[32];
    snprintf(slice, sizeof(slice), "%ld", slice_rows);
    argv[n++] = "--slice-rows";
    argv[n++] = slice;
    argv[n++] = "--json";
    argv[n] = NULL;
    char log[512];
    snprintf(log, sizeof(log), "%s/verify-%s-%ld.json", workdir, table, slice_rows);
    struct cmd_cost c = run_measured(argv, log);
    struct verify_totals v;
    if (!verify_report(log, &v))
        die("verify of %s wrote no report (%s)", table, log);
    struct tool_result t = { .rows = rows, .slice_rows = slice_rows,
                             .rows_per_s = (double)rows / c.seconds, .peak_rss_mb = c.peak_rss_mb,
                             .bound_mb = verify_bound_mb(slice_rows), .messages = v.messages,
                             .truncated_partitions = v.truncated_partitions };
    /* A drain the relay finished must verify clean: anything else is a bug,
     * not a figure. One exception: librdkafka's mock cluster keeps only the
     * last few MB of each partition, so after a large drain verify reports
     * the rows sent before that as missing, and says why (truncated
     * partitions). Nothing else may be wrong. */
    bool mock_truncated = broker_is_mock() && v.truncated_partitions > 0 &&
                          v.mismatched == 0 && v.out_of_order == 0 && v.duplicates == 0;
    if (c.status != 0 && !(c.status == 1 && mock_truncated))
        die("verify of %s exited %d (see %s)", table, c.status, log);
    return t;
}

static struct tool_result replay_run(PGconn *pc, const char *table, long rows)
{
    char from[32], to[32];
    snprintf(from, sizeof(from), "%lld",
             pg_int(pc, "SELECT min(\"id\") FROM \"public\".\"%s\"", table));
    snprintf(to, sizeof(to), "%lld",
             pg_int(pc, "SELECT max(\"id\") FROM \"public\".\"%s\"", table));
    const char *argv[24];
    int n = 0;
    argv[n++] = relay_bin;
    argv[n++] = "replay";
    base_args(argv, &n, table);
    argv[n++] = "--from-id";
    argv[n++] = from;
    argv[n++] = "--to-id";
    argv[n++] = to;
    /* A side topic, as when rebuilding a consumer: the relay's topic keeps
     * exactly one copy of each row for the verify above. */
    argv[n++] = "--topic";
    argv[n++] = "bench_replay";
    argv[n] = NULL;
    char log[512];
    snprintf(log, sizeof(log), "%s/replay-%s.log", workdir, table);
    struct cmd_cost c = run_measured(argv, log);
    if (c.status != 0)
        die("replay of %s exited %d (see %s)", table, c.status, log);
    return (struct tool_result){ .rows = rows, .rows_per_s = (double)rows / c.seconds,
                                 .peak_rss_mb = c.peak_rss_mb, .bound_mb = REPLAY_BOUND_MB };
}

static void tool_json(FILE *o, const char *name, const struct tool_result *t)
{
    fprintf(o, "  \"%s\": {\"rows\": %ld, ", name, t->rows);
    if (t->slice_rows)
        fprintf(o, "\"slice_rows\": %ld, ", t->slice_rows);
    if (t->slice_rows)
        fprintf(o, "\"found_in_kafka\": %ld, \"truncated_partitions\": %ld, ", t->messages,
                t->truncated_partitions);
    fprintf(o, "\"rows_per_s\": %.0f, \"peak_rss_mb\": %.1f, \"bound_mb\": %.1f},\n",
            t->rows_per_s, t->peak_rss_mb, t->bound_mb);
}

static const char *jbool(int v)
{
    return v < 0 ? "null" : v ? "true" : "false";
}

static const struct latency_result *at_rate(const struct latency_result *lat, int n, int rate)
{
    for (int i = 0; i < n; i++)
        if (lat[i].rate == rate)
            return &lat[i];
    return NULL;
}

static struct latency_floor floor_figures(struct latency_result r)
{
    return (struct latency_floor){ .events = r.events, .received = r.received,
                                   .achieved_rate = r.achieved_rate, .p50_ms = r.p50_ms,
                                   .p99_ms = r.p99_ms, .max_ms = r.max_ms,
                                   .machine_busy = r.machine_busy };
}

/* Whether the relay runs with relay.fencing=none (--relay-opt): then its
 * floor is Kafka's without transactions. */
static bool relay_unfenced(void)
{
    for (int i = 0; i < n_relay_opts; i++)
        if (!strcmp(relay_opts[i], "relay.fencing=none"))
            return true;
    return false;
}

static const struct latency_floor *own_floor(const struct latency_result *l)
{
    return relay_unfenced() ? &l->floor_none : &l->floor_txn;
}

/* Whether the figures @p f meet the latency target at @p rate: p99 <= 10 ms,
 * and at 1,000/s p50 <= 2 ms too; -1 when @p f is NULL or not measured. */
static int latency_target(const struct latency_floor *f, int rate)
{
    if (!f || !f->events)
        return -1;
    return f->p99_ms <= 10 && (rate != 1000 || f->p50_ms <= 2);
}

/* How long a broker that is not the mock carries transactions before the
 * latency runs: a JVM broker answers its first minute of them several times
 * slower (Apache Kafka 3.9, one node, four runs in a row at 1,000 events/s:
 * Kafka's own p50 47, 37, 26, 19 ms, the relay's 105, 35, 26, 16 ms). */
#define WARMUP_SECONDS 60

/* The latency scenario at each rate of @p rates ("1000,5000"), into @p lat
 * (at most 8). @return how many ran. */
static int latencies(PGconn *c, char *rates, double seconds, struct latency_result *lat)
{
    int n = 0;
    if (!broker_is_mock()) {
        char warm[64];
        snprintf(warm, sizeof(warm), "bench_kafka_warmup_%d", (int)getpid());
        fprintf(stderr, "bench: %d s of transactions to warm the broker up\n", WARMUP_SECONDS);
        (void)kafka_floor(warm, 1000, WARMUP_SECONDS, true, NULL, NULL);
    }
    for (char *save = NULL, *tok = strtok_r(rates, ",", &save); tok && n < 8;
         tok = strtok_r(NULL, ",", &save)) {
        int rate = atoi(tok);
        fprintf(stderr, "bench: latency at %d events/s for %.0f s\n", rate, seconds);
        /* A topic of its own for every run: the mock finds a fetch's offset by
         * walking the partition's message sets from the oldest, so a topic that
         * earlier runs filled makes every later fetch slower. */
        char table[64], txn[64], none[64], loaded[64], load[64];
        snprintf(table, sizeof(table), "bench_latency_%d_%d", rate, (int)getpid());
        snprintf(txn, sizeof(txn), "bench_kafka_txn_%d_%d", rate, (int)getpid());
        snprintf(none, sizeof(none), "bench_kafka_none_%d_%d", rate, (int)getpid());
        snprintf(loaded, sizeof(loaded), "bench_kafka_loaded_%d_%d", rate, (int)getpid());
        snprintf(load, sizeof(load), "bench_load_%d_%d", rate, (int)getpid());
        lat[n] = latency(c, table, rate, seconds);
        drop(c, table);
        fprintf(stderr, "bench: Kafka's own latency at %d events/s, with and without "
                        "transactions, and under the writers' load\n", rate);
        lat[n].floor_txn = floor_figures(kafka_floor(txn, rate, seconds, true, NULL, NULL));
        lat[n].floor_none = floor_figures(kafka_floor(none, rate, seconds, false, NULL, NULL));
        /* The best any relay with this fencing could do on this machine
         * while the writers load it as they loaded the relay's run. */
        lat[n].floor_loaded =
            floor_figures(kafka_floor(loaded, rate, seconds, !relay_unfenced(), c, load));
        n++;
    }
    return n;
}

static void latency_line(const struct latency_result *l)
{
    fprintf(stderr, "latency @%5d/s: p50 %.2f ms  p99 %.2f ms  max %.2f ms  (%ld/%ld received; "
                    "%.0f/s achieved by %d writer%s; %ld NOTIFYs; machine %.0f%% busy)\n",
            l->rate, l->p50_ms, l->p99_ms, l->max_ms, l->received, l->events, l->achieved_rate,
            l->writers, l->writers > 1 ? "s" : "", l->notifies, 100.0 * l->machine_busy);
    const struct latency_floor *f[] = { &l->floor_txn, &l->floor_none, &l->floor_loaded };
    const char *name[] = { "with transactions", "idempotent only",
                           relay_unfenced() ? "idem., writers on" : "txns, writers on" };
    for (int i = 0; i < 3; i++)
        if (f[i]->events)
            fprintf(stderr, "  Kafka alone %-17s p50 %.2f ms  p99 %.2f ms  max %.2f ms  (%.0f/s; "
                            "machine %.0f%% busy)\n",
                    name[i], f[i]->p50_ms, f[i]->p99_ms, f[i]->max_ms, f[i]->achieved_rate,
                    100.0 * f[i]->machine_busy);
}

static void floor_json(FILE *o, const char *name, const struct latency_floor *f)
{
    fprintf(o, "\"%s\": {\"achieved_rate\": %.0f, \"events\": %ld, \"received\": %ld, "
               "\"p50_ms\": %.2f, \"p99_ms\": %.2f, \"max_ms\": %.2f, \"machine_busy\": %.2f}",
            name, f->achieved_rate, f->events, f->received, f->p50_ms, f->p99_ms, f->max_ms,
            f->machine_busy);
}

static void latency_json(FILE *o, const struct latency_result *lat, int n)
{
    fprintf(o, "  \"latency\": [");
    for (int i = 0; i < n; i++) {
        fprintf(o, "%s\n    {\"rate\": %d, \"achieved_rate\": %.0f, \"writers\": %d, "
                   "\"events\": %ld, \"received\": %ld, \"p50_ms\": %.2f, \"p99_ms\": %.2f, "
                   "\"max_ms\": %.2f, \"notifies\": %ld, \"machine_busy\": %.2f",
                i ? "," : "", lat[i].rate, lat[i].achieved_rate, lat[i].writers, lat[i].events,
                lat[i].received, lat[i].p50_ms, lat[i].p99_ms, lat[i].max_ms, lat[i].notifies,
                lat[i].machine_busy);
        const struct latency_floor *own = own_floor(&lat[i]);
        if (own->events) {
            /* What the database, the wake-up and the relay add to Kafka's own. */
            fprintf(o, ", \"kafka_floor\": {");
            floor_json(o, "transactional", &lat[i].floor_txn);
            fprintf(o, ", ");
            floor_json(o, "none", &lat[i].floor_none);
            fprintf(o, ", ");
            floor_json(o, "under_writers", &lat[i].floor_loaded);
            fprintf(o, "}, \"over_kafka_floor\": {\"fencing\": \"%s\", \"p50_ms\": %.2f, "
                       "\"p99_ms\": %.2f}",
                    relay_unfenced() ? "none" : "transactional", lat[i].p50_ms - own->p50_ms,
                    lat[i].p99_ms - own->p99_ms);
        }
        fprintf(o, "}");
    }
    fprintf(o, "\n  ]");
}

int main(int argc, char **argv)
{
    long rows = 1000000, cost_small = 100000, lt_rows = -1, start_rows = -1, fresh_rows = -1;
    int aggregates = 5000, start_runs = 3, fresh_rate = 100, n_rounds = 1;
    double lat_seconds = 10;
    char rates_arg[64] = "1000,5000";
    bool latency_only = false;
    static const struct option opts[] = {
        { "relay", required_argument, NULL, 'r' },
        { "peers", required_argument, NULL, 'p' },
        { "rows", required_argument, NULL, 'n' },
        { "aggregates", required_argument, NULL, 'a' },
        { "latency-seconds", required_argument, NULL, 's' },
        { "rates", required_argument, NULL, 'R' },
        { "long-txn-rows", required_argument, NULL, 'L' },
        { "fresh-rate", required_argument, NULL, 'F' },
        { "smoke", no_argument, NULL, 'S' },
        { "relay-opt", required_argument, NULL, 'X' },
        { "latency-only", no_argument, NULL, 'l' },
        { "rounds", required_argument, NULL, 'N' },
        { NULL, 0, NULL, 0 },
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'r': relay_bin = optarg; break;
        case 'p': peer_dir = optarg; break;
        case 'n': rows = strtol(optarg, NULL, 10); break;
        case 'a': aggregates = atoi(optarg); break;
        case 's': lat_seconds = strtod(optarg, NULL); break;
        case 'L': lt_rows = strtol(optarg, NULL, 10); break;
        case 'F': fresh_rate = atoi(optarg); break;
        case 'X':
            if (n_relay_opts < 16)
                relay_opts[n_relay_opts++] = optarg;
            break;
        case 'R': snprintf(rates_arg, sizeof(rates_arg), "%s", optarg); break;
        case 'l': latency_only = true; break;
        case 'N':
            n_rounds = atoi(optarg);
            if (n_rounds < 1 || n_rounds > ROUNDS_MAX)
                die("--rounds must be 1 to %d", ROUNDS_MAX);
            break;
        case 'S':
            rows = 5000;
            cost_small = 2000;
            aggregates = 100;
            lat_seconds = 1;
            start_runs = 1;
            snprintf(rates_arg, sizeof(rates_arg), "200");
            break;
        default: die("usage: outbox-relay-bench --relay PATH [--peers DIR] [--rows N] "
                     "[--aggregates N] [--latency-seconds S] [--rates R1,R2] [--long-txn-rows N] "
                     "[--fresh-rate R] [--rounds N] [--smoke] [--latency-only] "
                     "[--relay-opt section.key=value]...");
        }
    }
    pg_conninfo = getenv("OUTBOX_RELAY_TEST_PG");
    kafka_servers = getenv("OUTBOX_RELAY_TEST_KAFKA");
    if (!relay_bin || !pg_conninfo || !kafka_servers)
        die("needs --relay and the stack's OUTBOX_RELAY_TEST_PG / OUTBOX_RELAY_TEST_KAFKA");
    char peer_path[512];
    snprintf(peer_path, sizeof(peer_path), "%s/peer_minimal.py", peer_dir);
    if (access(peer_path, R_OK) != 0)
        die("peer relay %s: %s (--peers DIR)", peer_path, strerror(errno));
    snprintf(workdir, sizeof(workdir), "/tmp/outbox-relay-bench.XXXXXX");
    if (!mkdtemp(workdir))
        die("mkdtemp: %s", strerror(errno));
    if (cost_small > rows)
        cost_small = rows;
    /* With a snapshot held, every claim walks the dead versions of all rows
     * sent so far: the drain is quadratic, so that scenario is kept smaller. */
    if (lt_rows < 0)
        lt_rows = rows < 200000 ? rows : 200000;
    start_rows = rows;
    fresh_rows = rows;

    PGconn *c = pg_open();
    bool durable = pg_durable(c);
    if (latency_only) {
        /* Tuning the latency path needs only its own scenario. */
        struct latency_result lat[8];
        int n_lat = latencies(c, rates_arg, lat_seconds, lat);
        PQfinish(c);
        fprintf(stdout, "{\n");
        machine_json(stdout, durable);
        latency_json(stdout, lat, n_lat);
        fprintf(stdout, "\n}\n");
        for (int i = 0; i < n_lat; i++)
            latency_line(&lat[i]);
        fprintf(stderr, "logs: %s\n", workdir);
        return 0;
    }
    /* Floors and peer first, then the relay: all on identical fresh tables. */
    fprintf(stderr, "bench: minimal SQL floor on %ld rows\n", rows);
    struct drain_result fl_min = minimal_floor(c, "bench_floor_min", rows, aggregates, 1000);
    fprintf(stderr, "bench: wide SQL floor on %ld rows\n", rows);
    struct drain_result fl_wide = wide_floor(c, "bench_floor", rows, aggregates, 1000);
    fprintf(stderr, "bench: minimal peer (Python, two headers) on %ld rows\n", rows);
    struct drain_opts peer_o = { .runner = RUN_PEER_MINIMAL };
    struct drain_result peer = drain(c, "bench_peer", rows, aggregates, &peer_o);
    fprintf(stderr, "bench: same-messages peer (Python, the relay's messages) on %ld rows\n", rows);
    struct drain_opts same_o = { .runner = RUN_PEER_SAME };
    struct drain_result peer_same = drain(c, "bench_peer_same", rows, aggregates, &same_o);
    fprintf(stderr, "bench: drain of %ld rows (relay, on_sent=mark)\n", rows);
    struct drain_opts mark_o = { .runner = RUN_RELAY };
    struct drain_result d_mark = drain(c, "bench_drain", rows, aggregates, &mark_o);
    /* verify and replay read what that drain wrote, before the table goes. */
    long small_slice = rows < 100000 ? rows : 100000;
    fprintf(stderr, "bench: verify of %ld rows, slices of %ld and %d\n", rows, small_slice,
            500000);
    struct tool_result v_small = verify_run("bench_drain", rows, small_slice);
    struct tool_result v_default = verify_run("bench_drain", rows, 500000);
    fprintf(stderr, "bench: replay of %ld rows to a side topic\n", rows);
    struct tool_result rp = replay_run(c, "bench_drain", rows);
    fprintf(stderr, "bench: drain of %ld rows (relay, on_sent=delete)\n", rows);
    const char *del[] = { "relay.on_sent=delete", NULL };
    struct drain_opts del_o = { .runner = RUN_RELAY, .extra = del, .deleting = true };
    struct drain_result d_del = drain(c, "bench_drain_del", rows, aggregates, &del_o);
    fprintf(stderr, "bench: cost with a %ld-row backlog\n", cost_small);
    struct drain_result d_small = drain(c, "bench_cost", cost_small, aggregates, &mark_o);

    fprintf(stderr, "bench: start-up with a %ld-row backlog, %d run(s)\n", start_rows, start_runs);
    struct startup_result su = startup(c, "bench_start", start_rows, aggregates, start_runs);
    fprintf(stderr, "bench: fresh events at %d/s behind a %ld-row backlog\n", fresh_rate,
            fresh_rows);
    struct fresh_result fr = fresh_behind_backlog(c, "bench_fresh", fresh_rows, aggregates,
                                                  fresh_rate);
    fprintf(stderr, "bench: drain of %ld rows without and with a REPEATABLE READ snapshot held\n",
            lt_rows);
    struct claim_plan plan_free, plan_held;
    struct drain_opts lt0_o = { .runner = RUN_RELAY, .plan = &plan_free };
    struct drain_result lt_free = drain(c, "bench_lt_free", lt_rows, aggregates, &lt0_o);
    struct drain_opts lt1_o = { .runner = RUN_RELAY, .hold = true, .plan = &plan_held };
    struct drain_result lt_held = drain(c, "bench_lt_held", lt_rows, aggregates, &lt1_o);

    struct rounds rounds = { .n = 1 };
    const struct drain_result *first[R_N] = { &fl_min, &peer, &peer_same, &d_mark, &d_del };
    for (int k = 0; k < R_N; k++)
        rounds.v[k][0] = first[k]->rows_per_s;
    for (int i = 1; i < n_rounds; i++) {
        fprintf(stderr, "bench: round %d of %d: minimal floor, both peers, both drains, from "
                        "the %s\n", i + 1, n_rounds, round_names[i % R_N]);
        for (int j = 0; j < R_N; j++) {
            int k = (i + j) % R_N; /* rotated: each round starts with the next scenario */
            struct drain_result d =
                k == R_FLOOR      ? minimal_floor(c, "bench_floor_min", rows, aggregates, 1000)
                : k == R_PEER_MIN ? drain(c, "bench_peer", rows, aggregates, &peer_o)
                : k == R_PEER_SAME ? drain(c, "bench_peer_same", rows, aggregates, &same_o)
                : k == R_MARK     ? drain(c, "bench_drain", rows, aggregates, &mark_o)
                                  : drain(c, "bench_drain_del", rows, aggregates, &del_o);
            rounds.v[k][i] = d.rows_per_s;
        }
        rounds.n++;
    }

    struct latency_result lat[8];
    int n_lat = latencies(c, rates_arg, lat_seconds, lat);
    const char *tables[] = { "bench_floor_min", "bench_floor", "bench_peer", "bench_peer_same", "bench_drain",
                             "bench_drain_del", "bench_cost", "bench_start", "bench_fresh",
                             "bench_lt_free", "bench_lt_held" };
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
        drop(c, tables[i]);
    PQfinish(c);

    /* JSON on stdout. */
    FILE *o = stdout;
    double growth = (d_mark.peak_rss_mb - d_small.peak_rss_mb) / d_small.peak_rss_mb * 100.0;
    fprintf(o, "{\n");
    machine_json(o, durable);
    drain_json(o, "minimal_floor", &fl_min, NULL, NULL, NULL, NULL);
    drain_json(o, "wide_floor", &fl_wide, NULL, NULL, NULL, NULL);
    drain_json(o, "peer_minimal", &peer, NULL, NULL, NULL, NULL);
    drain_json(o, "peer_same_messages", &peer_same, NULL, NULL, NULL, NULL);
    drain_json(o, "drain", &d_mark, &fl_min, &fl_wide, &peer, &peer_same);
    drain_json(o, "drain_on_sent_delete", &d_del, &fl_min, &fl_wide, &peer, &peer_same);
    tool_json(o, "verify", &v_small);
    tool_json(o, "verify_default_slice", &v_default);
    tool_json(o, "replay", &rp);
    rounds_json(o, &rounds);
    latency_json(o, lat, n_lat);
    fprintf(o, ",\n");
    fprintf(o, "  \"startup\": {\"backlog_rows\": %ld, \"runs\": %d, "
               "\"start_to_leader_ms\": {\"median\": %.1f, \"max\": %.1f}, "
               "\"leader_to_first_received_ms\": {\"median\": %.1f, \"max\": %.1f}, "
               "\"leader_to_first_marked_ms\": {\"median\": %.1f, \"max\": %.1f}},\n",
            su.backlog, su.runs, median(su.start_to_leader_ms, su.runs),
            maximum(su.start_to_leader_ms, su.runs), median(su.leader_to_received_ms, su.runs),
            maximum(su.leader_to_received_ms, su.runs), median(su.leader_to_marked_ms, su.runs),
            maximum(su.leader_to_marked_ms, su.runs));
    fprintf(o, "  \"fresh_behind_backlog\": {\"backlog_rows\": %ld, \"rate\": %d, "
               "\"drain_seconds\": %.2f, \"events\": %ld, \"received\": %ld, \"p50_ms\": %.0f, "
               "\"p99_ms\": %.0f, \"max_ms\": %.0f},\n",
            fr.backlog, fr.rate, fr.drain_seconds, fr.lat.events, fr.lat.received,
            fr.lat.p50_ms, fr.lat.p99_ms, fr.lat.max_ms);
    fprintf(o, "  \"long_transaction\": {\"rows\": %ld, \"without\": {\"rows_per_s\": %.0f, "
               "\"claim_ms_after\": %.2f, \"claim_buffers_after\": %ld}, \"with_snapshot_held\": "
               "{\"rows_per_s\": %.0f, \"claim_ms_after\": %.2f, \"claim_buffers_after\": %ld}, "
               "\"ratio\": %.3f},\n",
            lt_rows, lt_free.rows_per_s, plan_free.ms, plan_free.buffers, lt_held.rows_per_s,
            plan_held.ms, plan_held.buffers, lt_held.rows_per_s / lt_free.rows_per_s);
    fprintf(o, "  \"cost\": {\"small_backlog\": {\"rows\": %ld, \"peak_rss_mb\": %.1f, "
               "\"cpu_s_per_100k\": %.3f}, \"large_backlog\": {\"rows\": %ld, \"peak_rss_mb\": "
               "%.1f, \"cpu_s_per_100k\": %.3f}, \"rss_growth_pct\": %.1f},\n",
            d_small.rows, d_small.peak_rss_mb, d_small.cpu_s * 100000.0 / (double)d_small.rows,
            d_mark.rows, d_mark.peak_rss_mb, d_mark.cpu_s * 100000.0 / (double)d_mark.rows, growth);
    const struct latency_result *l1k = at_rate(lat, n_lat, 1000), *l5k = at_rate(lat, n_lat, 5000);
    struct latency_floor relay1k = l1k ? floor_figures(*l1k) : (struct latency_floor){ 0 };
    struct latency_floor relay5k = l5k ? floor_figures(*l5k) : (struct latency_floor){ 0 };
    double first_ms = median(su.leader_to_received_ms, su.runs);
    double each[ROUNDS_MAX];
    double mark_per_floor = rounds_ratio(&rounds, R_MARK, R_FLOOR, each);
    double mark_per_peer = rounds_ratio(&rounds, R_MARK, R_PEER_MIN, each);
    double mark_per_same = rounds_ratio(&rounds, R_MARK, R_PEER_SAME, each);
    double delete_per_peer = rounds_ratio(&rounds, R_DELETE, R_PEER_MIN, each);
    fprintf(o, "  \"targets\": {\"mark_ge_1.5_minimal_peer\": %s, "
               "\"mark_ge_1.3_same_messages_peer\": %s, \"mark_ge_1.0_minimal_floor\": %s, "
               "\"delete_ge_2_minimal_peer\": %s, \"latency_1000_p50_le_2ms_p99_le_10ms\": %s, "
               "\"latency_5000_p99_le_10ms\": %s, \"first_event_le_100ms_after_leader\": %s, "
               "\"rss_le_20mb_largest_backlog\": %s, \"verify_within_bound\": %s, "
               "\"replay_within_bound\": %s, "
               /* Whether Kafka alone, with the relay's fencing, meets the latency
                * targets in this run: when it does not, no relay can. */
               "\"kafka_floor_1000_p50_le_2ms_p99_le_10ms\": %s, "
               "\"kafka_floor_5000_p99_le_10ms\": %s, "
               /* ...and while the writers load the machine as in the relay's run. */
               "\"kafka_floor_under_writers_1000_p50_le_2ms_p99_le_10ms\": %s, "
               "\"kafka_floor_under_writers_5000_p99_le_10ms\": %s}\n}\n",
            jbool(mark_per_peer >= 1.5), jbool(mark_per_same >= 1.3), jbool(mark_per_floor >= 1.0),
            jbool(delete_per_peer >= 2.0),
            jbool(latency_target(&relay1k, 1000)), jbool(latency_target(&relay5k, 5000)),
            jbool(first_ms <= 100),
            jbool(d_mark.peak_rss_mb <= 20),
            jbool(v_small.peak_rss_mb <= v_small.bound_mb &&
                  v_default.peak_rss_mb <= v_default.bound_mb),
            jbool(rp.peak_rss_mb <= rp.bound_mb),
            jbool(latency_target(l1k ? own_floor(l1k) : NULL, 1000)),
            jbool(latency_target(l5k ? own_floor(l5k) : NULL, 5000)),
            jbool(latency_target(l1k ? &l1k->floor_loaded : NULL, 1000)),
            jbool(latency_target(l5k ? &l5k->floor_loaded : NULL, 5000)));

    /* The short table for people, on stderr. */
    fprintf(stderr, "\nbroker: %s; PostgreSQL %s; %ld rows, batches of 1000\n", broker_name(),
            durable ? "durable (fsync, synchronous_commit on)" : "fsync off", rows);
    fprintf(stderr, "%-34s %9s %9s %9s %9s\n", "drain (first round)", "rows/s", "/min.fl",
            "/min.peer", "/same.peer");
    const struct drain_result *rowv[] = { &fl_min, &fl_wide, &peer, &peer_same, &d_mark, &d_del };
    const char *rown[] = { "minimal SQL floor (PL/pgSQL)", "wide SQL floor (PL/pgSQL)",
                           "minimal peer (Python)", "same-messages peer (Python)",
                           "relay, on_sent=mark", "relay, on_sent=delete" };
    for (int i = 0; i < 6; i++)
        fprintf(stderr, "%-34s %9.0f %9.2f %9.2f %9.2f\n", rown[i], rowv[i]->rows_per_s,
                rowv[i]->rows_per_s / fl_min.rows_per_s, rowv[i]->rows_per_s / peer.rows_per_s,
                rowv[i]->rows_per_s / peer_same.rows_per_s);
    fprintf(stderr, "PostgreSQL CPU s per 100k rows (share of the drain it was busy):");
    const struct drain_result *pgs[] = { &fl_min, &fl_wide, &peer, &peer_same, &d_mark, &d_del };
    const char *pgn[] = { "minimal floor", "wide floor", "minimal peer", "same-messages peer",
                          "mark", "delete" };
    for (int i = 0; i < 6; i++)
        if (pgs[i]->pg_cpu_s >= 0)
            fprintf(stderr, "%s %s %.2f (%.0f%%)", i ? ";" : "", pgn[i],
                    pgs[i]->pg_cpu_s * 100000.0 / (double)pgs[i]->rows,
                    100.0 * pgs[i]->pg_cpu_s / pgs[i]->seconds);
    fprintf(stderr, "\nmachine busy (all cores, everything on it):");
    for (int i = 0; i < 6; i++)
        fprintf(stderr, "%s %s %.0f%%", i ? ";" : "", pgn[i], 100.0 * pgs[i]->machine_busy);
    fprintf(stderr, "\n");
    rounds_line(&rounds);
    for (int i = 0; i < n_lat; i++)
        latency_line(&lat[i]);
    fprintf(stderr, "start-up (%ld-row backlog, median of %d): start → leader %.0f ms; leader → "
                    "first received %.0f ms (max %.0f), first marked %.0f ms\n",
            su.backlog, su.runs, median(su.start_to_leader_ms, su.runs), first_ms,
            maximum(su.leader_to_received_ms, su.runs), median(su.leader_to_marked_ms, su.runs));
    fprintf(stderr, "fresh events at %d/s behind a %ld-row backlog (drained in %.1f s): p50 %.0f ms "
                    " p99 %.0f ms  max %.0f ms (%ld/%ld received)\n",
            fr.rate, fr.backlog, fr.drain_seconds, fr.lat.p50_ms, fr.lat.p99_ms, fr.lat.max_ms,
            fr.lat.received, fr.lat.events);
    fprintf(stderr, "snapshot held, %ld rows: %.0f rows/s vs %.0f without (%.2f); claim after: "
                    "%.1f ms / %ld buffers vs %.1f ms / %ld\n",
            lt_rows, lt_held.rows_per_s, lt_free.rows_per_s,
            lt_held.rows_per_s / lt_free.rows_per_s, plan_held.ms, plan_held.buffers,
            plan_free.ms, plan_free.buffers);
    fprintf(stderr, "peak RSS: %.1f MB (%ld rows)  %.1f MB (%ld rows)  growth %.1f%%\n",
            d_small.peak_rss_mb, d_small.rows, d_mark.peak_rss_mb, d_mark.rows, growth);
    for (int i = 0; i < 3; i++) {
        const struct tool_result *t = i == 0 ? &v_small : i == 1 ? &v_default : &rp;
        char what[64];
        if (t->slice_rows)
            snprintf(what, sizeof(what), "verify, slices of %ld", t->slice_rows);
        else
            snprintf(what, sizeof(what), "replay");
        fprintf(stderr, "%-26s %ld rows: %.0f rows/s, peak RSS %.1f MB (bound %.0f MB)", what,
                t->rows, t->rows_per_s, t->peak_rss_mb, t->bound_mb);
        if (t->truncated_partitions > 0)
            fprintf(stderr, "; %ld found in Kafka (the mock kept only the end of its partitions)",
                    t->messages);
        fprintf(stderr, "\n");
    }
    fprintf(stderr, "CPU s per 100k events: %.3f\n", d_mark.cpu_s * 100000.0 / (double)d_mark.rows);
    fprintf(stderr, "logs and claim plans: %s\n", workdir);
    return 0;
}
