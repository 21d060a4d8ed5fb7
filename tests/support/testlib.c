/* testlib.c — see testlib.h. */
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

/* ---- small things ------------------------------------------------------- */

int64_t e2e_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void e2e_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        abort();
    return p;
}

static char *xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static char *vfmt(const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        abort();
    char *s = xmalloc((size_t)n + 1);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    return s;
}

/* Reads a whole file; NULL if it cannot be opened. */
static char *read_file(const char *path, size_t *len_out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 8192, len = 0;
    char *buf = xmalloc(cap);
    size_t r;
    while ((r = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (cap - len - 1 == 0) {
            cap *= 2;
            buf = realloc(buf, cap);
            if (!buf)
                abort();
        }
    }
    fclose(f);
    buf[len] = '\0';
    if (len_out)
        *len_out = len;
    return buf;
}

/* ---- environment -------------------------------------------------------- */

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

const struct e2e_env *e2e_env(void)
{
    static struct e2e_env env;

    env.pg = env_nonempty("OUTBOX_RELAY_TEST_PG");
    /* tests/run sets this: there a missing stack is an error, not a skip. */
    cr_assert(env.pg || !env_nonempty("OUTBOX_RELAY_TEST_REQUIRED"),
              "OUTBOX_RELAY_TEST_PG is not set although OUTBOX_RELAY_TEST_REQUIRED is");
    if (!env.pg)
        cr_skip_test("OUTBOX_RELAY_TEST_PG is not set: run tests/run, or start the stack "
                     "(tests/support/stack.sh start DIR && . DIR/env) before meson test");
    /* meson runs the guarantee tests once per broker: OUTBOX_RELAY_TEST_BROKER
     * says which one this run is for. */
    const char *broker = env_nonempty("OUTBOX_RELAY_TEST_BROKER");
    const char *real = env_nonempty("OUTBOX_RELAY_TEST_REAL_KAFKA");
    if (broker && !strcmp(broker, "kafka")) {
        if (!real)
            cr_skip_test("no real Kafka broker in the stack: start it with OUTBOX_RELAY_TEST_BROKERS='mock kafka'");
        env.kafka = real;
        env.mock_control = NULL;
    } else {
        env.kafka = env_nonempty("OUTBOX_RELAY_TEST_KAFKA");
        cr_assert(env.kafka, "OUTBOX_RELAY_TEST_PG is set but OUTBOX_RELAY_TEST_KAFKA is not");
        env.mock_control = env_nonempty("OUTBOX_RELAY_TEST_MOCK_CONTROL");
    }
    env.real_kafka = real && !strcmp(env.kafka, real);
    env.kafka_dir = env.real_kafka ? env_nonempty("OUTBOX_RELAY_TEST_KAFKA_DIR") : NULL;
    env.kafka_sh = env_nonempty("OUTBOX_RELAY_TEST_KAFKA_SH");
    env.stack_dir = env_nonempty("OUTBOX_RELAY_TEST_STACK_DIR");
    env.stack_sh = env_nonempty("OUTBOX_RELAY_TEST_STACK_SH");
    env.relay_bin = env_nonempty("OUTBOX_RELAY_BIN");
    cr_assert(env.relay_bin, "OUTBOX_RELAY_BIN is not set (meson sets it to the built outbox-relay)");
    cr_assert(access(env.relay_bin, X_OK) == 0, "OUTBOX_RELAY_BIN=%s is not executable", env.relay_bin);
    return &env;
}

static void mkdir_p(const char *path)
{
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0755);
            *p = '/';
        }
    }
    mkdir(tmp, 0755);
}

void e2e_setup(struct e2e_ctx *t, const char *name)
{
    memset(t, 0, sizeof(*t));
    t->env = e2e_env();
    t->kafka = t->env->kafka;

    /* pid + a time part: unique in a shared database, and on a real broker that
     * keeps the topics of earlier runs. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(t->name, sizeof(t->name), "e2e_%.12s_%ld_%lx", name, (long)getpid(),
             (unsigned long)(ts.tv_sec % 0x1000000));
    cr_assert(strlen(t->name) <= 40, "test name too long: %s", t->name);
    snprintf(t->table, sizeof(t->table), "%s", t->name);
    snprintf(t->qtable, sizeof(t->qtable), "\"public\".\"%s\"", t->table);
    snprintf(t->qenqueue, sizeof(t->qenqueue), "\"public\".\"%s_enqueue\"", t->table);
    snprintf(t->topic_template, sizeof(t->topic_template), "%s.${aggregate_type}", t->table);
    snprintf(t->channel, sizeof(t->channel), "%s", t->table);

    const char *base = t->env->stack_dir ? t->env->stack_dir : "/tmp";
    snprintf(t->logdir, sizeof(t->logdir), "%s/logs/%s", base, t->name);
    mkdir_p(t->logdir);
    snprintf(t->empty_conf, sizeof(t->empty_conf), "%s/empty.conf", t->logdir);
    FILE *f = fopen(t->empty_conf, "w");
    cr_assert(f, "cannot create %s: %s", t->empty_conf, strerror(errno));
    fputs("# empty: every setting comes from -X\n", f);
    fclose(f);

    t->conn = e2e_pg_connect();
    e2e_exec(t->conn, "SET client_min_messages = warning");
    e2e_exec(t->conn, "DROP TABLE IF EXISTS %s CASCADE", t->qtable);
    e2e_exec(t->conn, "DROP FUNCTION IF EXISTS %s CASCADE", t->qenqueue);
    fprintf(stderr, "e2e: test %s: table %s, logs in %s\n", name, t->qtable, t->logdir);
}

void e2e_teardown(struct e2e_ctx *t)
{
    for (int i = 0; i < t->n_relays; i++) {
        struct e2e_relay *r = &t->relays[i];
        if (r->pid > 0) {
            e2e_relay_kill(r);
        }
        fprintf(stderr, "---- relay %d (%s), last lines ----\n", i, r->log_path);
        e2e_relay_dump_log(r, 25);
    }
    t->n_relays = 0;
    if (t->conn)
        PQfinish(t->conn);
    t->conn = NULL;
}

/* ---- PostgreSQL --------------------------------------------------------- */

PGconn *e2e_pg_connect(void)
{
    const char *ci = e2e_env()->pg;
    PGconn *c = PQconnectdb(ci);
    cr_assert(c && PQstatus(c) == CONNECTION_OK, "cannot connect to PostgreSQL (%s): %s", ci,
              c ? PQerrorMessage(c) : "out of memory");
    return c;
}

static PGresult *vquery(PGconn *conn, const char *fmt, va_list ap)
{
    char *sql = vfmt(fmt, ap);
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        char msg[2048];
        snprintf(msg, sizeof(msg), "%s", PQerrorMessage(conn));
        char shown[600];
        snprintf(shown, sizeof(shown), "%s", sql);
        PQclear(res);
        free(sql);
        cr_assert_fail("SQL failed: %s\n  statement: %s", msg, shown);
    }
    free(sql);
    return res;
}

