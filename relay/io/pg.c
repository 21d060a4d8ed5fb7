/* pg.c — libpq in non-blocking mode on a uv_poll_t.
 *
 * libpq tells us which direction it waits for (PQconnectPoll while
 * connecting, PQflush while sending); we translate that into poll events and
 * never block the loop. */
#include "io/pg.h"
#include "io/pq_watch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "core/pg_binary.h"
#include "base/redact.h"
#include "core/sql.h"

static void on_poll(uv_poll_t *h, int status, int events);
static void on_attempt_done(PGconn *conn, const char *why, void *arg);

static int watch(struct pg_conn *pg, int events)
{
    return pq_watch_set(&pg->w, pg->conn, events);
}

static void teardown(struct pg_conn *pg)
{
    pg_attempt_cancel(&pg->att);
    pq_watch_drop(&pg->w);
    if (pg->last) {
        PQclear(pg->last);
        pg->last = NULL;
    }
    if (pg->conn) {
        PQfinish(pg->conn);
        pg->conn = NULL;
    }
    pg->state = PG_DISCONNECTED;
}

/* The connection is gone: the running statement (if any) completes with NULL,
 * then the owner hears about it once. */
void pg_error_text(const char *conninfo, const char *why, char *out, size_t len)
{
    /* libpq's messages may quote the conninfo, password included; the owner logs them. */
    char *clean = redact_message(conninfo, why && *why ? why : "connection lost");
    snprintf(out, len, "%s", clean ? clean : "connection lost");
    free(clean);
    size_t n = strlen(out);
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
        out[--n] = '\0';
}

static void lost(struct pg_conn *pg, const char *why)
{
    char msg[512];
    pg_error_text(pg->conninfo, why, msg, sizeof msg);

    pg_result_cb cb = pg->result_cb;
    void *arg = pg->result_arg;
    pg->result_cb = NULL;
    teardown(pg);
    if (cb)
        cb(pg, NULL, arg);
    if (pg->cb.on_lost)
        pg->cb.on_lost(pg, msg, pg->cb.arg);
}

/* Server notices and libpq's own warnings go through the relay's logger, not
 * straight to stderr. */
static void on_notice(void *arg, const char *message)
{
    (void)arg;
    log_warn("postgres notice", "detail=%s", log_quote(message));
}

int pg_init(struct pg_conn *pg, uv_loop_t *loop, const char *conninfo,
            const struct pg_callbacks *cb)
{
    memset(pg, 0, sizeof(*pg));
    pg->loop = loop;
    pq_watch_init(&pg->w, loop, on_poll, pg);
    pg->cb = *cb;
    pg->conninfo = strdup(conninfo ? conninfo : "");
    if (!pg->conninfo)
        return -ENOMEM;
    return pg_attempt_init(&pg->att, loop, &pg->w, pg->conninfo, false, on_attempt_done, pg);
}

int pg_connect(struct pg_conn *pg)
{
    if (pg->state != PG_DISCONNECTED)
        return -EALREADY;
    pg->state = PG_CONNECTING;
    if (pg_attempt_start(&pg->att) < 0) {
        teardown(pg);
        return -EIO;
    }
    return 0;
}

const char *pg_connect_failure(const struct pg_conn *pg)
{
    return pg->att.why;
}

/* A host of the list took the connection, or none did. */
static void on_attempt_done(PGconn *conn, const char *why, void *arg)
{
    struct pg_conn *pg = arg;
    if (!conn) {
        lost(pg, why);
        return;
    }
    pg->conn = conn;
    PQsetNoticeProcessor(pg->conn, on_notice, pg);
    if (PQsetnonblocking(pg->conn, 1) != 0 || watch(pg, UV_READABLE) < 0) {
        lost(pg, PQerrorMessage(pg->conn));
        return;
    }
    pg->state = PG_READY;
    if (pg->cb.on_connected)
        pg->cb.on_connected(pg, pg->cb.arg);
}

static void drain_notifies(struct pg_conn *pg)
{
    PGnotify *n;
    while (pg->conn && (n = PQnotifies(pg->conn)) != NULL) {
        if (pg->cb.on_notify)
            pg->cb.on_notify(pg, n->relname, pg->cb.arg);
        PQfreemem(n);
    }
}

/* Collects results while libpq can hand them out without blocking; the
 * statement is complete when PQgetResult returns NULL. */
static void collect_results(struct pg_conn *pg)
{
    while (pg->state == PG_BUSY && !PQisBusy(pg->conn)) {
        PGresult *res = PQgetResult(pg->conn);
        if (res) {
            if (pg->last)
                PQclear(pg->last);
            pg->last = res;
            continue;
        }
        pg_result_cb cb = pg->result_cb;
        void *arg = pg->result_arg;
        PGresult *final = pg->last;
        pg->last = NULL;
        pg->result_cb = NULL;
        pg->state = PG_READY;
        /* The callback may send the next statement or even close us. */
        pg->keep = false;
        if (cb)
            cb(pg, final, arg);
        if (!pg->keep)
            PQclear(final);
        pg->keep = false;
    }
}

