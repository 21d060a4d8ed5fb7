/* testlib.c — the stack's environment, per-test setup and PostgreSQL helpers (see testlib.h). */
#include "testlib.h"
#include "internal.h"

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
    char *sql = tl_vfmt(fmt, ap);
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
    char *sql = tl_vfmt(fmt, ap);
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
