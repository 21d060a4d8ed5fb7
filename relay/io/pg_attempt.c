/* pg_attempt.c — one asynchronous connect through a conninfo's host list;
 * see pg_attempt.h. */
#include "io/pg_attempt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "io/pg.h"

static void close_free_cb(uv_handle_t *h)
{
    free(h);
}

/* ---- the host list ------------------------------------------------------- */

static int list_count(const char *list)
{
    if (!list || !*list)
        return 0;
    int n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    return n;
}

/* Item @p i of a comma-separated list into @p out; a list of one item serves
 * every host (libpq's rule for port). @return out, or NULL without one. */
static const char *list_item(const char *list, int i, char *out, size_t len)
{
    int n = list_count(list);
    if (n == 0)
        return NULL;
    if (n == 1)
        i = 0;
    const char *p = list;
    for (int k = 0; k < i && p; k++) {
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    if (!p)
        return NULL;
    size_t l = strcspn(p, ",");
    snprintf(out, len, "%.*s", (int)(l < len ? l : len - 1), p);
    return out;
}

static const char *opt_of(const PQconninfoOption *opts, const char *key)
{
    for (const PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, key) == 0)
            return o->val;
    return NULL;
}

/* The one host's value of a list keyword, or the keyword's own value. */
static const char *per_host(const char *key, const char *val, int host, char *buf, size_t len)
{
    if (host < 0 || (strcmp(key, "host") && strcmp(key, "hostaddr") && strcmp(key, "port")))
        return val;
    return list_item(val, host, buf, len);
}

/* PQconnectStartParams with a fallback application_name, so that a standby
 * can tell a relay holding the leader lock from anything else holding it.
 * The conninfo is parsed here, not handed over as an expandable dbname: that
 * would take a malformed conninfo for a database name instead of failing
 * with libpq's own syntax error. */
PGconn *pg_connect_start(const char *conninfo, bool replication, int host, const char *tsa)
{
    PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
    if (!opts)
        return PQconnectStart(conninfo); /* reports the syntax error */
    size_t n = 0;
    for (const PQconninfoOption *o = opts; o->keyword; o++)
        n++;
    const char **keys = calloc(n + 5, sizeof(*keys));
    const char **values = calloc(n + 5, sizeof(*values));
    char bufs[3][256];
    int nbuf = 0;
    PGconn *conn = NULL;
    if (keys && values) {
        /* First, so that a fallback_application_name of the conninfo wins. */
        size_t k = 0;
        keys[k] = "fallback_application_name";
        values[k++] = "outbox-relay";
        const char *options = NULL;
        for (const PQconninfoOption *o = opts; o->keyword; o++) {
            if (!o->val || (tsa && strcmp(o->keyword, "target_session_attrs") == 0))
                continue;
            if (replication && strcmp(o->keyword, "options") == 0) {
                options = o->val;
                continue;
            }
            if (replication && strcmp(o->keyword, "replication") == 0)
                continue;
            const char *v = per_host(o->keyword, o->val, host, bufs[nbuf < 2 ? nbuf : 2],
                                     sizeof bufs[0]);
            if (v != o->val)
                nbuf++;
            if (v) {
                keys[k] = o->keyword;
                values[k++] = v;
            }
        }
        if (tsa) {
            keys[k] = "target_session_attrs";
            values[k++] = tsa;
        }
        /* pgoutput prints values with the walsender's settings: created_at
         * is read as ISO whatever the server's default DateStyle. */
        char *with_iso = NULL;
        if (replication) {
            keys[k] = "replication";
            values[k++] = "database";
            if (asprintf(&with_iso, "%s%s-c datestyle=ISO", options ? options : "",
                         options ? " " : "") >= 0) {
                keys[k] = "options";
                values[k++] = with_iso;
            }
        }
        keys[k] = NULL;
        conn = PQconnectStartParams(keys, values, 0);
        free(with_iso);
    }
    free(keys);
    free(values);
    PQconninfoFree(opts);
    return conn;
}

/* ---- one host after the other --------------------------------------------- */

int pg_attempt_init(struct pg_attempt *a, uv_loop_t *loop, struct pq_watch *w,
                    const char *conninfo, bool replication, pg_attempt_cb done, void *arg)
{
    memset(a, 0, sizeof(*a));
    a->loop = loop;
    a->w = w;
    a->conninfo = conninfo;
    a->replication = replication;
    a->done = done;
    a->arg = arg;
    a->timer = malloc(sizeof(*a->timer));
    if (!a->timer)
        return -ENOMEM;
    uv_timer_init(loop, a->timer);
    a->timer->data = a;
    return 0;
}

bool pg_attempt_running(const struct pg_attempt *a)
{
    return a->conn != NULL;
}

/* libpq's reading of connect_timeout (its environment default included):
 * below 2 s is 2 s; none is ours. */
static unsigned timeout_of(PGconn *conn)
{
    PQconninfoOption *opts = PQconninfo(conn);
    const char *v = opt_of(opts, "connect_timeout");
    long s = v ? strtol(v, NULL, 10) : 0;
    PQconninfoFree(opts);
    if (s <= 0)
        s = PG_ATTEMPT_DEFAULT_TIMEOUT_S;
    return (unsigned)(s < 2 ? 2 : s) * 1000u;
}

static void on_timeout(uv_timer_t *t);

static void host_end(struct pg_attempt *a)
{
    uv_timer_stop(a->timer);
    pq_watch_drop(a->w); /* before the socket closes: never close a watched descriptor */
    if (a->conn)
        PQfinish(a->conn);
    a->conn = NULL;
}

