/* relay.c — the state machine that moves outbox rows to Kafka.
 *
 * Everything runs on one libuv loop: PostgreSQL results and notifications,
 * Kafka delivery reports, timers and signals. One batch is in flight at a
 * time and its phase says what may happen next; step() is the single place
 * that decides the next action after any event. */
#include "relay.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "errors.h"
#include "event.h"
#include "log.h"
#include "pg.h"
#include "producer.h"
#include "sql.h"

enum role { ROLE_UNKNOWN = 0, ROLE_STANDBY, ROLE_LEADER };

enum phase {
    PHASE_EMPTY = 0,   /* nothing claimed */
    PHASE_CLAIMING,    /* claim statement running */
    PHASE_PRODUCING,   /* rows handed to librdkafka, waiting for reports */
    PHASE_DELIVERED,   /* every report is in; marks not yet written */
    PHASE_MARKING,     /* mark statement running */
};

enum row_state { ROW_PENDING = 0, ROW_DELIVERED, ROW_FAILED };

struct relay {
    uv_loop_t *loop;
    const struct relay_config *cfg;
    struct sql_statements sql;
    struct pg_conn pg;
    struct producer prod;

    uv_timer_t tick;            /* poll_interval_ms: poll, retry the lock, leave back-off */
    uv_timer_t reconnect;
    uv_timer_t shutdown;
    uv_signal_t sigterm;
    uv_signal_t sigint;

    enum role role;
    bool listening;
    bool wake;                  /* rows may be waiting: claim when possible */
    bool lock_due;              /* standby: time to try the leader lock again */
    bool backoff;               /* a statement failed: wait for the next tick */
    bool stopping;
    bool purged;
    bool finished;

    /* The batch in flight. */
    enum phase phase;
    int n_rows;
    int n_outstanding;
    int64_t *ids;
    unsigned char *state;
    char *idbuf;                /* "{1,2,…}" for the mark statement */
    size_t idbuf_cap;

    uint64_t published_total;
    uint64_t failed_total;
};

static void step(struct relay *r);
static void finish(struct relay *r);

/* ---- batch ------------------------------------------------------------- */

static void batch_reset(struct relay *r)
{
    r->phase = PHASE_EMPTY;
    r->n_rows = 0;
    r->n_outstanding = 0;
}

static void on_report(void *opaque, rd_kafka_resp_err_t err, void *arg)
{
    struct relay *r = arg;
    int i = (int)(intptr_t)opaque;
    if (r->phase != PHASE_PRODUCING || i < 0 || i >= r->n_rows) {
        log_error("delivery report for no row in flight", "index=%d", i);
        return;
    }
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        r->state[i] = ROW_DELIVERED;
        r->published_total++;
    } else {
        r->state[i] = ROW_FAILED;
        r->failed_total++;
        log_warn("delivery failed; row stays unsent and will be retried",
                 "outbox_id=%" PRId64 " error=%s", r->ids[i], rd_kafka_err2name(err));
    }
    if (--r->n_outstanding == 0) {
        r->phase = PHASE_DELIVERED;
        step(r);
    }
}

/* Hands every claimed row to the producer. A row that can never be produced
 * is reported and left unsent; a full local queue ends the batch early (the
 * rest are claimed again next time). */
