/* repl.c — a logical replication connection on a uv_poll_t; see repl.h.
 *
 * The same discipline as pg.c: libpq in non-blocking mode, the socket watched
 * in the direction libpq waits for, the loop never blocked. Once streaming,
 * PQgetCopyData(async) hands out whole CopyData messages; a message the owner
 * declines stays with us and reading stops until it is taken. */
#include "io/repl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/pg.h"

static void on_poll(uv_poll_t *h, int status, int events);
static void on_attempt_done(PGconn *conn, const char *why, void *arg);

static void close_free_cb(uv_handle_t *h)
{
    free(h);
}

static int watch(struct repl_conn *rc, int events)
{
    return pq_watch_set(&rc->w, rc->conn, events);
}

static void teardown(struct repl_conn *rc)
{
    pg_attempt_cancel(&rc->att);
    pq_watch_drop(&rc->w);
    if (rc->kick)
        uv_timer_stop(rc->kick);
    if (rc->held) {
        PQfreemem(rc->held);
        rc->held = NULL;
    }
    if (rc->conn) {
        PQfinish(rc->conn);
        rc->conn = NULL;
    }
    rc->state = REPL_OFF;
    rc->stopped = false;
}

static void lost(struct repl_conn *rc, const char *why, const char *sqlstate)
{
    char msg[512];
    pg_error_text(rc->conninfo, why, msg, sizeof msg);
    char state[8];
    snprintf(state, sizeof(state), "%s", sqlstate ? sqlstate : "");
    teardown(rc);
    if (rc->cb.on_lost)
        rc->cb.on_lost(rc, msg, state, rc->cb.arg);
}

/* The stream ended or the command failed: the server's error says why. */
static void lost_with_result(struct repl_conn *rc)
{
    char why[512] = "replication stream ended";
    char state[8] = "";
    PGresult *res;
    while ((res = PQgetResult(rc->conn)) != NULL) {
        ExecStatusType st = PQresultStatus(res);
        if (st == PGRES_FATAL_ERROR || st == PGRES_NONFATAL_ERROR) {
            snprintf(why, sizeof(why), "%s", PQresultErrorMessage(res));
            snprintf(state, sizeof(state), "%s", pg_sqlstate(res));
        }
        PQclear(res);
        if (PQisBusy(rc->conn))
            break;
    }
    if (!*state && PQstatus(rc->conn) == CONNECTION_BAD)
        snprintf(why, sizeof(why), "%s", PQerrorMessage(rc->conn));
    lost(rc, why, state);
}

int repl_init(struct repl_conn *rc, uv_loop_t *loop, const char *conninfo,
              const struct repl_callbacks *cb)
{
    memset(rc, 0, sizeof(*rc));
    rc->loop = loop;
    pq_watch_init(&rc->w, loop, on_poll, rc);
    rc->cb = *cb;
    rc->conninfo = strdup(conninfo ? conninfo : "");
    rc->kick = malloc(sizeof(*rc->kick));
    if (!rc->conninfo || !rc->kick) {
        free(rc->conninfo);
        free(rc->kick);
        rc->conninfo = NULL;
        rc->kick = NULL;
        return -ENOMEM;
    }
    uv_timer_init(loop, rc->kick);
    rc->kick->data = rc;
    return pg_attempt_init(&rc->att, loop, &rc->w, rc->conninfo, true, on_attempt_done, rc);
}

int repl_start(struct repl_conn *rc, const char *start_sql)
{
    if (rc->state != REPL_OFF)
        return -EALREADY;
    free(rc->start_sql);
    rc->start_sql = strdup(start_sql);
    if (!rc->start_sql)
        return -ENOMEM;
    rc->state = REPL_CONNECTING;
    if (pg_attempt_start(&rc->att) < 0) {
        teardown(rc);
        return -EIO;
    }
    return 0;
}

/* A host of the list took the connection: START_REPLICATION goes out. */
static void on_attempt_done(PGconn *conn, const char *why, void *arg)
{
    struct repl_conn *rc = arg;
    if (!conn) {
        lost(rc, why, NULL);
        return;
    }
    rc->conn = conn;
    if (PQsetnonblocking(rc->conn, 1) != 0 || !PQsendQuery(rc->conn, rc->start_sql)) {
        lost(rc, PQerrorMessage(rc->conn), NULL);
        return;
    }
    rc->state = REPL_STARTING;
    if (watch(rc, PQflush(rc->conn) == 1 ? UV_READABLE | UV_WRITABLE : UV_READABLE) < 0)
        lost(rc, "cannot watch socket", NULL);
}

/* START_REPLICATION answers with CopyBothResponse, or an error. */
static void starting_step(struct repl_conn *rc)
{
    if (PQisBusy(rc->conn))
        return;
    PGresult *res = PQgetResult(rc->conn);
    if (!res || PQresultStatus(res) != PGRES_COPY_BOTH) {
        char why[512], state[8];
        snprintf(why, sizeof(why), "%s",
                 res ? PQresultErrorMessage(res) : "START_REPLICATION returned nothing");
        snprintf(state, sizeof(state), "%s", res ? pg_sqlstate(res) : "");
        PQclear(res);
        lost(rc, why, state);
        return;
    }
    PQclear(res);
    rc->state = REPL_STREAMING;
    if (rc->cb.on_streaming)
        rc->cb.on_streaming(rc, rc->cb.arg);
}

/* Hands out what libpq holds, one message at a time, until the owner
 * declines one or no whole message is left. */