PGresult *e2e_query(PGconn *conn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PGresult *res = vquery(conn, fmt, ap);
    va_end(ap);
    return res;
}

void e2e_enqueue_series(struct e2e_ctx *t, const char *type, const char *key_prefix, int n_keys,
                        const char *event_type, int lo, int hi, int pad)
{
    char *qtype = PQescapeLiteral(t->conn, type, strlen(type));
    char *qprefix = PQescapeLiteral(t->conn, key_prefix, strlen(key_prefix));
    char *qevent = PQescapeLiteral(t->conn, event_type, strlen(event_type));
    cr_assert(qtype && qprefix && qevent, "PQescapeLiteral: %s", PQerrorMessage(t->conn));
    e2e_exec(t->conn,
             "SELECT count(%s(%s, %s || (i %% %d), %s, CASE WHEN %d > 0"
             "   THEN jsonb_build_object('i', i, 'pad', repeat('x', %d)) ELSE jsonb_build_object('i', i) END))"
             "  FROM generate_series(%d, %d) AS i",
             t->qenqueue, qtype, qprefix, n_keys, qevent, pad, pad, lo, hi);
    PQfreemem(qtype);
    PQfreemem(qprefix);
    PQfreemem(qevent);
}

void e2e_exec(PGconn *conn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PQclear(vquery(conn, fmt, ap));
    va_end(ap);
}

long long e2e_query_int(PGconn *conn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PGresult *res = vquery(conn, fmt, ap);
    va_end(ap);
    cr_assert(PQntuples(res) == 1 && PQnfields(res) >= 1 && !PQgetisnull(res, 0, 0),
              "expected one non-NULL value, got %d row(s)", PQntuples(res));
    long long v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return v;
}

static void fail_if_relay_died(struct e2e_ctx *t)
{
    for (int i = 0; i < t->n_relays; i++) {
        struct e2e_relay *r = &t->relays[i];
        if (r->pid > 0 && !e2e_relay_alive(r)) {
            e2e_relay_dump_log(r, 40);
            cr_assert_fail("relay %d exited unexpectedly (wait status %d: %s %d); log %s", i, r->status,
                           WIFEXITED(r->status) ? "exit" : "signal",
                           WIFEXITED(r->status) ? WEXITSTATUS(r->status) : WTERMSIG(r->status), r->log_path);
        }
    }
}

bool e2e_wait_sql(struct e2e_ctx *t, int timeout_ms, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = vfmt(fmt, ap);
    va_end(ap);

    int64_t deadline = e2e_now_ms() + timeout_ms;
    bool ok = false;
    for (;;) {
        PGresult *res = PQexec(t->conn, sql);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            char msg[1024];
            snprintf(msg, sizeof(msg), "%s", PQerrorMessage(t->conn));
            PQclear(res);
            free(sql);
            cr_assert_fail("wait query failed: %s", msg);
        }
        ok = PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) && PQgetvalue(res, 0, 0)[0] == 't';
        PQclear(res);
        if (ok || e2e_now_ms() >= deadline)
            break;
        fail_if_relay_died(t);
        e2e_sleep_ms(50);
    }
    free(sql);
    return ok;
}

void e2e_wait_all_sent(struct e2e_ctx *t, int timeout_ms)
{
    bool ok = e2e_wait_sql(t, timeout_ms, "SELECT NOT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL)",
                           t->qtable);
    if (!ok) {
        long long unsent = e2e_query_int(t->conn, "SELECT count(*) FROM %s WHERE sent_at IS NULL", t->qtable);
        long long total = e2e_query_int(t->conn, "SELECT count(*) FROM %s", t->qtable);
        for (int i = 0; i < t->n_relays; i++)
            e2e_relay_dump_log(&t->relays[i], 30);
        cr_assert_fail("%lld of %lld rows still have sent_at NULL after %d ms", unsent, total, timeout_ms);
    }
}

/* ---- processes ---------------------------------------------------------- */

/* fork + exec with stdout/stderr sent to files; the child dies with us. */
static pid_t spawn(const char *const argv[], int out_fd, int err_fd)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        sigset_t none;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        closefrom(3);
        execv(argv[0], (char *const *)argv);
        dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

static int decode_status(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return -1;
}

/* Waits up to timeout_ms for pid; @return true and *status if it ended. */
static bool wait_pid(pid_t pid, int timeout_ms, int *status)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return true;
        if (r < 0 && errno != EINTR)
            return true; /* not our child any more: nothing to wait for */
        if (e2e_now_ms() >= deadline)
            return false;
        e2e_sleep_ms(10);
    }
}