static void produce_rows(struct relay *r, PGresult *res)
{
    int n = PQntuples(res);
    char topic[256];
    char err[512];

    for (int i = 0; i < n; i++) {
        struct event_row row = {
            .id = strtoll(PQgetvalue(res, i, CLAIM_ID), NULL, 10),
            .event_id = PQgetvalue(res, i, CLAIM_EVENT_ID),
            .aggregate_type = PQgetvalue(res, i, CLAIM_AGGREGATE_TYPE),
            .aggregate_id = PQgetvalue(res, i, CLAIM_AGGREGATE_ID),
            .event_type = PQgetvalue(res, i, CLAIM_EVENT_TYPE),
            .topic = PQgetisnull(res, i, CLAIM_TOPIC) ? NULL : PQgetvalue(res, i, CLAIM_TOPIC),
            .payload = PQgetisnull(res, i, CLAIM_PAYLOAD) ? NULL : PQgetvalue(res, i, CLAIM_PAYLOAD),
            .payload_len = (size_t)PQgetlength(res, i, CLAIM_PAYLOAD),
            .headers_json = PQgetisnull(res, i, CLAIM_HEADERS) ? NULL
                                                                : PQgetvalue(res, i, CLAIM_HEADERS),
            .created_ms = strtoll(PQgetvalue(res, i, CLAIM_CREATED_MS), NULL, 10),
            .created_at = PQgetvalue(res, i, CLAIM_CREATED_AT),
        };
        r->ids[i] = row.id;
        r->state[i] = ROW_PENDING;

        int rc;
        if (row.topic && *row.topic) {
            rc = snprintf(topic, sizeof(topic), "%s", row.topic) < (int)sizeof(topic) ? 0 : -ENOSPC;
        } else {
            rc = event_topic_render(r->cfg->topic, row.aggregate_type, row.event_type, topic,
                                    sizeof(topic));
        }
        if (rc < 0 || !event_topic_valid(topic)) {
            snprintf(err, sizeof(err), "invalid topic name");
            rc = -EINVAL;
        } else {
            rc = producer_send(&r->prod, &row, topic, (void *)(intptr_t)i, err, sizeof(err));
        }

        if (rc == -ENOBUFS || rc == -EIO) {
            /* Not this row's fault: stop here, the rest is claimed again. */
            log_warn("producer cannot take more now", "rows_queued=%d reason=\"%s\"", i, err);
            n = i;
            break;
        }
        if (rc < 0) {
            r->state[i] = ROW_FAILED;
            r->failed_total++;
            log_error("row cannot be produced; it stays unsent",
                      "outbox_id=%" PRId64 " event_id=%s reason=\"%s\"", row.id, row.event_id, err);
            continue;
        }
        r->n_outstanding++;
    }
    r->n_rows = n;
    r->phase = r->n_outstanding > 0 ? PHASE_PRODUCING : PHASE_DELIVERED;
    /* Reports of messages produced just now may already be waiting. */
    producer_poll(&r->prod);
}

static void on_claimed(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res) {
        batch_reset(r); /* connection lost: nothing was produced */
        return;
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        log_error("claim failed", "error=\"%s\"", PQresultErrorMessage(res));
        batch_reset(r);
        r->backoff = true;
        return;
    }
    if (r->stopping) {
        batch_reset(r); /* shutting down: claimed rows stay unsent */
        step(r);
        return;
    }
    int n = PQntuples(res);
    if (n == 0) {
        batch_reset(r);
        step(r);
        return;
    }
    /* A full batch means more rows are probably waiting. */
    if (n >= r->cfg->batch_size)
        r->wake = true;
    produce_rows(r, res);
    if (r->phase == PHASE_DELIVERED)
        step(r);
}

static void claim(struct relay *r)
{
    char limit[16];
    snprintf(limit, sizeof(limit), "%d", r->cfg->batch_size);
    const char *params[] = { limit };
    r->wake = false;
    r->phase = PHASE_CLAIMING;
    if (pg_query(&r->pg, r->sql.claim, 1, params, on_claimed, r) < 0)
        batch_reset(r);
}

static void on_marked(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res) {
        r->phase = PHASE_DELIVERED; /* marks are conditional: write them again after reconnect */
        return;
    }
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        log_error("marking rows sent failed", "error=\"%s\"", PQresultErrorMessage(res));
        r->phase = PHASE_DELIVERED;
        r->backoff = true;
        return;
    }
    log_debug("batch marked sent", "rows=%d marked=%s", r->n_rows, PQcmdTuples(res));
    batch_reset(r);
    step(r);
}

static int idbuf_reserve(struct relay *r, size_t need)
{
    if (need <= r->idbuf_cap)
        return 0;
    char *b = realloc(r->idbuf, need);
    if (!b)
        return -ENOMEM;
    r->idbuf = b;
    r->idbuf_cap = need;
    return 0;
}

static void mark(struct relay *r)
{
    /* 20 digits and a comma per id, braces and NUL. */
    if (idbuf_reserve(r, (size_t)r->n_rows * 21 + 3) < 0) {
        log_error("out of memory building marks", "");
        r->backoff = true;
        return;
    }
    size_t pos = 0;
    int delivered = 0;
    r->idbuf[pos++] = '{';
    for (int i = 0; i < r->n_rows; i++) {
        if (r->state[i] != ROW_DELIVERED)
            continue;
        pos += (size_t)sprintf(r->idbuf + pos, "%s%" PRId64, delivered ? "," : "", r->ids[i]);
        delivered++;
    }
    r->idbuf[pos++] = '}';
    r->idbuf[pos] = '\0';

    if (delivered == 0) {
        batch_reset(r);
        r->backoff = true; /* every row failed: do not spin on them */
        step(r);
        return;
    }
    const char *params[] = { r->idbuf };
    r->phase = PHASE_MARKING;
    if (pg_query(&r->pg, r->sql.mark_sent, 1, params, on_marked, r) < 0 &&
        r->phase == PHASE_MARKING)
        r->phase = PHASE_DELIVERED;
}