static void read_messages(struct repl_conn *rc)
{
    while (rc->state == REPL_STREAMING && !rc->stopped) {
        if (!rc->held) {
            int n = PQgetCopyData(rc->conn, &rc->held, 1);
            if (n == 0) {
                if (rc->cb.on_idle)
                    rc->cb.on_idle(rc, rc->cb.arg);
                return;
            }
            if (n < 0) {
                rc->held = NULL;
                lost_with_result(rc);
                return;
            }
            rc->held_len = n;
        }
        if (!rc->cb.on_data(rc, (const uint8_t *)rc->held, (size_t)rc->held_len, rc->cb.arg)) {
            if (rc->state == REPL_STREAMING) {
                rc->stopped = true;
                if (watch(rc, rc->w.events & UV_WRITABLE) < 0)
                    lost(rc, "cannot watch socket", NULL);
            }
            return;
        }
        if (rc->held) { /* the callback may have closed us */
            PQfreemem(rc->held);
            rc->held = NULL;
        }
    }
}

static void on_kick(uv_timer_t *t)
{
    struct repl_conn *rc = t->data;
    if (rc->state != REPL_STREAMING)
        return;
    if (!PQconsumeInput(rc->conn)) {
        lost(rc, PQerrorMessage(rc->conn), NULL);
        return;
    }
    read_messages(rc);
}

void repl_resume(struct repl_conn *rc)
{
    if (rc->state != REPL_STREAMING || !rc->stopped)
        return;
    rc->stopped = false;
    if (watch(rc, UV_READABLE | (rc->w.events & UV_WRITABLE)) < 0) {
        lost(rc, "cannot watch socket", NULL);
        return;
    }
    uv_timer_start(rc->kick, on_kick, 0, 0);
}

static void on_resume(uv_timer_t *t)
{
    repl_resume(t->data);
}

void repl_resume_after(struct repl_conn *rc, uint64_t ms)
{
    if (rc->state == REPL_STREAMING)
        uv_timer_start(rc->kick, on_resume, ms, 0);
}

void repl_kick(struct repl_conn *rc)
{
    if (rc->state != REPL_STREAMING)
        return;
    if (rc->stopped) {
        repl_resume(rc);
        return;
    }
    uv_timer_start(rc->kick, on_kick, 0, 0);
}

/* After CopyDone: the server's last messages are read and dropped until it
 * ends the command. */
static void ending_step(struct repl_conn *rc)
{
    for (;;) {
        char *buf = NULL;
        int n = PQgetCopyData(rc->conn, &buf, 1);
        if (n > 0) {
            PQfreemem(buf);
            continue;
        }
        if (n == 0)
            return;
        break;
    }
    lost_with_result(rc);
}

int repl_end(struct repl_conn *rc)
{
    if (rc->state != REPL_STREAMING)
        return -ENOTCONN;
    if (rc->held) {
        PQfreemem(rc->held);
        rc->held = NULL;
    }
    rc->stopped = false;
    if (PQputCopyEnd(rc->conn, NULL) < 0) {
        lost(rc, PQerrorMessage(rc->conn), NULL);
        return 0;
    }
    rc->state = REPL_ENDING;
    int f = PQflush(rc->conn);
    if (f < 0 || watch(rc, UV_READABLE | (f == 1 ? UV_WRITABLE : 0)) < 0)
        lost(rc, f < 0 ? PQerrorMessage(rc->conn) : "cannot watch socket", NULL);
    return 0;
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    struct repl_conn *rc = h->data;
    if (!rc || !pq_watch_is(&rc->w, h))
        return;
    if (status < 0 && rc->state != REPL_CONNECTING) {
        lost(rc, pq_watch_failure(rc->conn, status), NULL);
        return;
    }
    if (rc->state == REPL_CONNECTING) {
        pg_attempt_step(&rc->att);
        return;
    }
    if (events & UV_WRITABLE) {
        int f = PQflush(rc->conn);
        if (f < 0) {
            lost(rc, PQerrorMessage(rc->conn), NULL);
            return;
        }
        int want = (rc->stopped ? 0 : UV_READABLE) | (f == 1 ? UV_WRITABLE : 0);
        if (rc->state == REPL_STARTING || rc->state == REPL_ENDING)
            want |= UV_READABLE;
        if (watch(rc, want) < 0) {
            lost(rc, "cannot watch socket", NULL);
            return;
        }
    }
    if (!(events & UV_READABLE))
        return;
    if (!PQconsumeInput(rc->conn)) {
        lost(rc, PQerrorMessage(rc->conn), NULL);
        return;
    }
    if (rc->state == REPL_STARTING)
        starting_step(rc);
    if (rc->state == REPL_STREAMING)
        read_messages(rc);
    else if (rc->state == REPL_ENDING)
        ending_step(rc);
}

int repl_send(struct repl_conn *rc, const uint8_t *buf, size_t len)
{
    if (rc->state != REPL_STREAMING)
        return -ENOTCONN;
    if (PQputCopyData(rc->conn, (const char *)buf, (int)len) < 0) {
        lost(rc, PQerrorMessage(rc->conn), NULL);
        return -EIO;
    }
    int f = PQflush(rc->conn);
    if (f < 0) {
        lost(rc, PQerrorMessage(rc->conn), NULL);
        return -EIO;
    }
    if (f == 1 && watch(rc, rc->w.events | UV_WRITABLE) < 0) {
        lost(rc, "cannot watch socket", NULL);
        return -EIO;
    }
    return 0;
}

void repl_close(struct repl_conn *rc)
{
    teardown(rc);
}

void repl_free(struct repl_conn *rc)
{
    teardown(rc);
    pg_attempt_free(&rc->att);
    if (rc->kick) {
        uv_close((uv_handle_t *)rc->kick, close_free_cb);
        rc->kick = NULL;
    }
    free(rc->conninfo);
    free(rc->start_sql);
    rc->conninfo = rc->start_sql = NULL;
}
