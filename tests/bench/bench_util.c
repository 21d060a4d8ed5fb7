/* bench_util.c — the plumbing of the benchmark: PostgreSQL, the relay and
 * peer processes, CPU and memory readings, seeding. */
#include "bench.h"

/* Where the peers are (meson passes the source folder). */
#ifndef PEER_DIR
#define PEER_DIR "tests/bench"
#endif

const char *pg_conninfo;
const char *kafka_servers;
const char *relay_bin;
const char *latency_modes = "warmup,poll,wal,floor";
const char *peer_dir = PEER_DIR;
char workdir[256];
const char *relay_opts[16]; /* --relay-opt: extra -X for every relay run */
int n_relay_opts;


/* The stack's librdkafka mock cluster, which the stack controls through a FIFO. */
bool broker_is_mock(void)
{
    return getenv("OUTBOX_RELAY_TEST_MOCK_CONTROL") != NULL;
}

/* What the figures were measured against: tests/bench/run names it. */
const char *broker_name(void)
{
    const char *named = getenv("BENCH_BROKER");
    if (named && *named)
        return named;
    return broker_is_mock() ? "librdkafka mock cluster" : "external";
}

/* The machine's load averages (/proc/loadavg's first three fields), shown
 * beside each sample: the machine is shared, and a figure means little
 * without what else ran. Overwritten by the next call. */
const char *load_average(void)
{
    static char buf[64];
    snprintf(buf, sizeof(buf), "unknown");
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f)
        return buf;
    double a, b, c;
    if (fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
        snprintf(buf, sizeof(buf), "%.2f %.2f %.2f", a, b, c);
    fclose(f);
    return buf;
}

void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* ---- PostgreSQL ---------------------------------------------------------- */

PGconn *pg_open(void)
{
    PGconn *c = PQconnectdb(pg_conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        die("postgres: %s", PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}


void pg_exec(PGconn *c, const char *fmt, ...)
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


long long pg_int(PGconn *c, const char *fmt, ...)
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


pid_t run_cmd(const char *const argv[], const char *log)
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

void base_args(const char **argv, int *n, const char *table)
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

/* `outbox-relay migrate` for @p table, with more -X in @p extra (NULL-ended,
 * or NULL): relay.capture=wal makes the publication and the slot too. */
void migrate(const char *table, const char *const *extra)
{
    const char *argv[32];
    int n = 0;
    argv[n++] = relay_bin;
    argv[n++] = "migrate";
    base_args(argv, &n, table);
    for (; extra && *extra && n < 30; extra++) {
        argv[n++] = "-X";
        argv[n++] = *extra;
    }
    argv[n] = NULL;
    char log[512];
    snprintf(log, sizeof(log), "%s/migrate.log", workdir);
    int st;
    waitpid(run_cmd(argv, log), &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("migrate %s failed (see %s)", table, log);
}

void wal_opts_init(struct wal_opts *w, const char *table)
{
    snprintf(w->slot, sizeof(w->slot), "relay.slot=%s", table);
    snprintf(w->pub, sizeof(w->pub), "relay.publication=%s", table);
    w->v[0] = "relay.capture=wal";
    w->v[1] = w->slot;
    w->v[2] = w->pub;
    w->v[3] = NULL;
}

/* A peer: a relay written by hand (@p script in peer_dir), with Debian's python3. */
struct relay_proc peer_start(const char *script, const char *table, bool deleting)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", peer_dir, script);
    const char *argv[] = { "/usr/bin/python3", path, pg_conninfo, kafka_servers, table,
                           deleting ? "--on-sent" : NULL, "delete", NULL };
    char log[512];
    snprintf(log, sizeof(log), "%s/peer-%s.log", workdir, table);
    struct relay_proc p = { .started = now_s() };
    p.pid = run_cmd(argv, log);
    return p;
}

struct relay_proc relay_start(const char *table, const char *const *extra)
{
    const char *argv[48];
    int n = 0;
    argv[n++] = relay_bin;
    argv[n++] = "run";
    base_args(argv, &n, table);
    for (; extra && *extra; extra++) {
        argv[n++] = "-X";
        argv[n++] = *extra;
    }
    /* Nothing here reads the status endpoint, and its fixed port may be
     * taken by another relay on a shared machine: the drain would die. */
    argv[n++] = "-X";
    argv[n++] = "http.listen=";
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
double proc_cpu_s(pid_t pid)
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

/* Context switches of all of @p pid's threads, voluntary or not: each is a
 * wake-up of the relay's loop or of one of librdkafka's threads. */
static void thread_switches_add(struct thread_switches *by, const char *name, long n)
{
    int i = 0;
    while (i < by->n && strcmp(by->name[i], name) != 0)
        i++;
    if (i == by->n) {
        if (by->n == THREAD_SWITCHES_MAX)
            return;
        snprintf(by->name[by->n], sizeof by->name[0], "%s", name);
        by->count[by->n++] = 0;
    }
    by->count[i] += n;
}

/* @p b minus @p a, per name, as one line: "name count, ...". */
void thread_switches_line(const struct thread_switches *a, const struct thread_switches *b,
                          double per, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < b->n && used < len; i++) {
        long before = 0;
        for (int j = 0; j < a->n; j++)
            if (strcmp(a->name[j], b->name[i]) == 0)
                before = a->count[j];
        int w = snprintf(out + used, len - used, "%s%s %.2f", i ? ", " : "", b->name[i],
                         (double)(b->count[i] - before) / per);
        used += w > 0 ? (size_t)w : 0;
    }
}

long proc_switches(pid_t pid)
{
    return proc_switches_by_thread(pid, NULL);
}

/* The same, and per thread name (the loop, librdkafka's rdk:main and
 * rdk:broker threads, libuv's workers) into @p by, when not NULL. */
long proc_switches_by_thread(pid_t pid, struct thread_switches *by)
{
    if (by)
        by->n = 0;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    long total = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (de->d_name[0] == '.')
            continue;
        char sp[sizeof(path) + 300], line[128];
        snprintf(sp, sizeof(sp), "%s/%s/status", path, de->d_name);
        FILE *f = fopen(sp, "r");
        if (!f)
            continue; /* a thread that just ended */
        long v, mine = 0;
        char name[32] = "?";
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1 ||
                sscanf(line, "nonvoluntary_ctxt_switches: %ld", &v) == 1)
                mine += v;
            else
                (void)sscanf(line, "Name: %31s", name);
        fclose(f);
        total += mine;
        if (by)
            thread_switches_add(by, name, mine);
    }
    closedir(d);
    return total;
}


