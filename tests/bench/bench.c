/* bench.c — the performance harness of outbox-relay (issue: drain rate
 * against the SQL floor, commit→consumer latency, memory and CPU cost).
 *
 * It drives the real binary against the stack of tests/support/stack.sh
 * (OUTBOX_RELAY_TEST_PG, OUTBOX_RELAY_TEST_KAFKA) and prints one JSON report
 * on stdout and a short table on stderr. Every figure of one report comes
 * from the same run on the same machine: compare ratios, not absolutes.
 *
 *   outbox-relay-bench --relay PATH [--rows N] [--aggregates N]
 *                      [--latency-seconds S] [--rates R1,R2] [--smoke]
 *                      [--relay-opt section.key=value]...   (extra -X for the relay)
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *pg_conninfo;
static const char *kafka_servers;
static const char *relay_bin;
static char workdir[256];
static const char *relay_opts[16]; /* --relay-opt: extra -X for every relay run */
static int n_relay_opts;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* What the figures were measured against: tests/bench/run names it. */
static const char *broker_name(void)
{
    const char *named = getenv("BENCH_BROKER");
    if (named && *named)
        return named;
    return getenv("OUTBOX_RELAY_TEST_MOCK_CONTROL") ? "librdkafka mock cluster" : "external";
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

/* Peak resident memory (VmHWM, bytes) and CPU seconds (user + system). */
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
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    *cpu_s = -1;
    if (f && fgets(line, sizeof(line), f)) {
        /* Fields after the command name in parentheses: utime is the 14th. */
        char *p = strrchr(line, ')');
        unsigned long ut = 0, st = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
            *cpu_s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    }
    if (f)
        fclose(f);
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

/* ---- scenario 1: drain, and the SQL floor -------------------------------- */

struct drain_result {
    long rows;
    double seconds;
    double rows_per_s;
    double peak_rss_mb;
    double cpu_s;
};

static struct drain_result drain(PGconn *c, const char *table, long rows, int aggregates,
                                 const char *const *extra, bool deleting)
{
    drop(c, table);
    migrate(table);
    seed(c, table, rows, aggregates);

    struct drain_result r = { .rows = rows };
    struct relay_proc p = relay_start(table, extra);
    double deadline = p.started + 1800;
    for (;;) {
        long long left = deleting
            ? pg_int(c, "SELECT count(*) FROM (SELECT 1 FROM \"public\".\"%s\" LIMIT 1) s", table)
            : pg_int(c, "SELECT count(*) FROM (SELECT 1 FROM \"public\".\"%s\" WHERE "
                        "\"sent_at\" IS NULL AND \"dead_at\" IS NULL LIMIT 1) s", table);
        if (left == 0)
            break;
        if (now_s() > deadline)
            die("drain of %s did not finish", table);
        int st;
        if (waitpid(p.pid, &st, WNOHANG) == p.pid)
            die("relay exited during the drain of %s (see %s)", table, workdir);
        sleep_s(0.02);
    }
    double end = now_s();
    relay_cost(p.pid, &r.peak_rss_mb, &r.cpu_s);
    relay_stop(&p);
    r.seconds = end - p.started;
    r.rows_per_s = (double)rows / r.seconds;
    if (!deleting) {
        long long unsent = pg_int(c, "SELECT count(*) FROM \"public\".\"%s\" WHERE \"sent_at\" "
                                     "IS NULL", table);
        if (unsent)
            die("%lld rows of %s unsent after the drain", unsent, table);
    }
    return r;
}

/* The same claim and conditional UPDATE as the relay, done entirely inside
 * PostgreSQL: what the database allows with no client and no broker. */
static struct drain_result sql_floor(PGconn *c, const char *table, long rows, int aggregates,
                                     int batch)
{
    drop(c, table);
    migrate(table);
    seed(c, table, rows, aggregates);
    pg_exec(c,
            "CREATE OR REPLACE PROCEDURE \"public\".\"bench_floor\"(p_batch int) LANGUAGE plpgsql "
            "AS $$ DECLARE ids bigint[]; bytes bigint; BEGIN LOOP "
            "SELECT array_agg(s.id), sum(length(s.payload) + length(s.headers)) INTO ids, bytes FROM "
            "(SELECT o.\"id\" AS id, o.\"event_id\"::text AS ev, o.\"payload\"::text AS payload, "
            "coalesce(o.\"headers\"::text, '') AS headers, "
            "floor(extract(epoch FROM o.\"created_at\") * 1000)::bigint AS ms, "
            "to_char(o.\"created_at\" AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS ts "
            "FROM \"public\".\"%s\" AS o WHERE o.\"sent_at\" IS NULL AND o.\"dead_at\" IS NULL "
            "ORDER BY o.\"id\" LIMIT p_batch) s; "
            "EXIT WHEN ids IS NULL; "
            "UPDATE \"public\".\"%s\" SET \"sent_at\" = clock_timestamp() "
            "WHERE \"id\" = ANY(ids) AND \"sent_at\" IS NULL; COMMIT; END LOOP; END $$",
            table, table);
    struct drain_result r = { .rows = rows };
    double t0 = now_s();
    pg_exec(c, "CALL \"public\".\"bench_floor\"(%d)", batch);
    r.seconds = now_s() - t0;
    r.rows_per_s = (double)rows / r.seconds;
    return r;
}

/* ---- scenario 2: latency ------------------------------------------------- */

struct latency_run {
    const char *table;
    int rate;
    double seconds;
    long base_id;           /* ids of this run are base_id + 1 … */
    long n;                 /* events written */
    double *commit;         /* by id - base_id - 1 */
    double *recv;
    volatile bool stop;
    rd_kafka_t *consumer;
};

static void *consume_thread(void *arg)
{
    struct latency_run *L = arg;
    while (!L->stop) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(L->consumer, 50);
        if (!m)
            continue;
        double t = now_s();
        if (!m->err) {
            rd_kafka_headers_t *h = NULL;
            const void *v;
            size_t len;
            if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR &&
                rd_kafka_header_get_last(h, "outbox_id", &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                char buf[32];
                snprintf(buf, sizeof(buf), "%.*s", (int)len, (const char *)v);
                long idx = strtol(buf, NULL, 10) - L->base_id - 1;
                if (idx >= 0 && idx < L->n && L->recv[idx] == 0)
                    L->recv[idx] = t;
            }
        }
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
    double p50_ms, p99_ms, max_ms;
};

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
    L.base_id = pg_int(c, "SELECT max(\"id\") FROM \"public\".\"%s\"", table);
    long cap = (long)(rate * seconds) + 16;
    L.commit = calloc((size_t)cap, sizeof(double));
    L.recv = calloc((size_t)cap, sizeof(double));
    L.n = cap;
    L.consumer = consumer_at_end(topic);
    pthread_t th;
    pthread_create(&th, NULL, consume_thread, &L);
    sleep_s(1.0); /* let the consumer reach the end of every partition */

    char sql[256];
    snprintf(sql, sizeof(sql),
             "SELECT \"public\".\"%s_enqueue\"('order', ($1::int %% 500)::text, 'Ping', "
             "'{\"ping\": true}')",
             table);
    double t0 = now_s();
    long n = 0;
    for (; n < cap - 16; n++) {
        double due = t0 + (double)n / rate;
        if (due > t0 + seconds)
            break;
        sleep_s(due - now_s());
        char arg[24];
        snprintf(arg, sizeof(arg), "%ld", n);
        const char *params[] = { arg };
        PGresult *r = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK)
            die("enqueue: %s", PQresultErrorMessage(r));
        PQclear(r);
        L.commit[n] = now_s(); /* autocommit: the row is committed when this returns */
    }
    double t1 = now_s();
    res.events = n;
    res.achieved_rate = (double)n / (t1 - t0);

    /* Wait (bounded) for the stragglers. */
    for (int i = 0; i < 200; i++) {
        long got = 0;
        for (long k = 0; k < n; k++)
            got += L.recv[k] > 0;
        if (got == n)
            break;
        sleep_s(0.05);
    }
    L.stop = true;
    pthread_join(th, NULL);
    rd_kafka_consumer_close(L.consumer);
    rd_kafka_destroy(L.consumer);
    relay_stop(&p);

    double *lat = calloc((size_t)n + 1, sizeof(double));
    long m = 0;
    for (long k = 0; k < n; k++) {
        if (L.recv[k] > 0 && L.commit[k] > 0) {
            double d = L.recv[k] - L.commit[k];
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
    free(L.commit);
    free(L.recv);
    return res;
}

/* ---- report -------------------------------------------------------------- */

static void machine_json(FILE *o)
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
               "\"postgresql\": %d, \"librdkafka\": \"%s\", \"broker\": \"%s\"},\n",
            sysconf(_SC_NPROCESSORS_ONLN), model,
            (double)pages * (double)psize / (1024.0 * 1024 * 1024), PQlibVersion(),
            rd_kafka_version_str(),
            broker_name());
}