int e2e_run_cmd(const char *const argv[], int timeout_ms, char **out, char **err)
{
    char out_path[] = "/tmp/e2e-out-XXXXXX", err_path[] = "/tmp/e2e-err-XXXXXX";
    int ofd = mkstemp(out_path), efd = mkstemp(err_path);
    cr_assert(ofd >= 0 && efd >= 0, "mkstemp: %s", strerror(errno));

    pid_t pid = spawn(argv, ofd, efd);
    close(ofd);
    close(efd);
    int st = 0, rc;
    if (wait_pid(pid, timeout_ms, &st)) {
        rc = decode_status(st);
    } else {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        rc = -1;
    }
    if (out)
        *out = read_file(out_path, NULL);
    if (err)
        *err = read_file(err_path, NULL);
    unlink(out_path);
    unlink(err_path);
    return rc;
}

int e2e_run_relay(const char *const args[], int timeout_ms, char **out, char **err)
{
    const char *argv[E2E_MAX_ARGS + 2];
    int n = 0;
    argv[n++] = e2e_env()->relay_bin;
    for (int i = 0; args && args[i]; i++) {
        cr_assert(n < E2E_MAX_ARGS, "too many arguments");
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    return e2e_run_cmd(argv, timeout_ms, out, err);
}

/* Option strings live as long as the context: keep them in a static pool. */
static const char *pool_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static const char *pool_fmt(const char *fmt, ...)
{
    static char pool[16][1024];
    static int next;
    char *s = pool[next++ % 16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof(pool[0]), fmt, ap);
    va_end(ap);
    return s;
}

void e2e_base_args(struct e2e_ctx *t, const char **argv, int *argc)
{
    int n = *argc;
    argv[n++] = "-c";
    argv[n++] = t->empty_conf;
    argv[n++] = "-X";
    argv[n++] = pool_fmt("postgres.conninfo=%s", t->env->pg);
    argv[n++] = "-X";
    argv[n++] = pool_fmt("kafka.bootstrap.servers=%s", t->kafka);
    argv[n++] = "-X";
    argv[n++] = pool_fmt("relay.table=%s", t->table);
    argv[n++] = "-X";
    argv[n++] = pool_fmt("relay.topic=%s", t->topic_template);
    argv[n++] = "-X";
    argv[n++] = pool_fmt("relay.notify_channel=%s", t->channel);
    *argc = n;
}

void e2e_migrate(struct e2e_ctx *t)
{
    const char *args[E2E_MAX_ARGS];
    int n = 0;
    args[n++] = "migrate";
    e2e_base_args(t, args, &n);
    args[n] = NULL;
    char *out = NULL, *err = NULL;
    int rc = e2e_run_relay(args, 60000, &out, &err);
    cr_assert(rc == 0, "outbox-relay migrate exited %d\nstdout: %s\nstderr: %s", rc, out ? out : "",
              err ? err : "");
    free(out);
    free(err);
}

/* Takes the test's next process slot, starts @p argv with stdout and stderr
 * in <logdir>/<kind>-N.log. */
static struct e2e_relay *launch(struct e2e_ctx *t, const char *kind, const char *const *argv)
{
    cr_assert(t->n_relays < E2E_MAX_RELAYS, "too many processes in one test");
    struct e2e_relay *r = &t->relays[t->n_relays];
    memset(r, 0, sizeof(*r));
    snprintf(r->log_path, sizeof(r->log_path), "%s/%s-%d.log", t->logdir, kind, t->n_relays);
    int fd = open(r->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    cr_assert(fd >= 0, "open %s: %s", r->log_path, strerror(errno));
    r->pid = spawn(argv, fd, fd);
    close(fd);
    t->n_relays++;
    return r;
}

struct e2e_relay *e2e_relay_start(struct e2e_ctx *t, const char *const *extra)
{
    const char *argv[E2E_MAX_ARGS + 2];
    int n = 0;
    argv[n++] = t->env->relay_bin;
    argv[n++] = "run";
    e2e_base_args(t, argv, &n);
    /* Relays of a test run side by side: each gets a port of its own for the
     * status endpoint (logged; see e2e_relay_http_port). @p extra may override. */
    argv[n++] = "-X";
    argv[n++] = "http.listen=127.0.0.1:0";
    for (int i = 0; extra && extra[i]; i++) {
        cr_assert(n + 2 < E2E_MAX_ARGS, "too many arguments");
        argv[n++] = "-X";
        argv[n++] = extra[i];
    }
    argv[n] = NULL;
    return launch(t, "relay", argv);
}

bool e2e_relay_alive(struct e2e_relay *r)
{
    if (r->pid <= 0)
        return false;
    int st;
    pid_t w = waitpid(r->pid, &st, WNOHANG);
    if (w == r->pid) {
        r->status = st;
        r->pid = 0;
        return false;
    }
    return true;
}

bool e2e_relay_log_contains(const struct e2e_relay *r, const char *needle)
{
    char *s = read_file(r->log_path, NULL);
    bool found = s && strstr(s, needle);
    free(s);
    return found;
}

bool e2e_relay_wait_log(struct e2e_relay *r, const char *needle, int timeout_ms)
{
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        if (e2e_relay_log_contains(r, needle))
            return true;
        if (!e2e_relay_alive(r))
            return e2e_relay_log_contains(r, needle);
        if (e2e_now_ms() >= deadline)
            return false;
        e2e_sleep_ms(50);
    }
}

int e2e_relay_stop(struct e2e_relay *r, int timeout_ms)
{
    if (r->pid <= 0)
        return decode_status(r->status);
    kill(r->pid, SIGTERM);
    int st = 0;
    if (wait_pid(r->pid, timeout_ms, &st)) {
        r->status = st;
        r->pid = 0;
        return decode_status(st);
    }
    kill(r->pid, SIGKILL);
    waitpid(r->pid, &st, 0);
    r->status = st;
    r->pid = 0;
    return -1;
}

void e2e_relay_kill(struct e2e_relay *r)
{
    if (r->pid <= 0)
        return;
    kill(r->pid, SIGKILL);
    int st = 0;
    waitpid(r->pid, &st, 0);
    r->status = st;
    r->pid = 0;
}

void e2e_relay_dump_log(const struct e2e_relay *r, int lines)
{
    size_t len = 0;
    char *s = read_file(r->log_path, &len);
    if (!s) {
        fprintf(stderr, "(no log at %s)\n", r->log_path);
        return;
    }
    const char *p = s + len;
    int seen = 0;
    while (p > s && seen <= lines) {
        p--;
        if (*p == '\n')
            seen++;
    }
    if (p > s)
        p++;
    fprintf(stderr, "%s%s", p, len && s[len - 1] != '\n' ? "\n" : "");
    free(s);
}

struct e2e_relay *e2e_spawn(struct e2e_ctx *t, const char *const *args)
{
    const char *argv[E2E_MAX_ARGS + 2];
    int n = 0;
    argv[n++] = t->env->relay_bin;
    for (int i = 0; args && args[i]; i++) {
        cr_assert(n < E2E_MAX_ARGS, "too many arguments");
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    return launch(t, "proc", argv);
}

int e2e_wait_exit(struct e2e_relay *r, int timeout_ms)
{
    if (r->pid <= 0)
        return decode_status(r->status);
    int st = 0;
    if (wait_pid(r->pid, timeout_ms, &st)) {
        r->status = st;
        r->pid = 0;
        return decode_status(st);
    }
    e2e_relay_kill(r);
    return -1;
}

char *e2e_relay_log(const struct e2e_relay *r)
{
    char *s = read_file(r->log_path, NULL);
    return s ? s : strdup("");
}

int e2e_relay_http_port(struct e2e_relay *r, int timeout_ms)
{
    static const char needle[] = "msg=\"status endpoint listening\" address=";
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        char *log = read_file(r->log_path, NULL);
        const char *at = log ? strstr(log, needle) : NULL;
        if (!at && log) /* the JSON log format */
            at = strstr(log, "\"msg\":\"status endpoint listening\",\"address\":\"");
        if (at) {
            const char *eol = strchr(at, '\n');
            const char *colon = NULL;
            for (const char *p = at; p < (eol ? eol : at + strlen(at)); p++)
                if (*p == ':' && p[1] >= '0' && p[1] <= '9')
                    colon = p;
            int port = colon ? atoi(colon + 1) : -1;
            free(log);
            return port;
        }
        free(log);
        if (!e2e_relay_alive(r) || e2e_now_ms() >= deadline)
            return -1;
        e2e_sleep_ms(50);
    }
}

/* ---- mock broker -------------------------------------------------------- */

bool e2e_mock_command(const struct e2e_ctx *t, const char *fmt, ...)
{
    if (!t->env->mock_control)
        return false;
    va_list ap;
    va_start(ap, fmt);
    char *cmd = vfmt(fmt, ap);
    va_end(ap);
    int fd = open(t->env->mock_control, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    cr_assert(fd >= 0, "open mock control %s: %s", t->env->mock_control, strerror(errno));
    dprintf(fd, "%s\n", cmd);
    close(fd);
    free(cmd);
    return true;
}

/* ---- Kafka consumer ----------------------------------------------------- */

static void msgs_push(struct e2e_msgs *m, const rd_kafka_message_t *km)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 1024;
        m->v = realloc(m->v, m->cap * sizeof(*m->v));
        if (!m->v)
            abort();
    }
    struct e2e_msg *e = &m->v[m->n++];
    memset(e, 0, sizeof(*e));
    e->topic = strdup(rd_kafka_topic_name(km->rkt));
    e->partition = km->partition;
    e->offset = km->offset;
    if (km->key) {
        e->key = xstrndup(km->key, km->key_len);
        e->key_len = km->key_len;
    }
    if (km->payload) {
        e->value = xstrndup(km->payload, km->len);
        e->value_len = km->len;
    }
    e->timestamp = rd_kafka_message_timestamp(km, &e->tstype);

    rd_kafka_headers_t *hdrs = NULL;
    if (rd_kafka_message_headers(km, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR && hdrs) {
        size_t cnt = rd_kafka_header_cnt(hdrs);
        e->headers = xmalloc(cnt * sizeof(*e->headers));
        for (size_t i = 0; i < cnt; i++) {
            const char *name;
            const void *val;
            size_t size;
            if (rd_kafka_header_get_all(hdrs, i, &name, &val, &size))
                break;
            e->headers[i].name = strdup(name);
            e->headers[i].value = val ? xstrndup(val, size) : NULL;
            e->headers[i].value_len = size;
            e->n_headers++;
        }
    }
}

struct part_state {
    const char *topic;
    int topic_idx;
    int32_t partition;
    int64_t hi;
    bool eof;
    int64_t last_offset;
};

static const char *const *sort_topics;
static size_t sort_n_topics;

static int topic_index(const char *topic)
{
    for (size_t i = 0; i < sort_n_topics; i++)
        if (!strcmp(sort_topics[i], topic))
            return (int)i;
    return (int)sort_n_topics;
}

static int msg_cmp(const void *a, const void *b)
{
    const struct e2e_msg *x = a, *y = b;
    int tx = topic_index(x->topic), ty = topic_index(y->topic);
    if (tx != ty)
        return tx < ty ? -1 : 1;
    if (tx == (int)sort_n_topics) {
        int c = strcmp(x->topic, y->topic);
        if (c)
            return c;
    }
    if (x->partition != y->partition)
        return x->partition < y->partition ? -1 : 1;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return 0;
}

static void msg_free(struct e2e_msg *e)
{
    free(e->topic);
    free(e->key);
    free(e->value);
    for (size_t h = 0; h < e->n_headers; h++) {
        free(e->headers[h].name);
        free(e->headers[h].value);
    }
    free(e->headers);
}

static void conf_set(rd_kafka_conf_t *conf, const char *k, const char *v)
{
    char errstr[512];
    cr_assert(rd_kafka_conf_set(conf, k, v, errstr, sizeof(errstr)) == RD_KAFKA_CONF_OK,
              "consumer config %s=%s: %s", k, v, errstr);
}

void e2e_consume(const char *const *topics, size_t n_topics, int timeout_ms, struct e2e_msgs *out)
{
    e2e_consume_from(e2e_env()->kafka, false, topics, n_topics, timeout_ms, out);
}

void e2e_consume_from(const char *bootstrap, bool read_committed, const char *const *topics, size_t n_topics,
                      int timeout_ms, struct e2e_msgs *out)
{
    char errstr[512], group[128];
    /* Waiting for topics that do not exist yet gets its own, shorter budget. */
    int64_t deadline = e2e_now_ms() + (timeout_ms < 30000 ? timeout_ms : 30000);

    memset(out, 0, sizeof(*out));
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    snprintf(group, sizeof(group), "e2e-reader-%ld-%" PRId64, (long)getpid(), e2e_now_ms());
    conf_set(conf, "bootstrap.servers", bootstrap);
    conf_set(conf, "group.id", group);
    conf_set(conf, "client.id", "e2e-reader");
    conf_set(conf, "enable.auto.commit", "false");
    conf_set(conf, "enable.auto.offset.store", "false");
    conf_set(conf, "enable.partition.eof", "true");
    conf_set(conf, "auto.offset.reset", "earliest");
    conf_set(conf, "fetch.wait.max.ms", "100");
    conf_set(conf, "isolation.level", read_committed ? "read_committed" : "read_uncommitted");
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    cr_assert(rk, "rd_kafka_new(consumer): %s", errstr);

    /* Partitions from metadata; a topic may still be being created. */
    size_t n_parts = 0, cap_parts = 64;
    struct part_state *parts = xmalloc(cap_parts * sizeof(*parts));
    for (size_t ti = 0; ti < n_topics; ti++) {
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topics[ti], NULL);
        cr_assert(rkt, "rd_kafka_topic_new(%s)", topics[ti]);
        bool found = false;
        for (;;) {
            const struct rd_kafka_metadata *md = NULL;
            rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, 5000);
            if (!err && md->topic_cnt == 1 && !md->topics[0].err && md->topics[0].partition_cnt > 0) {
                for (int p = 0; p < md->topics[0].partition_cnt; p++) {
                    if (n_parts == cap_parts) {
                        cap_parts *= 2;
                        parts = realloc(parts, cap_parts * sizeof(*parts));
                        if (!parts)
                            abort();
                    }
                    parts[n_parts++] = (struct part_state){
                        .topic = topics[ti], .topic_idx = (int)ti,
                        .partition = md->topics[0].partitions[p].id, .last_offset = -1};
                }
                found = true;
            }
            if (md)
                rd_kafka_metadata_destroy(md);
            if (found || e2e_now_ms() >= deadline)
                break;
            e2e_sleep_ms(200);
        }
        rd_kafka_topic_destroy(rkt);
        if (!found) {
            fprintf(stderr, "e2e: topic %s does not exist\n", topics[ti]);
            out->n_missing_topics++;
        }
    }

    rd_kafka_topic_partition_list_t *assign = rd_kafka_topic_partition_list_new((int)(n_parts ? n_parts : 1));
    for (size_t i = 0; i < n_parts; i++) {
        int64_t lo = -1, hi = -1;
        rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
        for (int attempt = 0; attempt < 20; attempt++) {
            err = rd_kafka_query_watermark_offsets(rk, parts[i].topic, parts[i].partition, &lo, &hi, 5000);
            if (!err || e2e_now_ms() >= deadline)
                break;
            e2e_sleep_ms(200);
        }
        cr_assert(!err, "watermarks of %s [%d]: %s", parts[i].topic, parts[i].partition, rd_kafka_err2str(err));
        cr_assert(lo == 0,
                  "%s [%d] starts at offset %" PRId64 ", not 0: the broker dropped old messages "
                  "(librdkafka's mock broker keeps 5 MB / 100000 batches per partition), "
                  "so the test cannot see everything that was produced",
                  parts[i].topic, parts[i].partition, lo);
        parts[i].hi = hi;
        parts[i].eof = hi == 0;
        rd_kafka_topic_partition_list_add(assign, parts[i].topic, parts[i].partition)->offset =
            RD_KAFKA_OFFSET_BEGINNING;
    }
    if (n_parts) {
        rd_kafka_resp_err_t err = rd_kafka_assign(rk, assign);
        cr_assert(!err, "rd_kafka_assign: %s", rd_kafka_err2str(err));
    }
    rd_kafka_topic_partition_list_destroy(assign);

    deadline = e2e_now_ms() + timeout_ms;
    size_t n_eof = 0;
    for (size_t i = 0; i < n_parts; i++)
        n_eof += parts[i].eof;
    int errors_logged = 0;
    while (n_eof < n_parts && e2e_now_ms() < deadline) {
        rd_kafka_message_t *km = rd_kafka_consumer_poll(rk, 200);
        if (!km)
            continue;
        struct part_state *ps = NULL;
        if (km->rkt) {
            const char *tn = rd_kafka_topic_name(km->rkt);
            for (size_t i = 0; i < n_parts; i++)
                if (parts[i].partition == km->partition && !strcmp(parts[i].topic, tn)) {
                    ps = &parts[i];
                    break;
                }
        }
        if (km->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (ps && !ps->eof && km->offset >= ps->hi) {
                ps->eof = true;
                n_eof++;
            }
        } else if (km->err) {
            if (errors_logged++ < 20)
                fprintf(stderr, "e2e: consumer: %s\n", rd_kafka_message_errstr(km));
        } else if (ps) {
            msgs_push(out, km);
            ps->last_offset = km->offset;
            if (ps->eof) { /* more arrived after the end we had seen */
                ps->eof = false;
                n_eof--;
            }
        }
        rd_kafka_message_destroy(km);
    }

    if (n_eof < n_parts) {
        char detail[2048] = "";
        size_t off = 0;
        for (size_t i = 0; i < n_parts && off < sizeof(detail) - 100; i++)
            if (!parts[i].eof)
                off += (size_t)snprintf(detail + off, sizeof(detail) - off, " %s[%d] at %" PRId64 "/%" PRId64,
                                        parts[i].topic, parts[i].partition, parts[i].last_offset + 1,
                                        parts[i].hi);
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
        free(parts);
        cr_assert_fail("consumer did not reach the end of every partition within %d ms:%s", timeout_ms, detail);
    }

    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    free(parts);

    sort_topics = topics;
    sort_n_topics = n_topics;
    qsort(out->v, out->n, sizeof(*out->v), msg_cmp);
    /* A refetch could hand us an offset twice: that is the consumer, not the relay. */
    size_t w = 0;
    for (size_t i = 0; i < out->n; i++) {
        if (w > 0 && !msg_cmp(&out->v[w - 1], &out->v[i])) {
            msg_free(&out->v[i]);
            continue;
        }
        out->v[w++] = out->v[i];
    }
    out->n = w;
}

