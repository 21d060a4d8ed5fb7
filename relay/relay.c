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
#include <unistd.h>
#include <uv.h>

#include "errors.h"
#include "event.h"
#include "log.h"
#include "pg.h"
#include "producer.h"
#include "sql.h"
#include "strbuf.h"

enum role { ROLE_UNKNOWN = 0, ROLE_STANDBY, ROLE_LEADER };

enum phase {
    PHASE_EMPTY = 0,   /* nothing claimed */
    PHASE_CLAIMING,    /* claim statement running */
    PHASE_PRODUCING,   /* rows handed to librdkafka, waiting for reports */
    PHASE_DELIVERED,   /* every report is in; marks not yet written */
    PHASE_MARKING,     /* mark statement running */
    PHASE_RECORDING,   /* failure bookkeeping statement running */
};

enum row_state {
    ROW_PENDING = 0,
    ROW_DELIVERED,
    ROW_FAILED,    /* reason set: counts as an attempt; reason NULL: not the row's fault */
    ROW_SKIPPED,   /* held behind a failed row of its aggregate, or not produced: stays unsent */
};

enum poison_policy { POISON_HOLD_AGGREGATE = 0, POISON_DEAD_LETTER, POISON_HALT };

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
    bool halted;                /* on_poison=halt tripped: no more claims until restart */
    bool retention_due;
    unsigned reconnect_attempt; /* consecutive failed connects: drives the back-off */
    enum poison_policy policy;
    long retention_s;
    uint64_t last_retention_ms;

    /* The batch in flight. */
    enum phase phase;
    int n_rows;
    int n_outstanding;
    int n_delivered;
    bool marked;                /* the delivered rows of this batch are marked */
    int64_t *ids;
    unsigned char *state;
    unsigned char *permanent;   /* ROW_FAILED: the error will not go away by retrying */
    char **reason;              /* ROW_FAILED: why (allocated; failures are rare) */
    struct strbuf params[3];    /* array literals for the mark and failure statements */

    uint64_t published_total;
    uint64_t failed_total;
    uint64_t dead_total;
};

static void step(struct relay *r);
static void finish(struct relay *r);

/* ---- batch ------------------------------------------------------------- */

static uint64_t now_ms(struct relay *r)
{
    return uv_now(r->loop);
}

static void batch_reset(struct relay *r)
{
    for (int i = 0; i < r->n_rows; i++) {
        free(r->reason[i]);
        r->reason[i] = NULL;
    }
    r->phase = PHASE_EMPTY;
    r->n_rows = 0;
    r->n_outstanding = 0;
    r->n_delivered = 0;
    r->marked = false;
}

/* Errors that retrying the same message cannot cure: one attempt is enough. */
static bool err_is_permanent(rd_kafka_resp_err_t err)
{
    switch (err) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR_INVALID_REQUIRED_ACKS:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
    case RD_KAFKA_RESP_ERR__BAD_MSG:
        return true;
    default:
        return false;
    }
}

/* Failures that are not the row's fault (shutdown purge, a fatal producer that
 * is about to be replaced): the row is simply produced again later. */
static bool err_is_ours(rd_kafka_resp_err_t err)
{
    return err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT ||
           err == RD_KAFKA_RESP_ERR__FATAL;
}

static void row_failed(struct relay *r, int i, bool permanent, const char *why)
{
    r->state[i] = ROW_FAILED;
    r->permanent[i] = permanent;
    free(r->reason[i]);
    r->reason[i] = why ? strdup(why) : NULL;
    if (why)
        r->failed_total++;
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
        r->n_delivered++;
        r->published_total++;
    } else {
        bool ours = err_is_ours(err);
        row_failed(r, i, err_is_permanent(err), ours ? NULL : rd_kafka_err2name(err));
        if (!ours)
            log_warn("delivery failed", "outbox_id=%" PRId64 " error=%s permanent=%s", r->ids[i],
                     rd_kafka_err2name(err), r->permanent[i] ? "true" : "false");
    }
    if (--r->n_outstanding == 0) {
        r->phase = PHASE_DELIVERED;
        step(r);
    }
}

/* True when row @p i belongs to the aggregate of an earlier failed row of this
 * batch: under hold_aggregate it must wait behind that row. */
static bool held_in_batch(struct relay *r, PGresult *res, int i)
{
    const char *type = PQgetvalue(res, i, CLAIM_AGGREGATE_TYPE);
    const char *id = PQgetvalue(res, i, CLAIM_AGGREGATE_ID);
    for (int j = 0; j < i; j++) {
        if ((r->state[j] == ROW_FAILED || r->state[j] == ROW_SKIPPED) &&
            strcmp(PQgetvalue(res, j, CLAIM_AGGREGATE_ID), id) == 0 &&
            strcmp(PQgetvalue(res, j, CLAIM_AGGREGATE_TYPE), type) == 0)
            return true;
    }
    return false;
}