static void drain_json(FILE *o, const char *name, const struct drain_result *d,
                       const struct drain_result *floor)
{
    fprintf(o, "  \"%s\": {\"rows\": %ld, \"seconds\": %.3f, \"rows_per_s\": %.0f, "
               "\"floor_rows_per_s\": %.0f, \"ratio_to_floor\": %.3f, \"peak_rss_mb\": %.1f, "
               "\"cpu_s_per_100k\": %.3f},\n",
            name, d->rows, d->seconds, d->rows_per_s, floor->rows_per_s,
            d->rows_per_s / floor->rows_per_s, d->peak_rss_mb, d->cpu_s * 100000.0 / (double)d->rows);
}

int main(int argc, char **argv)
{
    long rows = 1000000, cost_small = 100000;
    int aggregates = 5000;
    double lat_seconds = 10;
    char rates_arg[64] = "1000,5000";
    static const struct option opts[] = {
        { "relay", required_argument, NULL, 'r' },
        { "rows", required_argument, NULL, 'n' },
        { "aggregates", required_argument, NULL, 'a' },
        { "latency-seconds", required_argument, NULL, 's' },
        { "rates", required_argument, NULL, 'R' },
        { "smoke", no_argument, NULL, 'S' },
        { "relay-opt", required_argument, NULL, 'X' },
        { NULL, 0, NULL, 0 },
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'r': relay_bin = optarg; break;
        case 'n': rows = strtol(optarg, NULL, 10); break;
        case 'a': aggregates = atoi(optarg); break;
        case 's': lat_seconds = strtod(optarg, NULL); break;
        case 'X':
            if (n_relay_opts < 16)
                relay_opts[n_relay_opts++] = optarg;
            break;
        case 'R': snprintf(rates_arg, sizeof(rates_arg), "%s", optarg); break;
        case 'S':
            rows = 5000;
            cost_small = 2000;
            aggregates = 100;
            lat_seconds = 1;
            snprintf(rates_arg, sizeof(rates_arg), "200");
            break;
        default: die("usage: outbox-relay-bench --relay PATH [--rows N] [--aggregates N] "
                     "[--latency-seconds S] [--rates R1,R2] [--smoke] [--relay-opt section.key=value]...");
        }
    }
    pg_conninfo = getenv("OUTBOX_RELAY_TEST_PG");
    kafka_servers = getenv("OUTBOX_RELAY_TEST_KAFKA");
    if (!relay_bin || !pg_conninfo || !kafka_servers)
        die("needs --relay and the stack's OUTBOX_RELAY_TEST_PG / OUTBOX_RELAY_TEST_KAFKA");
    snprintf(workdir, sizeof(workdir), "/tmp/outbox-relay-bench.XXXXXX");
    if (!mkdtemp(workdir))
        die("mkdtemp: %s", strerror(errno));
    if (cost_small > rows)
        cost_small = rows;

    PGconn *c = pg_open();
    fprintf(stderr, "bench: drain of %ld rows (relay, on_sent=mark)\n", rows);
    struct drain_result d_mark = drain(c, "bench_drain", rows, aggregates, NULL, false);
    fprintf(stderr, "bench: SQL floor on %ld rows\n", rows);
    struct drain_result floor = sql_floor(c, "bench_floor", rows, aggregates, 1000);
    fprintf(stderr, "bench: drain of %ld rows (relay, on_sent=delete)\n", rows);
    const char *del[] = { "relay.on_sent=delete", NULL };
    struct drain_result d_del = drain(c, "bench_drain_del", rows, aggregates, del, true);
    fprintf(stderr, "bench: cost with a %ld-row backlog\n", cost_small);
    struct drain_result d_small = drain(c, "bench_cost", cost_small, aggregates, NULL, false);

    struct latency_result lat[8];
    int n_lat = 0;
    for (char *save = NULL, *tok = strtok_r(rates_arg, ",", &save); tok && n_lat < 8;
         tok = strtok_r(NULL, ",", &save)) {
        int rate = atoi(tok);
        fprintf(stderr, "bench: latency at %d events/s for %.0f s\n", rate, lat_seconds);
        lat[n_lat++] = latency(c, "bench_latency", rate, lat_seconds);
    }
    drop(c, "bench_drain");
    drop(c, "bench_floor");
    drop(c, "bench_drain_del");
    drop(c, "bench_cost");
    drop(c, "bench_latency");
    PQfinish(c);

    /* JSON on stdout. */
    FILE *o = stdout;
    double growth = (d_mark.peak_rss_mb - d_small.peak_rss_mb) / d_small.peak_rss_mb * 100.0;
    fprintf(o, "{\n");
    machine_json(o);
    drain_json(o, "drain", &d_mark, &floor);
    drain_json(o, "drain_on_sent_delete", &d_del, &floor);
    fprintf(o, "  \"sql_floor\": {\"rows\": %ld, \"seconds\": %.3f, \"rows_per_s\": %.0f},\n",
            floor.rows, floor.seconds, floor.rows_per_s);
    fprintf(o, "  \"latency\": [");
    for (int i = 0; i < n_lat; i++)
        fprintf(o, "%s\n    {\"rate\": %d, \"achieved_rate\": %.0f, \"events\": %ld, "
                   "\"received\": %ld, \"p50_ms\": %.2f, \"p99_ms\": %.2f, \"max_ms\": %.2f}",
                i ? "," : "", lat[i].rate, lat[i].achieved_rate, lat[i].events, lat[i].received,
                lat[i].p50_ms, lat[i].p99_ms, lat[i].max_ms);
    fprintf(o, "\n  ],\n");
    fprintf(o, "  \"cost\": {\"small_backlog\": {\"rows\": %ld, \"peak_rss_mb\": %.1f, "
               "\"cpu_s_per_100k\": %.3f}, \"large_backlog\": {\"rows\": %ld, \"peak_rss_mb\": "
               "%.1f, \"cpu_s_per_100k\": %.3f}, \"rss_growth_pct\": %.1f},\n",
            d_small.rows, d_small.peak_rss_mb, d_small.cpu_s * 100000.0 / (double)d_small.rows,
            d_mark.rows, d_mark.peak_rss_mb, d_mark.cpu_s * 100000.0 / (double)d_mark.rows, growth);
    bool lat_ok = n_lat > 0 && lat[0].p50_ms <= 3 && lat[0].p99_ms <= 10;
    fprintf(o, "  \"targets\": {\"drain_ge_0.8_floor\": %s, \"latency_p50_le_3ms_p99_le_10ms_at_"
               "first_rate\": %s, \"rss_le_32mb\": %s, \"rss_within_10pct\": %s}\n}\n",
            d_mark.rows_per_s >= 0.8 * floor.rows_per_s ? "true" : "false",
            lat_ok ? "true" : "false", d_mark.peak_rss_mb <= 32 ? "true" : "false",
            growth <= 10 ? "true" : "false");

    /* The short table for people, on stderr. */
    fprintf(stderr, "\nbroker: %s\n", broker_name());
    fprintf(stderr, "%-28s %12s %12s\n", "scenario", "rows/s", "vs floor");
    fprintf(stderr, "%-28s %12.0f %12s\n", "SQL floor (PL/pgSQL)", floor.rows_per_s, "1.00");
    fprintf(stderr, "%-28s %12.0f %12.2f\n", "relay drain (mark)", d_mark.rows_per_s,
            d_mark.rows_per_s / floor.rows_per_s);
    fprintf(stderr, "%-28s %12.0f %12.2f\n", "relay drain (delete)", d_del.rows_per_s,
            d_del.rows_per_s / floor.rows_per_s);
    for (int i = 0; i < n_lat; i++)
        fprintf(stderr, "latency @%5d/s: p50 %.2f ms  p99 %.2f ms  max %.2f ms  (%ld/%ld received)\n",
                lat[i].rate, lat[i].p50_ms, lat[i].p99_ms, lat[i].max_ms, lat[i].received,
                lat[i].events);
    fprintf(stderr, "peak RSS: %.1f MB (%ld rows)  %.1f MB (%ld rows)  growth %.1f%%\n",
            d_small.peak_rss_mb, d_small.rows, d_mark.peak_rss_mb, d_mark.rows, growth);
    fprintf(stderr, "CPU s per 100k events: %.3f\n", d_mark.cpu_s * 100000.0 / (double)d_mark.rows);
    return 0;
}