void e2e_msgs_free(struct e2e_msgs *m)
{
    for (size_t i = 0; i < m->n; i++)
        msg_free(&m->v[i]);
    free(m->v);
    memset(m, 0, sizeof(*m));
}

const char *e2e_msg_header(const struct e2e_msg *m, const char *name)
{
    for (size_t i = 0; i < m->n_headers; i++)
        if (!strcmp(m->headers[i].name, name))
            return m->headers[i].value;
    return NULL;
}

size_t e2e_msg_header_count(const struct e2e_msg *m, const char *name)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n_headers; i++)
        n += !strcmp(m->headers[i].name, name);
    return n;
}

/* ---- checking what arrived ---------------------------------------------- */

bool e2e_check(struct e2e_report *r, bool ok, const char *fmt, ...)
{
    if (ok)
        return true;
    r->n_fail++;
    if (r->n_fail <= 15 && r->len < sizeof(r->text) - 2) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(r->text + r->len, sizeof(r->text) - r->len - 1, fmt, ap);
        va_end(ap);
        if (n > 0)
            r->len += (size_t)n < sizeof(r->text) - r->len - 1 ? (size_t)n : sizeof(r->text) - r->len - 2;
        r->text[r->len++] = '\n';
        r->text[r->len] = '\0';
    }
    return false;
}