void pg_result_keep(struct pg_conn *pg)
{
    pg->keep = true;
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    struct pg_conn *pg = h->data;
    if (!pg || !pq_watch_is(&pg->w, h))
        return;
    if (status < 0 && pg->state != PG_CONNECTING) {
        lost(pg, pq_watch_failure(pg->conn, status));
        return;
    }
    if (pg->state == PG_CONNECTING) {
        pg_attempt_step(&pg->att);
        return;
    }

    if (events & UV_WRITABLE) {
        int f = PQflush(pg->conn);
        if (f < 0) {
            lost(pg, PQerrorMessage(pg->conn));
            return;
        }
        if (f == 0 && watch(pg, UV_READABLE) < 0) {
            lost(pg, "cannot watch socket");
            return;
        }
    }
    if (events & UV_READABLE) {
        if (!PQconsumeInput(pg->conn)) {
            lost(pg, PQerrorMessage(pg->conn));
            return;
        }
        drain_notifies(pg);
        if (!pg->conn)
            return;
        collect_results(pg);
        if (!pg->conn)
            return;
        drain_notifies(pg);
    }
    if (pg->conn && PQstatus(pg->conn) == CONNECTION_BAD)
        lost(pg, PQerrorMessage(pg->conn));
}

int pg_announced_pid(const struct pg_conn *pg)
{
    return pg->conn && PQstatus(pg->conn) == CONNECTION_OK ? PQbackendPID(pg->conn) : 0;
}

const char *pg_sqlstate(const PGresult *res)
{
    const char *s = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    return s ? s : "";
}

bool pg_ready(const struct pg_conn *pg)
{
    return pg->state == PG_READY;
}

bool pg_busy(const struct pg_conn *pg)
{
    return pg->state == PG_BUSY;
}

const char *pg_host(const struct pg_conn *pg)
{
    const char *h = pg->conn ? PQhost(pg->conn) : NULL;
    return h && *h ? h : "";
}

const char *pg_port(const struct pg_conn *pg)
{
    const char *p = pg->conn ? PQport(pg->conn) : NULL;
    return p && *p ? p : "";
}

int pg_server_version(const struct pg_conn *pg)
{
    return pg->conn ? PQserverVersion(pg->conn) : 0;
}

enum send_kind { SEND_QUERY, SEND_PREPARE, SEND_PREPARED, SEND_PREPARED_BINARY };

/* The one way a statement goes out: libpq queues it, we flush what the
 * socket takes and watch for the rest. */
static int send_statement(struct pg_conn *pg, enum send_kind kind, const char *name,
                          const char *sql, int nparams, const char *const *params,
                          pg_result_cb cb, void *arg)
{
    if (pg->state == PG_BUSY)
        return -EBUSY;
    if (pg->state != PG_READY)
        return -ENOTCONN;
    int ok = kind == SEND_QUERY
                 ? PQsendQueryParams(pg->conn, sql, nparams, NULL, params, NULL, NULL, 0)
             : kind == SEND_PREPARE
                 ? PQsendPrepare(pg->conn, name, sql, nparams, NULL)
                 : PQsendQueryPrepared(pg->conn, name, nparams, params, NULL, NULL,
                                       kind == SEND_PREPARED_BINARY);
    if (!ok) {
        lost(pg, PQerrorMessage(pg->conn));
        return -EIO;
    }
    pg->state = PG_BUSY;
    pg->result_cb = cb;
    pg->result_arg = arg;
    /* A large statement may not fit the socket buffer: then wait for writable too. */
    int f = PQflush(pg->conn);
    int rc = f < 0 ? -EIO : watch(pg, f == 1 ? (UV_READABLE | UV_WRITABLE) : UV_READABLE);
    if (rc < 0) {
        /* Failing here is reported by the return value, not by the result callback. */
        pg->result_cb = NULL;
        lost(pg, f < 0 ? PQerrorMessage(pg->conn) : "cannot watch socket");
        return -EIO;
    }
    return 0;
}

int pg_query(struct pg_conn *pg, const char *sql, int nparams, const char *const *params,
             pg_result_cb cb, void *arg)
{
    return send_statement(pg, SEND_QUERY, NULL, sql, nparams, params, cb, arg);
}

int pg_prepare(struct pg_conn *pg, const char *name, const char *sql, int nparams,
               pg_result_cb cb, void *arg)
{
    return send_statement(pg, SEND_PREPARE, name, sql, nparams, NULL, cb, arg);
}

