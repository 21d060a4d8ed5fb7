/* stack.c — the test stack (tests/support/stack.sh) from a test: its
 * environment, a test's own place in it (names, log directory, connection),
 * and the controls of its PostgreSQL and its mock broker (see testlib.h). */
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    /* A slot left behind would keep the shared cluster's WAL for ever. */
    if (t->wal && t->conn) {
        char sql[256];
        snprintf(sql, sizeof sql, "SELECT pg_drop_replication_slot(slot_name) FROM "
                                  "pg_replication_slots WHERE slot_name = '%s'", t->table);
        PQclear(PQexec(t->conn, sql));
    }
    if (t->conn)
        PQfinish(t->conn);
    t->conn = NULL;
}

/* ---- the stack's services ------------------------------------------------ */

void e2e_pg_restart(struct e2e_ctx *t)
{
    if (!t->env->stack_sh || !t->env->stack_dir)
        cr_skip_test("needs OUTBOX_RELAY_TEST_STACK_SH and _DIR to restart PostgreSQL");
    const char *args[] = {"/bin/bash", t->env->stack_sh, "pg_ctl", t->env->stack_dir, "restart",
                          "-m", "fast", "-w", "-t", "60", NULL};
    char *out = NULL, *err = NULL;
    int rc = e2e_run_cmd(args, 90000, &out, &err);
    if (rc != 0) {
        /* The tests after this one need the server: it is brought back the
         * hard way before this test fails. */
        const char *stop[] = {"/bin/bash", t->env->stack_sh, "pg_ctl", t->env->stack_dir, "stop",
                              "-m", "immediate", "-w", NULL};
        const char *start[] = {"/bin/bash", t->env->stack_sh, "pg_ctl", t->env->stack_dir, "start",
                               "-w", "-t", "60", NULL};
        e2e_run_cmd(stop, 30000, NULL, NULL);
        e2e_run_cmd(start, 90000, NULL, NULL);
        cr_assert_fail("pg_ctl restart failed (%d): %s %s", rc, out ? out : "", err ? err : "");
    }
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

bool e2e_mock_command(const struct e2e_ctx *t, const char *fmt, ...)
{
    if (!t->env->mock_control)
        return false;
    va_list ap;
    va_start(ap, fmt);
    char *cmd = tl_vfmt(fmt, ap);
    va_end(ap);
    /* The broker reads the FIFO when it next wakes; the token it writes back
     * once the command is applied keeps a test from starting the relay
     * before its fault is in place. */
    static unsigned seq;
    char token[48], ack[PATH_MAX];
    snprintf(token, sizeof(token), "%ld.%u\n", (long)getpid(), ++seq);
    snprintf(ack, sizeof(ack), "%s.ack", t->env->mock_control);
    int fd = open(t->env->mock_control, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    cr_assert(fd >= 0, "open mock control %s: %s", t->env->mock_control, strerror(errno));
    dprintf(fd, "@%.*s %s\n", (int)strlen(token) - 1, token, cmd);
    close(fd);
    bool applied = false;
    for (int64_t deadline = e2e_now_ms() + 10000; !applied && e2e_now_ms() < deadline;) {
        char *seen = tl_read_file(ack, NULL);
        for (const char *p = seen; p && *p && !applied; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : "")
            applied = strncmp(p, token, strlen(token)) == 0;
        free(seen);
        if (!applied)
            e2e_sleep_ms(5);
    }
    if (!applied)
        fprintf(stderr, "e2e: mock broker did not apply \"%s\" within 10 s\n", cmd);
    free(cmd);
    return applied;
}