void e2e_report_assert(const struct e2e_report *r, const char *what)
{
    cr_assert(r->n_fail == 0, "%s: %zu check(s) failed; the first ones:\n%s", what, r->n_fail, r->text);
}

static char *dup_or_null(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? NULL : strdup(PQgetvalue(res, row, col));
}

void e2e_rows_load(struct e2e_ctx *t, struct e2e_rows *rows)
{
    PGresult *res = e2e_query(t->conn,
        "SELECT id, event_id::text, aggregate_type, aggregate_id, event_type, topic, payload::text,"
        "       (extract(epoch FROM created_at) * 1000000)::bigint,"
        "       to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
        "       (SELECT string_agg(key || '=' || value, E'\\n' ORDER BY key COLLATE \"C\")"
        "          FROM jsonb_each_text(CASE WHEN jsonb_typeof(headers) = 'object' THEN headers END)),"
        "       sent_at IS NOT NULL"
        "  FROM %s ORDER BY id", t->qtable);
    int n = PQntuples(res);
    rows->n = (size_t)n;
    rows->v = calloc((size_t)n + 1, sizeof(*rows->v));
    if (!rows->v)
        abort();
    for (int i = 0; i < n; i++) {
        struct e2e_row *r = &rows->v[i];
        r->id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
        r->event_id = dup_or_null(res, i, 1);
        r->aggregate_type = dup_or_null(res, i, 2);
        r->aggregate_id = dup_or_null(res, i, 3);
        r->event_type = dup_or_null(res, i, 4);
        r->topic = dup_or_null(res, i, 5);
        r->payload = dup_or_null(res, i, 6);
        r->created_us = strtoll(PQgetvalue(res, i, 7), NULL, 10);
        r->created_at = dup_or_null(res, i, 8);
        r->custom_headers = dup_or_null(res, i, 9);
        r->sent = PQgetvalue(res, i, 10)[0] == 't';
    }
    PQclear(res);
}