int pg_query_prepared(struct pg_conn *pg, const char *name, int nparams,
                      const char *const *params, pg_result_cb cb, void *arg)
{
    return send_statement(pg, SEND_PREPARED, name, NULL, nparams, params, cb, arg);
}

int pg_query_prepared_binary(struct pg_conn *pg, const char *name, int nparams,
                             const char *const *params, pg_result_cb cb, void *arg)
{
    return send_statement(pg, SEND_PREPARED_BINARY, name, NULL, nparams, params, cb, arg);
}

void pg_close(struct pg_conn *pg)
{
    pg->result_cb = NULL;
    teardown(pg);
}

void pg_free(struct pg_conn *pg)
{
    pg_close(pg);
    pg_attempt_free(&pg->att);
    free(pg->conninfo);
    pg->conninfo = NULL;
}

int64_t pg_claim_id(const PGresult *res, int i)
{
    return pgb_int8(PQgetvalue(res, i, CLAIM_ID));
}

int64_t pg_claim_created_ms(const PGresult *res, int i)
{
    return pgb_time_epoch_ms(pgb_timestamptz(PQgetvalue(res, i, CLAIM_CREATED_AT)));
}

void pg_claim_row(const PGresult *res, int i, struct event_row *out)
{
    int64_t created = pgb_timestamptz(PQgetvalue(res, i, CLAIM_CREATED_AT));
    *out = (struct event_row){
        .id = pg_claim_id(res, i),
        .aggregate_type = PQgetvalue(res, i, CLAIM_AGGREGATE_TYPE),
        /* NULL in Debezium's table: a message without a key */
        .aggregate_id = PQgetisnull(res, i, CLAIM_AGGREGATE_ID)
                            ? NULL : PQgetvalue(res, i, CLAIM_AGGREGATE_ID),
        .event_type = PQgetvalue(res, i, CLAIM_EVENT_TYPE),
        .topic = PQgetisnull(res, i, CLAIM_TOPIC) ? NULL : PQgetvalue(res, i, CLAIM_TOPIC),
        .payload = PQgetisnull(res, i, CLAIM_PAYLOAD) ? NULL : PQgetvalue(res, i, CLAIM_PAYLOAD),
        .payload_len = (size_t)PQgetlength(res, i, CLAIM_PAYLOAD),
        .headers_json = PQgetisnull(res, i, CLAIM_HEADERS) ? NULL : PQgetvalue(res, i, CLAIM_HEADERS),
        .created_ms = pgb_time_epoch_ms(created),
    };
    /* A table whose event_id is not a uuid (a text column, say) is read as its text. */
    if (PQftype(res, CLAIM_EVENT_ID) == PGB_UUIDOID) {
        pgb_uuid_text(PQgetvalue(res, i, CLAIM_EVENT_ID), out->event_id_text);
        out->event_id = out->event_id_text;
    } else {
        out->event_id = PQgetvalue(res, i, CLAIM_EVENT_ID);
    }
    pgb_time_text(created, out->created_at_text);
    out->created_at = out->created_at_text;
}

void pg_claim_placed(const PGresult *res, int i, int first, struct event_row *out)
{
    int n = PQnfields(res) - first;
    out->n_placed = n > 0 && n <= EVENT_PLACEMENT_MAX ? (size_t)n : 0;
    for (size_t k = 0; k < out->n_placed; k++) {
        int c = first + (int)k;
        const char *v = PQgetvalue(res, i, c);
        Oid type = PQftype(res, c);
        char *text = out->placed_text[k];
        out->placed_number[k] = type == PGB_INT2OID || type == PGB_INT4OID ||
                                type == PGB_INT8OID;
        if (PQgetisnull(res, i, c)) {
            out->placed[k] = NULL;
            continue;
        }
        /* Binary: integers big-endian, a uuid's 16 bytes, jsonb a version
         * byte before its text; text, varchar and json are their text. */
        if (type == PGB_INT8OID)
            snprintf(text, PGB_UUID_TEXT, "%lld", (long long)pgb_int8(v));
        else if (type == PGB_INT4OID || type == PGB_INT2OID) {
            const unsigned char *b = (const unsigned char *)v;
            long x = type == PGB_INT4OID
                         ? (long)(int32_t)((uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 |
                                           (uint32_t)b[2] << 8 | b[3])
                         : (long)(int16_t)((uint16_t)(b[0] << 8 | b[1]));
            snprintf(text, PGB_UUID_TEXT, "%ld", x);
        } else if (type == PGB_UUIDOID)
            pgb_uuid_text(v, text);
        else
            text = NULL;
        out->placed[k] = text ? text : type == PGB_JSONBOID ? v + 1 : v;
    }
}