/* ---- leadership -------------------------------------------------------- */

static void on_lock(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        log_error("leader lock query failed", "error=\"%s\"", PQresultErrorMessage(res));
        r->backoff = true;
        return;
    }
    bool got = PQgetvalue(res, 0, 0)[0] == 't';
    if (got) {
        r->role = ROLE_LEADER;
        r->wake = true; /* catch up: notifications were not heard before */
        log_info("became leader", "schema=%s table=%s", r->cfg->schema, r->cfg->table);
    } else {
        if (r->role != ROLE_STANDBY)
            log_info("standing by", "schema=%s table=%s reason=\"another relay holds the leader lock\"",
                     r->cfg->schema, r->cfg->table);
        r->role = ROLE_STANDBY;
    }
    step(r);
}

static void on_listen(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        log_error("LISTEN failed", "error=\"%s\"", PQresultErrorMessage(res));
        r->backoff = true;
        return;
    }
    r->listening = true;
    r->wake = true;
    step(r);
}

/* ---- the decision ------------------------------------------------------ */

static void step(struct relay *r)
{
    if (r->finished || !pg_ready(&r->pg))
        return;

    /* Delivered rows are marked whatever our role: a mark records a fact. */
    if (r->phase == PHASE_DELIVERED) {
        if (!r->backoff)
            mark(r);
        return;
    }
    if (r->stopping) {
        if (r->phase == PHASE_EMPTY)
            finish(r);
        return;
    }
    if (r->backoff || r->phase != PHASE_EMPTY)
        return;

    if (r->role == ROLE_UNKNOWN || (r->role == ROLE_STANDBY && r->lock_due)) {
        r->lock_due = false;
        pg_query(&r->pg, r->sql.leader_lock, 0, NULL, on_lock, r);
        return;
    }
    if (r->role != ROLE_LEADER)
        return;
    if (!r->listening) {
        pg_query(&r->pg, r->sql.listen, 0, NULL, on_listen, r);
        return;
    }
    if (r->wake)
        claim(r);
}

/* ---- PostgreSQL connection --------------------------------------------- */

static void start_connect(struct relay *r);

static void on_reconnect_timer(uv_timer_t *t)
{
    start_connect(t->data);
}

static void schedule_reconnect(struct relay *r)
{
    if (r->stopping) {
        /* Nothing more can be marked; what was delivered is republished next run. */
        if (r->phase != PHASE_PRODUCING)
            finish(r);
        return;
    }
    uv_timer_start(&r->reconnect, on_reconnect_timer, (uint64_t)r->cfg->reconnect_interval_ms, 0);
}

static void start_connect(struct relay *r)
{
    if (pg_connect(&r->pg) < 0)
        schedule_reconnect(r);
}

static void on_pg_connected(struct pg_conn *pg, void *arg)
{
    struct relay *r = arg;
    log_info("postgres connected", "server_version=%d", PQserverVersion(pg->conn));
    r->role = ROLE_UNKNOWN;
    r->listening = false;
    r->backoff = false;
    step(r);
}

static void on_pg_lost(struct pg_conn *pg, const char *why, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (r->role == ROLE_LEADER)
        log_warn("postgres connection lost; leadership released", "error=\"%s\"", why);
    else
        log_warn("postgres connection failed", "error=\"%s\"", why);
    r->role = ROLE_UNKNOWN;
    r->listening = false;
    schedule_reconnect(r);
}

static void on_pg_notify(struct pg_conn *pg, const char *channel, void *arg)
{
    (void)pg;
    (void)channel;
    struct relay *r = arg;
    r->wake = true;
    step(r);
}

/* ---- timers, signals, shutdown ----------------------------------------- */

static void on_tick(uv_timer_t *t)
{
    struct relay *r = t->data;
    r->backoff = false;
    r->lock_due = true;
    r->wake = true;
    producer_poll(&r->prod);
    step(r);
}

