/* postgres.c — PostgreSQL from the tests: queries that assert, rows
 * enqueued in bulk, waits on a condition (see testlib.h). */
#include "testlib.h"
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

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

long long e2e_count_where(struct e2e_ctx *t, const char *cond)
{
    return e2e_query_int(t->conn, "SELECT count(*) FROM %s WHERE %s", t->qtable, cond);
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

/* ---- log-based capture -------------------------------------------------- */

void e2e_wal_enable(struct e2e_ctx *t)
{
    t->wal = true;
}

bool e2e_wal_wait_confirmed(struct e2e_ctx *t, int timeout_ms)
{
    PGresult *res = e2e_query(t->conn, "SELECT pg_logical_emit_message(true, 'e2e-fence', '')::text");
    char fence[64];
    snprintf(fence, sizeof fence, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return e2e_wait_sql(t, timeout_ms,
                        "SELECT confirmed_flush_lsn > '%s'::pg_lsn FROM pg_replication_slots "
                        "WHERE slot_name = '%s'", fence, t->table);
}

long long e2e_terminate_lock_holders(struct e2e_ctx *t, const char *application_name)
{
    return e2e_query_int(t->conn,
                         "SELECT count(pg_terminate_backend(pid)) FROM (SELECT DISTINCT l.pid "
                         "FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                         "WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = '%s') h",
                         application_name);
}