void e2e_rows_free(struct e2e_rows *rows)
{
    for (size_t i = 0; i < rows->n; i++) {
        struct e2e_row *r = &rows->v[i];
        free(r->event_id);
        free(r->aggregate_type);
        free(r->aggregate_id);
        free(r->event_type);
        free(r->topic);
        free(r->payload);
        free(r->created_at);
        free(r->custom_headers);
    }
    free(rows->v);
    memset(rows, 0, sizeof(*rows));
}

struct e2e_row *e2e_rows_find(const struct e2e_rows *rows, int64_t id)
{
    size_t lo = 0, hi = rows->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rows->v[mid].id == id)
            return &rows->v[mid];
        if (rows->v[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Renders ${aggregate_type} / ${event_type} the way the contract says. */
static void render_topic(const char *tmpl, const struct e2e_row *row, char *out, size_t outlen)
{
    size_t o = 0;
    for (const char *p = tmpl; *p && o + 1 < outlen;) {
        const char *sub = NULL;
        size_t skip = 0;
        if (!strncmp(p, "${aggregate_type}", 17)) {
            sub = row->aggregate_type;
            skip = 17;
        } else if (!strncmp(p, "${event_type}", 13)) {
            sub = row->event_type;
            skip = 13;
        }
        if (sub) {
            o += (size_t)snprintf(out + o, outlen - o, "%s", sub);
            if (o >= outlen)
                o = outlen - 1;
            p += skip;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
}

static const char *expected_topic(const struct e2e_ctx *t, const struct e2e_row *row, char *buf, size_t len)
{
    if (row->topic && *row->topic)
        return row->topic;
    render_topic(t->topic_template, row, buf, len);
    return buf;
}

/* Orders headers by name, then value, as the SQL side does (COLLATE "C"). */
static int header_cmp(const void *a, const void *b)
{
    const struct e2e_header *x = *(const struct e2e_header *const *)a, *y = *(const struct e2e_header *const *)b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return strcmp(x->value ? x->value : "", y->value ? y->value : "");
}

/* The message's headers after the six fixed ones, as "k=v\n…" sorted; NULL if none. */
static char *custom_headers_of(const struct e2e_msg *m)
{
    if (m->n_headers <= 6)
        return NULL;
    size_t n = m->n_headers - 6, total = 1;
    const struct e2e_header **items = xmalloc(n * sizeof(*items));
    for (size_t i = 0; i < n; i++) {
        items[i] = &m->headers[6 + i];
        total += strlen(items[i]->name) + (items[i]->value ? items[i]->value_len : 6) + 2;
    }
    qsort(items, n, sizeof(*items), header_cmp);
    char *s = xmalloc(total);
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(s + o, total - o, "%s%s=%s", i ? "\n" : "", items[i]->name,
                              items[i]->value ? items[i]->value : "(null)");
    free(items);
    return s;
}

struct key_order {
    char *topic;
    char *key;
    int32_t partition;
    int64_t last_id;            /* the last first delivery: ids must grow */
    int64_t last_offset;
    int64_t max_id;             /* the highest id delivered for this key */
    int64_t tail_id;            /* the id of the key's latest message: must be max_id at the end */
    int64_t tail_offset;
};

static bool streq_n(const char *a, const char *b)
{
    if (!a || !b)
        return a == b;
    return !strcmp(a, b);
}

bool e2e_check_order = true;

void e2e_verify(const struct e2e_ctx *t, struct e2e_rows *rows, const struct e2e_msgs *msgs,
                struct e2e_report *rep)
{
    static const char *const fixed[6] = {"event_id", "event_type", "aggregate_type",
                                         "aggregate_id", "outbox_id", "created_at"};
    size_t n_keys = 0, cap_keys = 256;
    struct key_order *keys = xmalloc(cap_keys * sizeof(*keys));

    for (size_t i = 0; i < rows->n; i++)
        rows->v[i].deliveries = 0;

    for (size_t i = 0; i < msgs->n; i++) {
        const struct e2e_msg *m = &msgs->v[i];
        const char *oid = e2e_msg_header(m, "outbox_id");
        char where[300];
        snprintf(where, sizeof(where), "%s[%d]@%" PRId64, m->topic, m->partition, m->offset);
        if (!e2e_check(rep, oid != NULL, "%s: no outbox_id header", where))
            continue;
        char *end;
        long long id = strtoll(oid, &end, 10);
        struct e2e_row *row = *end ? NULL : e2e_rows_find(rows, id);
        if (!e2e_check(rep, row != NULL, "%s: outbox_id %s matches no row of the table", where, oid))
            continue;
        bool first = row->deliveries == 0;
        row->deliveries++;

        char tbuf[300];
        const char *want_topic = expected_topic(t, row, tbuf, sizeof(tbuf));
        e2e_check(rep, !strcmp(m->topic, want_topic), "%s: row %lld went to topic %s, expected %s", where, id,
                  m->topic, want_topic);
        e2e_check(rep, streq_n(m->key, row->aggregate_id), "%s: row %lld key %s, expected %s", where, id,
                  m->key ? m->key : "(null)", row->aggregate_id);
        if (row->payload)
            e2e_check(rep, m->value && !strcmp(m->value, row->payload),
                      "%s: row %lld value %.200s, expected %.200s", where, id, m->value ? m->value : "(null)",
                      row->payload);
        else
            e2e_check(rep, m->value == NULL, "%s: row %lld has payload NULL but the message value is %.200s "
                      "(expected a tombstone)", where, id, m->value ? m->value : "");
        e2e_check(rep, m->tstype == RD_KAFKA_TIMESTAMP_CREATE_TIME,
                  "%s: row %lld timestamp type %d, expected CreateTime", where, id, (int)m->tstype);
        int64_t ms_floor = row->created_us / 1000, ms_round = (row->created_us + 500) / 1000;
        e2e_check(rep, m->timestamp == ms_floor || m->timestamp == ms_round,
                  "%s: row %lld timestamp %" PRId64 ", expected %" PRId64 " (created_at %s)", where, id,
                  m->timestamp, ms_floor, row->created_at);

        /* Headers: the six fixed ones first, in order, then the row's own. */
        const char *want[6] = {row->event_id, row->event_type, row->aggregate_type, row->aggregate_id, oid,
                               row->created_at};
        char idbuf[32];
        snprintf(idbuf, sizeof(idbuf), "%lld", id);
        want[4] = idbuf;
        bool headers_ok = m->n_headers >= 6;
        for (size_t h = 0; headers_ok && h < 6; h++)
            headers_ok = !strcmp(m->headers[h].name, fixed[h]) && m->headers[h].value &&
                         !strcmp(m->headers[h].value, want[h]);
        if (!headers_ok) {
            char got[600] = "";
            size_t o = 0;
            for (size_t h = 0; h < m->n_headers && o < sizeof(got) - 50; h++)
                o += (size_t)snprintf(got + o, sizeof(got) - o, "%s%s=%s", h ? ", " : "", m->headers[h].name,
                                      m->headers[h].value ? m->headers[h].value : "(null)");
            e2e_check(rep, false,
                      "%s: row %lld headers [%s], expected first event_id=%s, event_type=%s, "
                      "aggregate_type=%s, aggregate_id=%s, outbox_id=%s, created_at=%s",
                      where, id, got, want[0], want[1], want[2], want[3], want[4], want[5]);
        } else {
            char *custom = custom_headers_of(m);
            e2e_check(rep, streq_n(custom, row->custom_headers),
                      "%s: row %lld custom headers {%s}, expected {%s}", where, id, custom ? custom : "",
                      row->custom_headers ? row->custom_headers : "");
            free(custom);
        }

        /* Order per topic+key: first deliveries in id order (redeliveries after a
         * crash legitimately come later), and the key's latest message is its
         * newest row, which is what latest-per-key consumers and compaction keep. */
        if (!m->key)
            continue;
        struct key_order *k = NULL;
        for (size_t j = n_keys; j-- > 0;)
            if (!strcmp(keys[j].key, m->key) && !strcmp(keys[j].topic, m->topic)) {
                k = &keys[j];
                break;
            }
        if (!k) {
            if (n_keys == cap_keys) {
                cap_keys *= 2;
                keys = realloc(keys, cap_keys * sizeof(*keys));
                if (!keys)
                    abort();
            }
            k = &keys[n_keys++];
            *k = (struct key_order){.topic = m->topic, .key = m->key, .partition = m->partition,
                                    .last_id = id, .last_offset = m->offset, .max_id = id,
                                    .tail_id = id, .tail_offset = m->offset};
            continue;
        }
        if (!e2e_check(rep, k->partition == m->partition,
                       "topic %s key %s is in partitions %d and %d (row %lld at %s)", m->topic, m->key,
                       k->partition, m->partition, id, where))
            continue;
        k->tail_id = id;
        k->tail_offset = m->offset;
        if (id > k->max_id)
            k->max_id = id;
        if (!first)
            continue;
        e2e_check(rep, !e2e_check_order || id > k->last_id,
                  "%s: key %s order broken: outbox_id %lld at offset %" PRId64 " after outbox_id %" PRId64
                  " at offset %" PRId64, where, m->key, id, m->offset, k->last_id, k->last_offset);
        k->last_id = id;
        k->last_offset = m->offset;
    }
    for (size_t j = 0; e2e_check_order && j < n_keys; j++)
        e2e_check(rep, keys[j].tail_id == keys[j].max_id,
                  "topic %s key %s ends with outbox_id %" PRId64 " at offset %" PRId64
                  ", an older event than its newest delivered row %" PRId64,
                  keys[j].topic, keys[j].key, keys[j].tail_id, keys[j].tail_offset, keys[j].max_id);
    free(keys);
}

char **e2e_topics_of(const struct e2e_ctx *t, const struct e2e_rows *rows, size_t *n)
{
    size_t cap = 8, cnt = 0;
    char **v = xmalloc(cap * sizeof(*v));
    for (size_t i = 0; i < rows->n; i++) {
        char buf[300];
        const char *topic = expected_topic(t, &rows->v[i], buf, sizeof(buf));
        bool seen = false;
        for (size_t j = 0; j < cnt && !seen; j++)
            seen = !strcmp(v[j], topic);
        if (seen)
            continue;
        if (cnt + 1 >= cap) {
            cap *= 2;
            v = realloc(v, cap * sizeof(*v));
            if (!v)
                abort();
        }
        v[cnt++] = strdup(topic);
    }
    v[cnt] = NULL;
    if (n)
        *n = cnt;
    return v;
}

void e2e_topics_free(char **topics)
{
    for (size_t i = 0; topics && topics[i]; i++)
        free(topics[i]);
    free(topics);
}

/* ---- failure handling ------------------------------------------------------ */

int e2e_relay_log_count(const struct e2e_relay *r, const char *needle)
{
    char *s = read_file(r->log_path, NULL);
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    free(s);
    return n;
}

void e2e_pg_restart(struct e2e_ctx *t)
{
    if (!t->env->stack_sh || !t->env->stack_dir)
        cr_skip_test("needs OUTBOX_RELAY_TEST_STACK_SH and _DIR to restart PostgreSQL");
    const char *args[] = {"/bin/bash", t->env->stack_sh, "pg_ctl", t->env->stack_dir, "restart",
                          "-m", "fast", "-w", "-t", "60", NULL};
    char *out = NULL, *err = NULL;
    int rc = e2e_run_cmd(args, 90000, &out, &err);
    cr_assert_eq(rc, 0, "pg_ctl restart failed (%d): %s %s", rc, out ? out : "", err ? err : "");
    free(out);
    free(err);
    /* pg_ctl -w returns once the postmaster accepts connections; retry briefly anyway. */
    int64_t deadline = e2e_now_ms() + 30000;
    do {
        PQreset(t->conn);
        if (PQstatus(t->conn) == CONNECTION_OK)
            break;
        e2e_sleep_ms(100);
    } while (e2e_now_ms() < deadline);
    cr_assert_eq(PQstatus(t->conn), CONNECTION_OK, "cannot reconnect after the restart: %s",
                 PQerrorMessage(t->conn));
    e2e_exec(t->conn, "SET client_min_messages = warning");
}

int e2e_dead(struct e2e_ctx *t, const char *const *words, const char *const *extra, char **out,
             char **err)
{
    const char *args[E2E_MAX_ARGS];
    int n = 0;
    args[n++] = "dead";
    for (int i = 0; words && words[i]; i++) {
        cr_assert(n < E2E_MAX_ARGS - 16, "too many arguments");
        args[n++] = words[i];
    }
    /* After the action and ids: the options may follow them. */
    e2e_base_args(t, args, &n);
    for (int i = 0; extra && extra[i]; i++) {
        cr_assert(n + 3 < E2E_MAX_ARGS, "too many arguments");
        args[n++] = "-X";
        args[n++] = extra[i];
    }
    args[n] = NULL;
    return e2e_run_relay(args, 30000, out, err);
}

void e2e_read_back(struct e2e_ctx *t, int timeout_ms, struct e2e_rows *rows, struct e2e_msgs *msgs,
                   struct e2e_report *rep)
{
    e2e_rows_load(t, rows);
    size_t n_topics;
    char **topics = e2e_topics_of(t, rows, &n_topics);
    e2e_consume_from(t->kafka, false, (const char *const *)topics, n_topics, timeout_ms, msgs);
    e2e_topics_free(topics);
    e2e_check(rep, msgs->n_missing_topics == 0, "%zu topic(s) missing", msgs->n_missing_topics);
    e2e_verify(t, rows, msgs, rep);
}