static void host_failed(struct pg_attempt *a, const char *why)
{
    pg_error_text(a->conninfo, why, a->why, sizeof a->why);
    /* With one host the owner's "connection failed" line says the same. */
    if (a->n_hosts > 1)
        log_warn("postgres host failed", "%s connection=%s pass=%d error=%s", a->label,
                 a->replication ? "replication" : "session", a->pass + 1, log_quote(a->why));
    host_end(a);
    a->host++;
}

/* Starts the next host that can start; @return 0, or -1 when none is left. */
static int host_begin(struct pg_attempt *a)
{
    for (;;) {
        if (a->host >= a->n_hosts) {
            if (a->pass + 1 >= a->n_passes)
                return -1;
            a->pass++;
            a->host = 0;
        }
        const char *tsa = a->n_passes == 2 ? (a->pass == 0 ? "standby" : "any") : NULL;
        a->conn = pg_connect_start(a->conninfo, a->replication, a->n_hosts > 1 ? a->host : -1, tsa);
        if (!a->conn) {
            snprintf(a->why, sizeof a->why, "out of memory");
            return -1;
        }
        const char *h = PQhost(a->conn), *p = PQport(a->conn);
        char label[sizeof a->label];
        snprintf(label, sizeof label, "host=%s port=%s", h && *h ? h : "(default)", p && *p ? p : "(default)");
        /* A malformed URI can leave a piece of its password in the host or the port. */
        pg_error_text(a->conninfo, label, a->label, sizeof a->label);
        if (PQstatus(a->conn) == CONNECTION_BAD) {
            host_failed(a, PQerrorMessage(a->conn));
            continue;
        }
        /* PQconnectStart leaves the handshake in its writing phase. */
        if (pq_watch_set(a->w, a->conn, UV_WRITABLE) < 0) {
            host_failed(a, "cannot watch the socket");
            continue;
        }
        a->timeout_ms = timeout_of(a->conn);
        /* The loop's clock stands still while a callback runs, or before the
         * loop first turns (the blocking checks at start): the host gets its
         * whole time from now. */
        uv_update_time(a->loop);
        uv_timer_start(a->timer, on_timeout, a->timeout_ms, 0);
        return 0;
    }
}

/* No host left: the owner hears it, once. */
static void attempt_failed(struct pg_attempt *a)
{
    char why[sizeof a->why + 64];
    if (a->n_hosts > 1)
        snprintf(why, sizeof why, "no host of %d connected; last: %s", a->n_hosts, a->why);
    else
        snprintf(why, sizeof why, "%s", a->why);
    a->done(NULL, why, a->arg);
}

static void on_timeout(uv_timer_t *t)
{
    struct pg_attempt *a = t->data;
    if (!a->conn)
        return;
    char why[64];
    snprintf(why, sizeof why, "no answer within connect_timeout (%u s)", a->timeout_ms / 1000);
    host_failed(a, why);
    if (host_begin(a) < 0)
        attempt_failed(a);
}

int pg_attempt_start(struct pg_attempt *a)
{
    pg_attempt_cancel(a);
    PQconninfoOption *opts = PQconninfoParse(a->conninfo, NULL);
    int n = opts ? list_count(opt_of(opts, "host")) : 0;
    int m = opts ? list_count(opt_of(opts, "hostaddr")) : 0;
    const char *tsa = opts ? opt_of(opts, "target_session_attrs") : NULL;
    a->n_hosts = n > m ? n : m > 0 ? m : 1;
    a->n_passes = tsa && strcmp(tsa, "prefer-standby") == 0 ? 2 : 1;
    PQconninfoFree(opts);
    a->host = a->pass = 0;
    a->why[0] = '\0';
    if (host_begin(a) == 0)
        return 0;
    log_warn("postgres connection failed", "error=%s", log_quote(a->why));
    return -EIO;
}

void pg_attempt_step(struct pg_attempt *a)
{
    if (!a->conn)
        return;
    PostgresPollingStatusType st = PQconnectPoll(a->conn);
    if (st == PGRES_POLLING_READING || st == PGRES_POLLING_WRITING) {
        /* libpq may have moved to another address of the host, on a new
         * socket (perhaps under the same number): pq_watch_set watches that
         * one, and the address's time starts anew, as in PQconnectdb. */
        int rc = pq_watch_set(a->w, a->conn,
                              st == PGRES_POLLING_READING ? UV_READABLE : UV_WRITABLE);
        if (rc > 0) {
            uv_update_time(a->loop);
            uv_timer_start(a->timer, on_timeout, a->timeout_ms, 0);
        }
        if (rc >= 0)
            return;
        host_failed(a, "cannot watch the socket");
    } else if (st == PGRES_POLLING_OK) {
        uv_timer_stop(a->timer);
        PGconn *conn = a->conn;
        a->conn = NULL;
        a->done(conn, NULL, a->arg);
        return;
    } else {
        host_failed(a, PQerrorMessage(a->conn));
    }
    if (host_begin(a) < 0)
        attempt_failed(a);
}

void pg_attempt_cancel(struct pg_attempt *a)
{
    if (a->conn)
        host_end(a);
}

void pg_attempt_free(struct pg_attempt *a)
{
    pg_attempt_cancel(a);
    if (a->timer) {
        uv_close((uv_handle_t *)a->timer, close_free_cb);
        a->timer = NULL;
    }
}