/* Hands every claimed row to the producer. What can be seen to be poison
 * before producing (invalid topic, headers that are not an object of strings,
 * a message larger than message.max.bytes) fails here, without a round trip
 * to Kafka; a full local queue ends the batch early. */
static void produce_rows(struct relay *r, PGresult *res)
{
    int n = PQntuples(res);
    int n_failed = 0;
    char topic[256];
    char err[512];

    r->n_rows = n;
    for (int i = 0; i < n; i++) {
        r->ids[i] = strtoll(PQgetvalue(res, i, CLAIM_ID), NULL, 10);
        r->state[i] = ROW_SKIPPED;
    }
    for (int i = 0; i < n; i++) {
        if (r->halted || (n_failed > 0 && r->policy != POISON_DEAD_LETTER &&
                          held_in_batch(r, res, i)))
            continue; /* stays ROW_SKIPPED: claimed again later, in order */

        struct event_row row = {
            .id = r->ids[i],
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

        int rc;
        if (row.topic && *row.topic)
            rc = snprintf(topic, sizeof(topic), "%s", row.topic) < (int)sizeof(topic) ? 0 : -ENOSPC;
        else
            rc = event_topic_render(r->cfg->topic, row.aggregate_type, row.event_type, topic,
                                    sizeof(topic));
        if (rc < 0 || !event_topic_valid(topic)) {
            snprintf(err, sizeof(err), "invalid topic name %s", log_quote(topic));
            rc = -EINVAL;
        } else {
            r->state[i] = ROW_PENDING;
            rc = producer_send(&r->prod, &row, topic, (void *)(intptr_t)i, err, sizeof(err));
        }

        if (rc == -ENOBUFS || rc == -EIO) {
            /* Not this row's fault: the rest of the batch is claimed again. */
            r->state[i] = ROW_SKIPPED;
            log_warn("producer cannot take more now", "rows_queued=%d reason=%s", i,
                     log_quote(err));
            break;
        }
        if (rc < 0) {
            row_failed(r, i, true, err);
            n_failed++;
            log_warn("row cannot be produced", "outbox_id=%" PRId64 " event_id=%s reason=%s",
                     row.id, row.event_id, log_quote(err));
            continue;
        }
        r->n_outstanding++;
    }
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
        log_error("claim failed", "error=%s", log_quote(PQresultErrorMessage(res)));
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

static void on_recorded(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res) {
        batch_reset(r); /* the rows are claimed and tried again: an attempt is not lost data */
        return;
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        log_error("recording failed rows failed", "error=%s",
                  log_quote(PQresultErrorMessage(res)));
        batch_reset(r);
        r->backoff = true;
        return;
    }
    for (int k = 0; k < PQntuples(res); k++) {
        const char *id = PQgetvalue(res, k, 0);
        const char *attempts = PQgetvalue(res, k, 1);
        bool dead = PQgetvalue(res, k, 2)[0] == 't';
        bool exhausted = PQgetvalue(res, k, 3)[0] == 't';
        const char *why = "";
        for (int i = 0; i < r->n_rows; i++)
            if (r->reason[i] && r->ids[i] == strtoll(id, NULL, 10))
                why = r->reason[i];
        if (dead) {
            r->dead_total++;
            log_error(r->policy == POISON_HOLD_AGGREGATE
                          ? "row dead-lettered; later rows of its aggregate are held"
                          : "row dead-lettered; later rows of its aggregate continue",
                      "outbox_id=%s attempts=%s error=%s", id, attempts, log_quote(why));
        } else if (exhausted && r->policy == POISON_HALT && !r->halted) {
            r->halted = true;
            log_error("relaying halted: a row cannot be delivered (on_poison=halt); fix or "
                      "requeue it and restart",
                      "outbox_id=%s attempts=%s error=%s", id, attempts, log_quote(why));
        }
    }
    batch_reset(r);
    step(r);
}

/* Counts the attempts of the rows that failed for reasons of their own. When
 * nothing in the batch got through and every failure was retriable, Kafka as
 * a whole is unavailable: that is an outage, not poison, and costs no attempt. */
static void record_failures(struct relay *r)
{
    struct strbuf *ids = &r->params[0], *errs = &r->params[1], *max = &r->params[2];
    int n = 0, permanent = 0;
    strbuf_reset(ids);
    strbuf_reset(errs);
    strbuf_reset(max);
    for (int i = 0; i < r->n_rows; i++) {
        if (r->state[i] != ROW_FAILED || !r->reason[i])
            continue;
        strbuf_printf(ids, "%s%" PRId64, n ? "," : "{", r->ids[i]);
        strbuf_printf(errs, "%s", n ? "," : "{");
        strbuf_array_elem(errs, r->reason[i]);
        strbuf_printf(max, "%s%d", n ? "," : "{", r->permanent[i] ? 1 : r->cfg->max_attempts);
        permanent += r->permanent[i];
        n++;
    }
    if (n == 0 || (r->n_delivered == 0 && permanent == 0)) {
        if (n > 0)
            log_warn("no row of the batch reached Kafka; retrying without counting attempts",
                     "failed=%d", n);
        batch_reset(r);
        r->backoff = n > 0;
        step(r);
        return;
    }
    strbuf_printf(ids, "}");
    strbuf_printf(errs, "}");
    strbuf_printf(max, "}");
    if (ids->oom || errs->oom || max->oom) {
        log_error("out of memory recording failures", "rows=%d", n);
        batch_reset(r);
        r->backoff = true;
        return;
    }
    const char *params[] = { strbuf_str(ids), strbuf_str(errs), strbuf_str(max),
                             r->policy == POISON_HALT ? "f" : "t" };
    r->phase = PHASE_RECORDING;
    if (pg_query(&r->pg, r->sql.record_failures, 4, params, on_recorded, r) < 0)
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
        log_error("marking rows sent failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        r->phase = PHASE_DELIVERED;
        r->backoff = true;
        return;
    }
    log_debug("batch marked sent", "rows=%d marked=%s", r->n_rows, PQcmdTuples(res));
    r->marked = true;
    record_failures(r);
}

static void mark(struct relay *r)
{
    if (r->marked || r->n_delivered == 0) {
        record_failures(r);
        return;
    }
    struct strbuf *ids = &r->params[0];
    int k = 0;
    strbuf_reset(ids);
    strbuf_printf(ids, "{");
    for (int i = 0; i < r->n_rows; i++)
        if (r->state[i] == ROW_DELIVERED)
            strbuf_printf(ids, "%s%" PRId64, k++ ? "," : "", r->ids[i]);
    strbuf_printf(ids, "}");
    if (ids->oom) {
        log_error("out of memory building marks", "rows=%d", k);
        r->backoff = true;
        return;
    }
    const char *params[] = { strbuf_str(ids) };
    r->phase = PHASE_MARKING;
    if (pg_query(&r->pg, r->sql.mark_sent, 1, params, on_marked, r) < 0 &&
        r->phase == PHASE_MARKING)
        r->phase = PHASE_DELIVERED;
}

/* ---- retention --------------------------------------------------------- */

#define RETENTION_BATCH 1000
#define RETENTION_EVERY_MS 60000

static void on_retention(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        log_error("retention delete failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        r->retention_due = false;
        r->last_retention_ms = now_ms(r);
        return;
    }
    long deleted = strtol(PQcmdTuples(res), NULL, 10);
    if (deleted > 0)
        log_debug("retention deleted sent rows", "rows=%ld", deleted);
    /* A full batch: more are due; the next one runs after any pending claim. */
    if (deleted < RETENTION_BATCH) {
        r->retention_due = false;
        r->last_retention_ms = now_ms(r);
    }
    step(r);
}

static void retention(struct relay *r)
{
    char secs[24], limit[16];
    snprintf(secs, sizeof(secs), "%ld", r->retention_s);
    snprintf(limit, sizeof(limit), "%d", RETENTION_BATCH);
    const char *params[] = { secs, limit };
    pg_query(&r->pg, r->sql.retention, 2, params, on_retention, r);
}

/* ---- leadership -------------------------------------------------------- */

static void on_lock(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        log_error("leader lock query failed", "error=%s", log_quote(PQresultErrorMessage(res)));
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
        log_error("LISTEN failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        r->backoff = true;
        return;
    }
    r->listening = true;
    r->wake = true;
    step(r);
}

/* ---- producer ---------------------------------------------------------- */

/* A fatal error (e.g. the idempotent producer's epoch cannot be bumped)
 * leaves the instance unusable: its messages failed with __FATAL and stay
 * unsent; a new instance republishes them. @return true when usable again. */
static bool replace_producer(struct relay *r)
{
    char err[512];
    log_warn("replacing the kafka producer after a fatal error", "");
    producer_stop(&r->prod);
    if (producer_start(&r->prod, r->loop, r->cfg, on_report, r, err, sizeof(err)) < 0) {
        log_error("cannot recreate the kafka producer", "error=%s", log_quote(err));
        r->backoff = true;
        return false;
    }
    return true;
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
    if (r->prod.fatal && !replace_producer(r))
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
    if (r->wake && !r->halted)
        claim(r);
    else if (r->retention_due)
        retention(r);
}

/* ---- PostgreSQL connection --------------------------------------------- */

static void start_connect(struct relay *r);

static void on_reconnect_timer(uv_timer_t *t)
{
    start_connect(t->data);
}

/* Exponential back-off with jitter: a fleet of relays that lost the same
 * database does not reconnect in lock step. */
static void schedule_reconnect(struct relay *r)
{
    if (r->stopping) {
        /* Nothing more can be marked; what was delivered is republished next run. */
        if (r->phase != PHASE_PRODUCING)
            finish(r);
        return;
    }
    uint64_t delay = (uint64_t)r->cfg->reconnect_interval_ms;
    for (unsigned k = 0; k < r->reconnect_attempt && delay < (uint64_t)r->cfg->reconnect_max_ms; k++)
        delay *= 2;
    if (delay > (uint64_t)r->cfg->reconnect_max_ms)
        delay = (uint64_t)r->cfg->reconnect_max_ms;
    delay = delay / 2 + (uint64_t)rand() % (delay / 2 + 1);
    r->reconnect_attempt++;
    log_info("reconnecting to postgres later", "delay_ms=%" PRIu64 " attempt=%u", delay,
             r->reconnect_attempt);
    uv_timer_start(&r->reconnect, on_reconnect_timer, delay, 0);
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
    r->reconnect_attempt = 0;
    step(r);
}

static void on_pg_lost(struct pg_conn *pg, const char *why, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (r->role == ROLE_LEADER)
        log_warn("postgres connection lost; leadership released", "error=%s", log_quote(why));
    else
        log_warn("postgres connection failed", "error=%s", log_quote(why));
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
    if (r->retention_s > 0 && now_ms(r) - r->last_retention_ms >= RETENTION_EVERY_MS)
        r->retention_due = true;
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

static enum poison_policy parse_policy(const char *name)
{
    if (strcmp(name, "dead_letter") == 0)
        return POISON_DEAD_LETTER;
    if (strcmp(name, "halt") == 0)
        return POISON_HALT;
    return POISON_HOLD_AGGREGATE;
}

static void relay_free(struct relay *r)
{
    pg_free(&r->pg);
    sql_statements_free(&r->sql);
    if (r->reason)
        for (int i = 0; i < r->cfg->batch_size; i++)
            free(r->reason[i]);
    free(r->reason);
    free(r->ids);
    free(r->state);
    free(r->permanent);
    for (size_t i = 0; i < sizeof(r->params) / sizeof(r->params[0]); i++)
        strbuf_free(&r->params[i]);
}

int relay_run(const struct relay_config *cfg)
{
    struct relay r;
    memset(&r, 0, sizeof(r));
    r.cfg = cfg;
    r.loop = uv_default_loop();
    r.policy = parse_policy(cfg->on_poison);
    r.retention_s = strcmp(cfg->on_sent, "delete") == 0 ? 0 : config_parse_duration(cfg->retention);
    srand((unsigned)uv_hrtime() ^ (unsigned)getpid());

    unsigned flags = (r.policy == POISON_HOLD_AGGREGATE ? SQL_HOLD_AGGREGATE : 0) |
                     (strcmp(cfg->on_sent, "delete") == 0 ? SQL_DELETE_SENT : 0);
    if (sql_statements_init(&r.sql, cfg->schema, cfg->table, cfg->notify_channel, flags) < 0) {
        log_error("cannot build SQL statements", "schema=%s table=%s", cfg->schema, cfg->table);
        return EXIT_CONFIG;
    }
    size_t n = (size_t)cfg->batch_size;
    r.ids = calloc(n, sizeof(*r.ids));
    r.state = calloc(n, sizeof(*r.state));
    r.permanent = calloc(n, sizeof(*r.permanent));
    r.reason = calloc(n, sizeof(*r.reason));
    if (!r.ids || !r.state || !r.permanent || !r.reason) {
        log_error("out of memory", "batch_size=%d", cfg->batch_size);
        relay_free(&r);
        return EXIT_SOFTWARE;
    }

    char err[512];
    if (producer_start(&r.prod, r.loop, cfg, on_report, &r, err, sizeof(err)) < 0) {
        log_error("kafka producer rejected the configuration", "error=%s", log_quote(err));
        relay_free(&r);
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
    /* First retention pass a minute after start, not during the catch-up. */
    r.last_retention_ms = uv_now(r.loop);

    log_info("relay starting",
             "schema=%s table=%s topic=%s batch_size=%d poll_interval_ms=%d on_poison=%s "
             "on_sent=%s retention_s=%ld",
             cfg->schema, cfg->table, cfg->topic, cfg->batch_size, cfg->poll_interval_ms,
             cfg->on_poison, cfg->on_sent, r.retention_s);
    start_connect(&r);

    uv_run(r.loop, UV_RUN_DEFAULT);

    relay_free(&r);
    uv_loop_close(r.loop);
    return EXIT_OK;
}