struct machine_cpu machine_cpu_now(void)
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
double machine_busy(struct machine_cpu a, struct machine_cpu b)
{
    if (b.total <= a.total)
        return -1;
    return (double)(b.busy - a.busy) / (double)(b.total - a.total);
}

/* Peak resident memory (VmHWM) in MB and CPU seconds of a process. */
void relay_cost(pid_t pid, double *rss_mb, double *cpu_s)
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
 * benchmark (@p c) and @p except: during a drain, the relay's or the peer's,
 * and the walsender that decodes the slot for relay.capture = wal. They
 * connected for the drain, so what they used is the drain's. Not counted:
 * the server's own processes (WAL writer, checkpointer, autovacuum). */
double client_backends_cpu_s(PGconn *c, int except)
{
    PGresult *r = PQexec(c, "SELECT pid FROM pg_stat_activity WHERE backend_type IN "
                            "('client backend', 'walsender') AND pid <> pg_backend_pid()");
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

double brokers_cpu_s(void)
{
    const char *dir = getenv("OUTBOX_RELAY_TEST_KAFKA_DIR");
    double sum = -1;
    for (int node = 1; dir && node <= 9; node++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/node-%d/pid", dir, node);
        FILE *f = fopen(path, "r");
        int pid = 0;
        if (!f)
            continue;
        if (fscanf(f, "%d", &pid) != 1)
            pid = 0;
        fclose(f);
        double cpu = pid > 0 ? proc_cpu_s(pid) : -1;
        if (cpu >= 0)
            sum = (sum < 0 ? 0 : sum) + cpu;
    }
    return sum;
}

double self_cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

void relay_stop(struct relay_proc *p)
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


struct cmd_cost run_measured(const char *const argv[], const char *log)
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

/* N rows over A aggregates with a JSON payload of about 250 bytes, written
 * in transactions of SEED_TXN_ROWS rows, the same for every scenario.
 * Applications write their events in many transactions; one transaction of
 * all the rows would also be unfair to relay.capture = wal, which PostgreSQL
 * decodes only once it committed, spilling it to disk meanwhile. */
void seed(PGconn *c, const char *table, long rows, int aggregates)
{
    for (long lo = 1; lo <= rows; lo += SEED_TXN_ROWS) {
        long hi = lo + SEED_TXN_ROWS - 1 < rows ? lo + SEED_TXN_ROWS - 1 : rows;
        pg_exec(c,
                "INSERT INTO \"public\".\"%s\" (\"aggregate_type\", \"aggregate_id\", "
                "\"event_type\", \"payload\") SELECT 'order', (i %% %d)::text, 'OrderUpdated', "
                "jsonb_build_object('order_id', i, 'customer', 'customer-' || (i %% 977), "
                "'status', 'paid', 'amount', (i %% 10000) / 100.0, 'currency', 'EUR', "
                "'note', repeat('x', 120)) FROM generate_series(%ld, %ld) AS i",
                table, aggregates, lo, hi);
    }
    pg_exec(c, "VACUUM ANALYZE \"public\".\"%s\"", table);
}

/* Where PostgreSQL's WAL ends now, in bytes from its start. */
long long wal_lsn(PGconn *c)
{
    return pg_int(c, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint");
}

/* Drops @p table, and the slot and publication named after it (a slot
 * left behind would keep its WAL; the relay reading it must have stopped). */
void drop(PGconn *c, const char *table)
{
    /* A walsender outlives its relay by a moment. */
    for (int i = 0; i < 200 && pg_int(c, "SELECT count(*) FROM pg_replication_slots WHERE "
                                         "slot_name = '%s' AND active", table) > 0; i++)
        sleep_s(0.05);
    pg_exec(c, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
               "WHERE slot_name = '%s'", table);
    pg_exec(c, "DROP PUBLICATION IF EXISTS \"%s\"", table);
    pg_exec(c, "DROP TABLE IF EXISTS \"public\".\"%s\" CASCADE", table);
    /* A fresh database has no bookkeeping table yet. */
    pg_exec(c, "DO $$ BEGIN IF to_regclass('public.outbox_relay_migrations') IS NOT NULL THEN "
               "DELETE FROM \"public\".\"outbox_relay_migrations\" WHERE \"table_name\" = "
               "'public.%s'; END IF; END $$", table);
}