static void on_shutdown_timer(uv_timer_t *t)
{
    struct relay *r = t->data;
    if (!r->purged && r->phase == PHASE_PRODUCING) {
        /* Deadline reached: fail what is still in flight so the delivered part
         * can be marked; the failed rows stay unsent for the next run. */
        log_warn("shutdown timeout; abandoning undelivered messages",
                 "in_flight=%d", r->n_outstanding);
        r->purged = true;
        producer_purge(&r->prod);
        producer_poll(&r->prod);
        uv_timer_start(&r->shutdown, on_shutdown_timer, 2000, 0);
        return;
    }
    log_warn("shutdown deadline passed; exiting without writing pending marks", "");
    finish(r);
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct relay *r = s->data;
    if (r->stopping) {
        log_warn("second signal; exiting now", "signal=%d", signum);
        finish(r);
        return;
    }
    log_info("shutting down", "signal=%d in_flight=%d", signum, r->n_outstanding);
    r->stopping = true;
    uv_timer_stop(&r->tick);
    uv_timer_stop(&r->reconnect);
    uv_timer_start(&r->shutdown, on_shutdown_timer, (uint64_t)r->cfg->shutdown_timeout_ms, 0);
    if (!pg_ready(&r->pg) && r->pg.state != PG_BUSY && r->phase != PHASE_PRODUCING)
        finish(r);
    else
        step(r);
}

static void finish(struct relay *r)
{
    if (r->finished)
        return;
    r->finished = true;
    uv_timer_stop(&r->tick);
    uv_timer_stop(&r->reconnect);
    uv_timer_stop(&r->shutdown);
    uv_close((uv_handle_t *)&r->tick, NULL);
    uv_close((uv_handle_t *)&r->reconnect, NULL);
    uv_close((uv_handle_t *)&r->shutdown, NULL);
    uv_close((uv_handle_t *)&r->sigterm, NULL);
    uv_close((uv_handle_t *)&r->sigint, NULL);
    pg_close(&r->pg);
    producer_stop(&r->prod);
    log_info("stopped", "published_total=%" PRIu64 " failed_total=%" PRIu64,
             r->published_total, r->failed_total);
}

int relay_run(const struct relay_config *cfg)
{
    struct relay r;
    memset(&r, 0, sizeof(r));
    r.cfg = cfg;
    r.loop = uv_default_loop();

    if (sql_statements_init(&r.sql, cfg->schema, cfg->table, cfg->notify_channel) < 0) {
        log_error("cannot build SQL statements", "schema=%s table=%s", cfg->schema, cfg->table);
        return EXIT_CONFIG;
    }
    r.ids = calloc((size_t)cfg->batch_size, sizeof(*r.ids));
    r.state = calloc((size_t)cfg->batch_size, sizeof(*r.state));
    if (!r.ids || !r.state) {
        log_error("out of memory", "batch_size=%d", cfg->batch_size);
        return EXIT_SOFTWARE;
    }

    char err[512];
    if (producer_start(&r.prod, r.loop, cfg, on_report, &r, err, sizeof(err)) < 0) {
        log_error("kafka producer rejected the configuration", "error=\"%s\"", err);
        return EXIT_CONFIG;
    }

    struct pg_callbacks cb = {
        .on_connected = on_pg_connected,
        .on_lost = on_pg_lost,
        .on_notify = on_pg_notify,
        .arg = &r,
    };
    pg_init(&r.pg, r.loop, cfg->pg_conninfo, &cb);

    uv_timer_init(r.loop, &r.tick);
    uv_timer_init(r.loop, &r.reconnect);
    uv_timer_init(r.loop, &r.shutdown);
    r.tick.data = r.reconnect.data = r.shutdown.data = &r;
    uv_signal_init(r.loop, &r.sigterm);
    uv_signal_init(r.loop, &r.sigint);
    r.sigterm.data = r.sigint.data = &r;
    uv_signal_start(&r.sigterm, on_signal, SIGTERM);
    uv_signal_start(&r.sigint, on_signal, SIGINT);
    uv_timer_start(&r.tick, on_tick, (uint64_t)cfg->poll_interval_ms,
                   (uint64_t)cfg->poll_interval_ms);

    log_info("relay starting", "schema=%s table=%s topic=%s batch_size=%d poll_interval_ms=%d",
             cfg->schema, cfg->table, cfg->topic, cfg->batch_size, cfg->poll_interval_ms);
    start_connect(&r);

    uv_run(r.loop, UV_RUN_DEFAULT);

    pg_free(&r.pg);
    sql_statements_free(&r.sql);
    free(r.ids);
    free(r.state);
    free(r.idbuf);
    uv_loop_close(r.loop);
    return EXIT_OK;
}
