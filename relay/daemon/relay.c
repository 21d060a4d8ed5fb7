/* relay.c — the I/O that moves outbox rows to Kafka.
 *
 * Everything runs on one libuv loop: PostgreSQL results and notifications,
 * Kafka delivery reports, timers and signals. Each event updates the relay's
 * state and calls step(), the single place that asks the engine (plan.c)
 * what to do next and carries it out; the decisions themselves are there, in
 * engine.c and in batch.c, without I/O. */
#include "daemon/relay.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "base/errors.h"
#include "core/event.h"
#include "daemon/http.h"
#include "core/batch.h"
#include "core/engine.h"
#include "daemon/health.h"
#include "core/kafka_rules.h"
#include "base/log.h"
#include "base/log_limit.h"
#include "cmd/migrate.h"
#include "io/notify.h"
#include "io/pg.h"
#include "core/plan.h"
#include "io/producer.h"
#include "daemon/progress.h"
#include "core/sql.h"
#include "base/stats.h"
#include "base/strbuf.h"
#include "daemon/verify_task.h"

/* Several batches may be in flight: while Kafka acknowledges some,
 * PostgreSQL claims or marks another, so neither side waits for the other. */
#define N_BATCHES RELAY_BATCH_SLOTS
_Static_assert(N_BATCHES <= PLAN_MAX_BATCHES, "the engine names each batch slot by a bit");
_Static_assert(RELAY_BATCHES_IN_FLIGHT == PLAN_TXN_BATCHES_MAX, "the producer's queue holds a transaction's batches");

/* A delivery report's opaque: the batch slot in the top bits, the row below. */
#define OPAQUE_ROW_BITS 20
_Static_assert(100000 < (1 << OPAQUE_ROW_BITS), "batch_size must fit the opaque's row bits");

struct relay {
    uv_loop_t *loop;
    const struct relay_config *cfg;
    struct relay_config *live;  /* the same configuration, which SIGHUP updates in place */
    relay_reload_fn reload;
    void *reload_arg;
    struct sql_statements sql;
    struct pg_conn pg;
    struct producer prod;

    uv_timer_t tick;            /* poll_interval_ms: poll, retry the lock, leave back-off */
    uv_timer_t reconnect;
    uv_timer_t shutdown;
    uv_timer_t watchdog;
    uv_signal_t sigterm;
    uv_signal_t sigint;
    uv_signal_t sighup;

    bool listening;
    bool wake;                  /* rows may be waiting: claim when possible */
    bool lock_due;              /* standby: time to try the leader lock again */
    bool backoff;               /* a statement failed: wait for the next tick */
    bool stopping;
    bool purged;
    bool finished;
    bool ready_sent;            /* READY=1 went to systemd */
    int prepared;               /* hot-path statements prepared on this connection */
    bool halt_pending;          /* on_poison=halt: a row of a batch in flight will halt us;
                                   claim and produce nothing more meanwhile */
    bool retention_due;
    /* A failure reported for several rows of a batch may be one produce
     * request's (librdkafka gives every message of a rejected request its
     * error): those rows are charged nothing and produced again one at a
     * time, oldest first, up to isolate_until_id; only a row that fails
     * alone is charged. */
    bool isolating;
    int64_t isolate_until_id;
    /* The producer's queue was full: the batch stopped early and its claim
     * range was cut back to what it produced. No claim until reports free
     * room; a claim sent before the cut is discarded, since it skipped the
     * rows the cut batch gave back and could reorder their aggregates. */
    bool queue_full;
    unsigned truncations;
    unsigned reconnect_attempt; /* consecutive failed connects: drives the back-off */
    const struct poison_rules *poison; /* relay.on_poison */
    long retention_s;
    uint64_t last_retention_ms;
    uint64_t backlog_due_ms;    /* next backlog query */
    uint64_t backlog_sent_ms;   /* when the running one was sent */
    uint64_t backlog_took_ms;   /* how long the last one took */
    uint64_t txn_start_ms;      /* the running transaction call began */
    bool lead_unverified;       /* fencing: a replaced producer waits for the lock check */
    bool claim_first;           /* new leader: its first claim goes before the backlog
                                   count, which takes a while on a large backlog */
    uint64_t claim_first_until; /* ... but no longer than this: Kafka may be away */

    struct batch b[N_BATCHES];
    struct strbuf params[3];    /* array literals for the mark and failure statements */

    struct relay_stats st;
    struct http_server *http;   /* the status endpoint; NULL when disabled */

    /* Is the connection a session of its own, and fit to relay? (see "leadership") */
    struct sql_session ssql;
    char token[48];             /* the marker this relay sets in its session at connect */
    bool session_checked;       /* the session check ran on this connection */
    bool table_exists, ledger_exists, ledger_readable; /* what the session check saw */
    bool warned_ledger;         /* said once that the schema version cannot be read */
    bool schema_checked;        /* the table's schema version is the one this binary knows */
    uint64_t schema_logged_ms;  /* when the schema problem was last logged */
    bool holder_due;            /* standby: ask who holds the leader lock */
    bool may_hold_lock;         /* the lock was taken on this connection */
    int release_tries;          /* refused: attempts to give the lock back before closing */
    uint64_t refuse_deadline_ms; /* refused: close even if batches in flight are not marked */
    struct verify_task *verify; /* [verify] interval; NULL when off */
    struct progress *progress;  /* the publish rate; NULL when out of memory */
    struct log_limit failures;  /* per-row failure lines: a few in full, then summaries */

    /* The quiet lock (schema/004): see enum plan_quiet. */
    enum plan_quiet quiet;
    bool quiet_wanted, quiet_idle;
    int notifies;               /* NOTIFYs since the last claim was sent */
    uint64_t quiet_check_at_ms;
    uint64_t quiet_backoff_ms;  /* leaving: the last wait before a check (0: none yet) */
    uv_timer_t quiet_timer;     /* leaving: claim and check again */
};

static void step(struct relay *r);
static void snapshot(const struct relay *r, struct plan_state *s);
static void finish(struct relay *r);
static bool session_evidence(struct relay *r, const PGresult *res, const char *statement);

/* ---- batch ------------------------------------------------------------- */

static uint64_t now_ms(struct relay *r)
{
    return uv_now(r->loop);
}

/* A batch's owner: the batches are an array inside struct relay. */
static struct relay *relay_of(struct batch *b)
{
    return (struct relay *)((char *)(b - b->slot) - offsetof(struct relay, b));
}

static int in_flight(const struct relay *r)
{
    return batch_outstanding(r->b, N_BATCHES);
}

static bool any_phase(const struct relay *r, enum phase ph)
{
    return batch_any_in(r->b, N_BATCHES, ph);
}

/* Empties @p b, releasing a claim result it held. */
static void batch_reset(struct batch *b)
{
    if (b->held)
        PQclear(b->held);
    batch_clear(b);
}

static void row_failed(struct relay *r, struct batch *b, int i, enum stats_fail_reason kind,
                       enum attempt_limit limit, const char *why)
{
    if (batch_row_failed(b, i, limit, why))
        r->st.failed_total[kind]++;
}

/* The batch is complete (marks and failure records written): account for it. */
static void batch_done(struct relay *r, struct batch *b)
{
    double now = stats_now();
    double took = (double)(now_ms(r) - b->start_ms) / 1000.0;
    r->st.batches_total++;
    stats_observe(&r->st.batch_duration, took);
    r->st.last_batch_rows = b->n_rows;
    r->st.last_batch_duration = took;
    r->st.last_batch_time = now;
    if (b->rescan_after_mark)
        r->wake = true; /* rows inside this batch's id range were skipped by the other claim */
    batch_reset(b);
}

static void on_report(void *opaque, rd_kafka_resp_err_t err, void *arg)
{
    struct relay *r = arg;
    intptr_t v = (intptr_t)opaque;
    int k = (int)(v >> OPAQUE_ROW_BITS), i = (int)(v & ((1 << OPAQUE_ROW_BITS) - 1));
    struct batch *b = k >= 0 && k < N_BATCHES ? &r->b[k] : NULL;
    if (!b || b->phase != PHASE_PRODUCING || i >= b->n_rows) {
        log_error("delivery report for no row in flight", "batch=%d index=%d", k, i);
        return;
    }
    bool last;
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        last = batch_reported(b, i, NULL, NULL);
        r->st.published_total++;
        stats_observe(&r->st.delivery_latency, stats_now() - (double)b->created_ms[i] / 1000.0);
    } else {
        /* A fatal error fails its batch with the broker's error (e.g.
         * OUT_OF_ORDER_SEQUENCE_NUMBER), possibly before error_cb has run. */
        /* After a fatal error, the messages that were merely caught in it are
         * ours; the one(s) whose error caused it are suspects like any other. */
        enum kafka_fault fault = kafka_fault_of(err, producer_fatal(&r->prod));
        struct failure_verdict verdict = engine_judge_failure(fault, b->alone);
        enum stats_fail_reason kind = verdict.permanent ? STATS_FAIL_PERMANENT : STATS_FAIL_RETRIABLE;
        last = batch_reported(b, i, &verdict, rd_kafka_err2name(err));
        if (verdict.counted)
            r->st.failed_total[kind]++;
        if (verdict.suspect) {
            r->isolating = true;
            r->wake = true;
            if (b->ids[i] > r->isolate_until_id)
                r->isolate_until_id = b->ids[i];
            b->suspect_err = err;
        } else if (fault != KAFKA_FAULT_OURS &&
                   log_limit_allow(&r->failures, stats_mono(), LOG_LVL_WARN, "delivery failed",
                                   rd_kafka_err2name(err), b->ids[i])) {
            log_warn("delivery failed", "outbox_id=%" PRId64 " error=%s permanent=%s", b->ids[i],
                     rd_kafka_err2name(err), verdict.permanent ? "true" : "false");
        }
    }
    if (last) {
        log_debug("batch acknowledged", "batch=%d delivered=%d ms=%" PRIu64, b->slot,
                  b->n_delivered, now_ms(r) - b->start_ms);
        /* One line per batch, and a broker that refuses every batch fails
         * one after another: limited like the per-row lines. */
        if (b->n_suspects > 0 &&
            log_limit_allow(&r->failures, stats_mono(), LOG_LVL_WARN,
                            "delivery failed; retrying the rows one at a time before any is charged",
                            rd_kafka_err2name(b->suspect_err), b->span.lo))
            log_warn("delivery failed; retrying the rows one at a time before any is charged",
                     "rows=%d error=%s first_outbox_id=%" PRId64 " retry_up_to_outbox_id=%" PRId64,
                     b->n_suspects, rd_kafka_err2name(b->suspect_err), b->span.lo, r->isolate_until_id);
        r->queue_full = false; /* this batch's messages left the queue */
        step(r);
    }
}

/* "type\x1fid": an aggregate's identity as one string (\x1f cannot be typed by
 * accident and PostgreSQL text allows it, so in theory two aggregates could
 * collide; they would only be held together, never reordered). */
static char *agg_key(PGresult *res, int i)
{
    char *k = NULL;
    if (asprintf(&k, "%s\x1f%s", PQgetvalue(res, i, CLAIM_AGGREGATE_TYPE),
                 PQgetvalue(res, i, CLAIM_AGGREGATE_ID)) < 0)
        return NULL;
    return k;
}

/* Takes the ids of a claim result: what the next claim must skip is known
 * before a single row is produced. */
static void batch_load(struct batch *b, PGresult *res)
{
    int n = PQntuples(res);
    for (int i = 0; i < n; i++) {
        b->ids[i] = pg_claim_id(res, i);
        b->created_ms[i] = pg_claim_created_ms(res, i);
    }
    batch_loaded(b, n);
}

/* The batch ends before row @p i: the rows from @p i on stay unsent, so the
 * id range other claims skip must end before them, or a later row of one of
 * their aggregates would be claimed and produced first. */
static void batch_cut(struct relay *r, struct batch *b, int i, bool queue_full)
{
    batch_cut_at(b, i);
    r->queue_full = queue_full;
    r->truncations++;
    r->wake = true;
}

/* The row's topic into @p topic, checked. @return 0, or -EINVAL with @p err
 * saying why (the row is poison: its topic never will be valid). */
static int row_topic(struct relay *r, const struct event_row *row, char *topic, size_t len,
                     char *err, size_t errlen)
{
    int rc;
    if (row->topic && *row->topic)
        rc = snprintf(topic, len, "%s", row->topic) < (int)len ? 0 : -ENOSPC;
    else
        rc = event_topic_render(r->cfg->topic, row->aggregate_type, row->event_type, topic, len);
    if (rc < 0) {
        snprintf(err, errlen, "invalid topic name: longer than %zu bytes", len - 1);
        return -EINVAL;
    }
    return event_topic_check(topic, err, errlen) < 0 ? -EINVAL : 0;
}

/* Row @p i can never be produced as it is: charged (one attempt exhausts
 * it), and under a policy that holds, later rows of its aggregate wait. */
static void row_refused(struct relay *r, struct batch *b, PGresult *res, int i,
                        const struct event_row *row, const char *err)
{
    row_failed(r, b, i, STATS_FAIL_INVALID, LIMIT_ONE, err);
    if (r->poison->halts)
        r->halt_pending = true;
    if (r->poison->hold_in_flight)
        b->agg[i] = agg_key(res, i);
    if (log_limit_allow(&r->failures, stats_mono(), LOG_LVL_WARN, "row cannot be produced", err,
                        row->id))
        log_warn("row cannot be produced", "outbox_id=%" PRId64 " event_id=%s reason=%s", row->id,
                 row->event_id, log_quote(err));
}

/* Hands every claimed row to the producer. What can be seen to be poison
 * before producing (invalid topic, headers that are not an object of strings,
 * a message larger than message.max.bytes) fails here, without a round trip
 * to Kafka; a full local queue ends the batch early. */
static void produce_rows(struct relay *r, struct batch *b, PGresult *res)
{
    int n = PQntuples(res);
    char topic[256];
    char err[512];
    bool holding = r->poison->hold_in_flight;
    bool any_held = false;
    for (int k = 0; k < N_BATCHES && holding; k++)
        for (int j = 0; j < r->b[k].n_rows && !any_held; j++)
            any_held = r->b[k].agg[j] != NULL;

    for (int i = 0; i < n; i++) {
        if (r->st.halted)
            break; /* the rest stays ROW_SKIPPED: claimed again after a restart */
        if (any_held) {
            char *key = agg_key(res, i);
            if (key && batch_holds(r->b, N_BATCHES, key)) {
                b->agg[i] = key; /* held too: later rows of it wait as well */
                continue;
            }
            free(key);
        }

        struct event_row row;
        pg_claim_row(res, i, &row);
        int rc = row_topic(r, &row, topic, sizeof(topic), err, sizeof(err));
        if (rc == 0) {
            b->state[i] = ROW_PENDING;
            err[0] = '\0';
            void *opaque = (void *)(((intptr_t)b->slot << OPAQUE_ROW_BITS) | i);
            rc = producer_send(&r->prod, &row, topic, opaque, err, sizeof(err));
        }
        enum send_verdict v = rc == 0 ? SEND_QUEUED : engine_send_verdict(rc, in_flight(r) == 0);
        if (v == SEND_CUT) {
            b->state[i] = ROW_SKIPPED;
            log_warn("producer cannot take more now", "rows_queued=%d reason=%s", i,
                     log_quote(err));
            batch_cut(r, b, i, rc == -ENOBUFS);
            break;
        }
        if (v == SEND_TOO_LARGE)
            snprintf(err + strlen(err), sizeof(err) - strlen(err),
                     " (larger than the producer queue: queue.buffering.max.kbytes)");
        if (v != SEND_QUEUED) {
            row_refused(r, b, res, i, &row, err);
            any_held |= holding;
            continue;
        }
        b->n_outstanding++;
    }
    b->phase = b->n_outstanding > 0 ? PHASE_PRODUCING : PHASE_DELIVERED;
    /* Reports of messages produced just now may already be waiting. */
    producer_poll(&r->prod);
}

static void on_claimed(struct pg_conn *pg, PGresult *res, void *arg)
{
    struct batch *b = arg;
    struct relay *r = relay_of(b);
    if (!res) {
        if (batch_lost(b))
            batch_reset(b);
        return;
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        log_error("claim failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        session_evidence(r, res, "claim");
        batch_reset(b);
        r->backoff = true;
        return;
    }
    int n = PQntuples(res);
    log_debug("claimed", "batch=%d rows=%d ms=%" PRIu64, b->slot, n, now_ms(r) - b->start_ms);
    struct plan_state s;
    snapshot(r, &s);
    struct claim_verdict v = plan_claimed(&s, b, n, n ? pg_claim_id(res, 0) : 0);
    if (v.isolation_over) {
        r->isolating = false;
        r->isolate_until_id = 0;
    }
    b->alone = v.alone;
    r->quiet_wanted |= v.quiet_wanted;
    r->quiet_idle = v.quiet_idle;
    if (v.use != CLAIM_PRODUCE) {
        batch_reset(b); /* rows claimed but not produced stay unsent */
        r->wake |= v.use == CLAIM_STALE;
        step(r);
        return;
    }
    if (v.more)
        r->wake = true;
    /* Send PostgreSQL its next statement (the next claim, or a mark) before
     * producing this batch, so the database works while we do. */
    batch_load(b, res);
    b->phase = PHASE_PRODUCING;
    if (!plan_txn_holds(&s, b)) {
        b->txn_gen = producer_txn_gen(&r->prod);
        step(r);
        /* That step may have begun ending the transaction these rows were to
         * join: then they wait for the next one, as if held from the start. */
        snapshot(r, &s);
        if (b->phase != PHASE_PRODUCING || !plan_txn_holds(&s, b)) {
            produce_rows(r, b, res);
            step(r);
            return;
        }
    }
    b->held = res; /* produced when the open transaction is done (fence_step) */
    pg_result_keep(pg);
    step(r);
}

/* Claims as @p p says: into its slot, skipping the id range of the other
 * batches in flight (plan_next chose both). */
static void claim(struct relay *r, const struct plan_step *p)
{
    struct batch *b = &r->b[p->slot];
    if (batch_reserve(b, r->cfg->batch_size) < 0) {
        log_error("out of memory sizing the batch", "batch_size=%d", r->cfg->batch_size);
        r->backoff = true;
        return;
    }
    for (int k = 0; k < N_BATCHES; k++)
        if (p->rescan & (1u << k))
            r->b[k].rescan_after_mark = true;
    char limit[16], los[24], his[24];
    int64_t gaps[BATCH_GAPS_MAX];
    b->alone = p->alone;
    b->claim_gen = r->truncations;
    snprintf(limit, sizeof(limit), "%d", p->limit);
    snprintf(los, sizeof(los), "%" PRId64, p->skip.lo);
    snprintf(his, sizeof(his), "%" PRId64, p->skip.hi);
    int n_gaps = batch_gaps_within(r->b, N_BATCHES, p->rescan, p->skip, gaps, BATCH_GAPS_MAX);
    struct strbuf *in_gaps = &r->params[0]; /* free: no mark or record is being built */
    strbuf_reset(in_gaps);
    strbuf_printf(in_gaps, "{");
    for (int i = 0; i < n_gaps; i++)
        strbuf_printf(in_gaps, "%s%" PRId64, i ? "," : "", gaps[i]);
    strbuf_printf(in_gaps, "}");
    if (in_gaps->oom) {
        log_error("out of memory building a claim", "gaps=%d", n_gaps);
        r->backoff = true;
        return;
    }
    const char *params[] = { limit, los, his, n_gaps < 0 ? NULL : strbuf_str(in_gaps) };
    r->wake = false;
    r->notifies = 0;
    r->claim_first = false;
    b->phase = PHASE_CLAIMING;
    b->start_ms = now_ms(r);
    if (pg_query_prepared_binary(&r->pg, "claim", 4, params, on_claimed, b) < 0)
        batch_reset(b);
}

static void on_recorded(struct pg_conn *pg, PGresult *res, void *arg);
static void record_failure_from(struct relay *r, struct batch *b, int from);

/* Rows whose failure counts as an attempt (ROW_FAILED with a reason). */
/* The record statement's parameters are three array literals, built row by
 * row: begin, add each row (the @p n-th so far), send. */
static void failures_begin(struct relay *r)
{
    for (int k = 0; k < 3; k++)
        strbuf_reset(&r->params[k]);
}

static void failures_add(struct relay *r, const struct batch *b, int i, int n)
{
    struct strbuf *ids = &r->params[0], *errs = &r->params[1], *max = &r->params[2];
    strbuf_printf(ids, "%s%" PRId64, n ? "," : "{", b->ids[i]);
    strbuf_printf(errs, "%s", n ? "," : "{");
    strbuf_array_elem(errs, b->reason[i]);
    strbuf_printf(max, "%s%d", n ? "," : "{", b->limit[i] == LIMIT_ONE ? 1 : r->cfg->max_attempts);
}

static void failures_send(struct relay *r, struct batch *b, int n)
{
    struct strbuf *ids = &r->params[0], *errs = &r->params[1], *max = &r->params[2];
    strbuf_printf(ids, "}");
    strbuf_printf(errs, "}");
    strbuf_printf(max, "}");
    if (ids->oom || errs->oom || max->oom) {
        log_error("out of memory recording failures", "rows=%d", n);
        batch_reset(b);
        r->backoff = true;
        return;
    }
    const char *params[] = { strbuf_str(ids), strbuf_str(errs), strbuf_str(max),
                             r->poison->dead_letters ? "t" : "f" };
    b->phase = PHASE_RECORDING;
    if (pg_query(&r->pg, r->sql.record_failures, 4, params, on_recorded, b) < 0)
        batch_reset(b);
}

/* Row @p k of a failure record's result: dead-lettered, halting, or to be
 * tried again, as its policy says. */
static void recorded_row(struct relay *r, const struct batch *b, const PGresult *res, int k)
{
    const char *id = PQgetvalue(res, k, 0);
    const char *attempts = PQgetvalue(res, k, 1);
    bool dead = PQgetvalue(res, k, 2)[0] == 't';
    bool exhausted = PQgetvalue(res, k, 3)[0] == 't';
    const char *why = "";
    for (int i = 0; i < b->n_rows; i++)
        if (b->reason[i] && b->ids[i] == strtoll(id, NULL, 10))
            why = b->reason[i];
    switch (poison_outcome_of(r->poison, dead, exhausted, r->st.halted)) {
    case OUTCOME_DEAD_LETTERED:
        r->st.dead_total++;
        if (log_limit_allow(&r->failures, stats_mono(), LOG_LVL_ERROR, r->poison->dead_msg, why,
                            strtoll(id, NULL, 10)))
            log_error(r->poison->dead_msg, "outbox_id=%s attempts=%s error=%s", id, attempts,
                      log_quote(why));
        break;
    case OUTCOME_HALT:
        r->st.halted = true;
        snprintf(r->st.halt_reason, sizeof(r->st.halt_reason),
                 "outbox row %s cannot be delivered after %s attempts: %s", id, attempts, why);
        log_error("relaying halted: a row cannot be delivered (on_poison=halt); fix or "
                  "requeue it and restart",
                  "outbox_id=%s attempts=%s error=%s", id, attempts, log_quote(why));
        break;
    case OUTCOME_RETRY:
        break;
    }
}

static void on_recorded(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct batch *b = arg;
    struct relay *r = relay_of(b);
    if (!res) {
        if (batch_lost(b))
            batch_reset(b);
        return;
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        enum record_retry next = batch_record_failed(b);
        if (next == RECORD_EACH) {
            log_warn("recording the failures of a batch failed; recording them row by row",
                     "error=%s", log_quote(PQresultErrorMessage(res)));
            b->record_each = true;
            record_failure_from(r, b, 0);
            return;
        }
        log_error("recording the failure of a row failed; it stays unsent and is tried again",
                  "outbox_id=%" PRId64 " error=%s", b->ids[b->record_each ? b->record_row
                                                                          : batch_first_failure(b)],
                  log_quote(PQresultErrorMessage(res)));
        if (next == RECORD_GIVE_UP) {
            batch_reset(b);
            r->backoff = true;
            return;
        }
        b->record_lost = true;
        record_failure_from(r, b, b->record_row + 1);
        return;
    }
    for (int k = 0; k < PQntuples(res); k++)
        recorded_row(r, b, res, k);
    if (b->record_each) {
        record_failure_from(r, b, b->record_row + 1);
        return;
    }
    batch_done(r, b);
    step(r);
}

/* Records the failures that may be the row's own (attempts + 1, last_error;
 * dead_at once exhausted). An outage (a broker down, replicas short, a
 * time-out) or a fatal producer costs no attempt, even when other partitions
 * delivered: those rows are simply produced again. */
static void record_failures(struct relay *r, struct batch *b)
{
    switch (batch_after_marks(b)) {
    case BATCH_RECORD:
        failures_begin(r);
        int n = 0;
        for (int i = 0; i < b->n_rows; i++)
            if (b->state[i] == ROW_FAILED && b->reason[i])
                failures_add(r, b, i, n++);
        failures_send(r, b, n);
        return;
    case BATCH_RETRY_LATER:
        log_warn("no row of the batch reached Kafka; retrying without counting attempts",
                 "failed=%d", batch_failures_uncharged(b));
        batch_reset(b);
        r->backoff = true;
        break;
    case BATCH_DONE:
        batch_done(r, b);
        break;
    }
    step(r);
}

/* The fallback: records the next failure at or after row @p from alone;
 * after the last one the batch is done. A row whose failure could not be
 * recorded is claimed again, so the relay then waits a poll interval rather
 * than spinning on it; the other rows' records are written. */
static void record_failure_from(struct relay *r, struct batch *b, int from)
{
    for (int i = from; i < b->n_rows; i++) {
        if (b->state[i] != ROW_FAILED || !b->reason[i])
            continue;
        b->record_row = i;
        failures_begin(r);
        failures_add(r, b, i, 0);
        failures_send(r, b, 1);
        return;
    }
    bool lost = b->record_lost;
    batch_done(r, b);
    if (lost)
        r->backoff = true;
    step(r);
}

/* Every batch whose marks the statement just ended was writing. */
static unsigned marking_slots(const struct relay *r)
{
    unsigned slots = 0;
    for (int k = 0; k < N_BATCHES; k++)
        if (r->b[k].phase == PHASE_MARKING)
            slots |= 1u << k;
    return slots;
}

/* One statement marks the batches of @p arg's mark (the lead, and those
 * marked with it); each then records its failures in turn, the lead first. */
static void on_marked(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct batch *b = arg;
    struct relay *r = relay_of(b);
    unsigned slots = marking_slots(r);
    if (!res) {
        for (int k = 0; k < N_BATCHES; k++)
            if ((slots & (1u << k)) && batch_lost(&r->b[k]))
                batch_reset(&r->b[k]);
        return;
    }
    for (int k = 0; k < N_BATCHES; k++)
        if (slots & (1u << k))
            r->b[k].phase = PHASE_DELIVERED;
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        log_error("marking rows sent failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        session_evidence(r, res, "mark");
        r->backoff = true;
        return;
    }
    int rows = 0;
    for (int k = 0; k < N_BATCHES; k++) {
        if (!(slots & (1u << k)))
            continue;
        r->b[k].marked = true;
        rows += r->b[k].n_delivered;
    }
    log_debug("batch marked sent", "batch=%d batches=%d rows=%d marked=%s ms=%" PRIu64, b->slot,
              __builtin_popcount(slots), rows, PQcmdTuples(res), now_ms(r) - b->start_ms);
    /* The others are DELIVERED and marked: the plan hands them to mark(),
     * which goes straight on to their failures. */
    record_failures(r, b);
}

/* Marks the delivered rows of @p b, and in the same statement those of the
 * slots in @p with (bit k): one round trip and one commit instead of one
 * each, when a Kafka transaction settled several batches at once. */
static void mark(struct relay *r, struct batch *b, unsigned with)
{
    if (!batch_marks_due(b)) {
        record_failures(r, b);
        return;
    }
    struct strbuf *ids = &r->params[0];
    int n = 0;
    strbuf_reset(ids);
    strbuf_printf(ids, "{");
    with = (with | (1u << b->slot));
    for (int k = 0; k < N_BATCHES; k++) {
        struct batch *x = &r->b[k];
        if (!(with & (1u << k)) || !batch_marks_due(x))
            continue;
        for (int i = 0; i < x->n_rows; i++)
            if (x->state[i] == ROW_DELIVERED)
                strbuf_printf(ids, "%s%" PRId64, n++ ? "," : "", x->ids[i]);
        x->phase = PHASE_MARKING;
    }
    strbuf_printf(ids, "}");
    if (ids->oom) {
        log_error("out of memory building marks", "rows=%d", n);
        for (int k = 0; k < N_BATCHES; k++)
            if (r->b[k].phase == PHASE_MARKING)
                r->b[k].phase = PHASE_DELIVERED;
        r->backoff = true;
        return;
    }
    const char *params[] = { strbuf_str(ids) };
    /* Refused for a pooled session: the prepared mark may be gone, the text is not. */
    int rc = r->st.refused ? pg_query(&r->pg, r->sql.mark_sent, 1, params, on_marked, b)
                           : pg_query_prepared(&r->pg, "mark", 1, params, on_marked, b);
    if (rc < 0)
        for (int k = 0; k < N_BATCHES; k++)
            if (r->b[k].phase == PHASE_MARKING)
                r->b[k].phase = PHASE_DELIVERED;
}

/* ---- retention --------------------------------------------------------- */

#define RETENTION_BATCH 1000

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

/* ---- backlog and systemd ---------------------------------------------- */

static void notify_status(struct relay *r)
{
    char buf[256];
    /* systemctl status shows it: "starting" says more there than "unknown". */
    const char *role =
        r->st.role == STATS_ROLE_UNKNOWN ? "starting" : health_role_name(r->st.role);
    if (r->st.halted)
        role = "halted";
    if (r->st.refused) {
        snprintf(buf, sizeof(buf), "STATUS=refused: %.230s", r->st.refused_reason);
        notify_send(buf);
        return;
    }
    snprintf(buf, sizeof(buf), "STATUS=%s; postgres %s; backlog %" PRId64 "; published %" PRIu64,
             role, r->st.pg_up ? "up" : "down", r->st.backlog_known ? r->st.backlog_rows : -1,
             r->st.published_total);
    notify_send(buf);
}

static void on_backlog(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    r->backlog_took_ms = now_ms(r) - r->backlog_sent_ms;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        r->st.backlog_known = true;
        r->st.backlog_rows = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        r->st.oldest_unsent_age = strtod(PQgetvalue(res, 0, 1), NULL);
        r->st.dead_rows = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
        r->st.backlog_time = stats_now();
        r->st.backlog_published = r->st.published_total;
    } else {
        log_warn("backlog query failed", "error=%s", log_quote(PQresultErrorMessage(res)));
    }
    notify_status(r);
    step(r);
}

/* ---- leadership -------------------------------------------------------- */

/* The leader lock is a session-level advisory lock: it elects one leader
 * only while each relay's connection is a server session of its own. A
 * pooler in transaction or statement mode breaks that without an error:
 * one connection's statements run in several server sessions, and one server
 * session serves several relays (which then all "hold" the lock). So every
 * statement about the lock also says which backend answered and whether the
 * marker this relay set at connect is still there, and any sign of a shared
 * session refuses relaying for good. Session pooling keeps a server session
 * per connection and passes these checks. */

#define POOLED                                                                              \
    "the connection to PostgreSQL is pooled per transaction or statement (e.g. PgBouncer " \
    "pool_mode=transaction), where the leader lock cannot elect one leader: "
#define POOLED_FIX "; connect directly or through session pooling, then restart"

/* A live leader runs a statement at least every 20 s (the backlog query,
 * PLAN_BACKLOG_AT_MOST_EVERY_MS) and on every tick; a standby behind a holder idle for longer than this, or
 * behind something that is not a relay, says so in its readiness. */
#define STANDBY_STUCK_S 30.0

#define RELEASE_TRIES 5

static void set_role(struct relay *r, enum stats_role role)
{
    if (r->st.role != role)
        r->st.role_since = role == STATS_ROLE_UNKNOWN ? 0 : stats_now();
    r->st.role = role;
    if (role != STATS_ROLE_STANDBY) {
        r->st.holder.known = false;
        r->st.standby_stuck = false;
    }
}

/* A new connection: a new marker, nothing checked yet. */
static void session_reset(struct relay *r)
{
    snprintf(r->token, sizeof(r->token), "%d-%016" PRIx64, (int)getpid(),
             uv_hrtime() ^ ((uint64_t)rand() << 32) ^ (uint64_t)rand());
    r->session_checked = false;
    r->schema_checked = false;
    r->holder_due = false;
    r->may_hold_lock = false;
    r->release_tries = 0;
    r->st.backend_pid = 0;
    r->st.via_proxy = false;
}

/* Relaying stops for good: no claim from now on; the batches in flight are
 * still marked (a mark records a fact), then the lock is given back and the
 * connection closed. Readiness, /status and the log say why. */
static void refuse(struct relay *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void refuse(struct relay *r, const char *fmt, ...)
{
    if (r->st.refused)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->st.refused_reason, sizeof(r->st.refused_reason), fmt, ap);
    va_end(ap);
    r->st.refused = true;
    r->st.refused_time = stats_now();
    r->refuse_deadline_ms = now_ms(r) + (uint64_t)r->cfg->shutdown_timeout_ms;
    log_error("refusing to relay", "reason=%s", log_quote(r->st.refused_reason));
    notify_status(r);
    if (!r->ready_sent) {
        /* Started, and staying up to say why: systemd must not wait for a
         * role that will never come (and restart us into the same refusal). */
        r->ready_sent = true;
        notify_send("READY=1");
    }
}

/* What a failed statement says about the session. A prepared statement that
 * already exists on a new connection, or that vanished from the connection
 * that prepared it, is another client's server session answering: refused.
 * A privilege error may be a policy that appeared since the check (with
 * row_security off it fails the claim): check the session again.
 * @return true when relaying was refused. */
static bool session_evidence(struct relay *r, const PGresult *res, const char *statement)
{
    const char *state = pg_sqlstate(res);
    if (strcmp(state, "42501") == 0) { /* insufficient_privilege */
        r->session_checked = false;
        return false;
    }
    if (strcmp(state, "42P05") == 0) /* duplicate_prepared_statement */
        refuse(r, POOLED "prepared statement \"%s\" already existed on a connection that never "
                         "prepared it" POOLED_FIX,
               statement);
    else if (strcmp(state, "26000") == 0) /* invalid_sql_statement_name */
        refuse(r, POOLED "prepared statement \"%s\" vanished from the connection that prepared "
                         "it" POOLED_FIX,
               statement);
    else
        return false;
    return true;
}

/* @return true (and refuses) when another server session answered. */
static bool session_shared(struct relay *r, int pid, bool ours)
{
    if (pid != r->st.backend_pid) {
        refuse(r, POOLED "pg_backend_pid() was %d when this connection started and is %d now"
                         POOLED_FIX,
               r->st.backend_pid, pid);
        return true;
    }
    if (!ours) {
        refuse(r, POOLED "the marker this connection set in its session at start is gone from "
                         "backend %d (another client's session state)" POOLED_FIX,
               pid);
        return true;
    }
    return false;
}

static bool col_true(const PGresult *res, int col)
{
    return !PQgetisnull(res, 0, col) && PQgetvalue(res, 0, col)[0] == 't';
}

static void on_session_checked(struct pg_conn *pg, PGresult *res, void *arg)
{
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
        PQnfields(res) != SESSION_NCOLS) {
        log_error("session check failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        r->backoff = true;
        return;
    }
    r->session_checked = true;
    r->table_exists = col_true(res, SESSION_TABLE_EXISTS);
    r->ledger_exists = col_true(res, SESSION_LEDGER_EXISTS);
    r->ledger_readable = col_true(res, SESSION_LEDGER_READABLE);
    r->st.backend_pid = atoi(PQgetvalue(res, 0, SESSION_PID));
    /* A pooler or proxy answers the startup with a pid of its own. Session
     * pooling is fine, so this alone refuses nothing; the lock's checks decide. */
    int announced = pg_announced_pid(pg);
    r->st.via_proxy = announced != r->st.backend_pid;
    if (r->st.via_proxy)
        log_info("connected through a pooler or proxy; checking that the session is its own",
                 "backend_pid=%d announced_pid=%d", r->st.backend_pid, announced);

    r->st.row_security = false;
    if (col_true(res, SESSION_RLS_ACTIVE)) {
        char what[400];
        snprintf(what, sizeof(what),
                 "row-level security filters \"%s\".\"%s\" for role \"%s\" (relrowsecurity=%s, "
                 "relforcerowsecurity=%s, rolbypassrls=%s, table owner=%s)",
                 r->cfg->schema, r->cfg->table, PQgetvalue(res, 0, SESSION_USER),
                 col_true(res, SESSION_RELROWSECURITY) ? "on" : "off",
                 col_true(res, SESSION_RELFORCEROWSECURITY) ? "on" : "off",
                 col_true(res, SESSION_ROLBYPASSRLS) ? "on" : "off",
                 col_true(res, SESSION_OWNER) ? "yes" : "no");
        if (!r->cfg->allow_row_security) {
            refuse(r, "%s: rows a policy hides would never be published, and the backlog would "
                      "not count them; give the role BYPASSRLS, disable row-level security on "
                      "the table, or set relay.allow_row_security = true",
                   what);
        } else {
            r->st.row_security = true;
            r->st.backlog_known = false;
            log_warn("relaying only the rows row-level security lets this role see "
                     "(relay.allow_row_security = true); the backlog is unknown",
                     "detail=%s", log_quote(what));
        }
    }
    step(r);
}

/* ---- the schema -------------------------------------------------------- */

/* How often a schema that stays unfit is named again in the log; it is
 * checked again every poll interval, so a migrate run later is picked up. */
#define SCHEMA_LOG_EVERY_MS 60000

/* Relaying waits for `outbox-relay migrate`: said once (and every minute),
 * not once per poll; readiness and /status say it meanwhile. */
static void schema_wait(struct relay *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void schema_wait(struct relay *r, const char *fmt, ...)
{
    char why[sizeof r->st.schema_problem];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    bool changed = strcmp(why, r->st.schema_problem) != 0;
    if (changed || now_ms(r) - r->schema_logged_ms >= SCHEMA_LOG_EVERY_MS) {
        log_error("waiting for the outbox table's schema; nothing is relayed until then",
                  "reason=%s", log_quote(why));
        r->schema_logged_ms = now_ms(r);
    }
    memcpy(r->st.schema_problem, why, sizeof why);
    /* Checked afresh next tick: the session check sees a table created since. */
    r->session_checked = false;
    r->backoff = true;
    if (!r->ready_sent) {
        /* Started, and staying up to say why (as for a refusal). */
        r->ready_sent = true;
        notify_send("READY=1");
    }
}

static void on_schema_version(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        log_error("reading the schema version failed", "error=%s",
                  log_quote(PQresultErrorMessage(res)));
        r->backoff = true;
        return;
    }
    int version = atoi(PQgetvalue(res, 0, 0)), known = migrate_known_version();
    r->st.schema_version = version;
    if (version < known) {
        schema_wait(r, "\"%s\".\"%s\" is at schema version %d and this outbox-relay needs %d: "
                       "run `outbox-relay migrate` with this configuration",
                    r->cfg->schema, r->cfg->table, version, known);
        return;
    }
    if (version > known) {
        /* A newer schema may have renamed or dropped what this binary's
         * statements name, or changed what a column means. */
        refuse(r, "\"%s\".\"%s\" is at schema version %d, newer than this outbox-relay knows "
                  "(%d): upgrade outbox-relay",
               r->cfg->schema, r->cfg->table, version, known);
        step(r);
        return;
    }
    if (r->st.schema_problem[0])
        log_info("the outbox table's schema is fit; relaying", "schema_version=%d", version);
    r->st.schema_problem[0] = '\0';
    r->schema_checked = true;
    step(r);
}

static void schema_check(struct relay *r)
{
    if (!r->table_exists) {
        schema_wait(r, "the outbox table \"%s\".\"%s\" does not exist: run `outbox-relay "
                       "migrate` with this configuration",
                    r->cfg->schema, r->cfg->table);
        return;
    }
    if (!r->ledger_exists) {
        schema_wait(r, "\"%s\".\"%s\" was not made by `outbox-relay migrate` (no "
                       "\"%s\".\"outbox_relay_migrations\"): run it with this configuration",
                    r->cfg->schema, r->cfg->table, r->cfg->schema);
        return;
    }
    if (!r->ledger_readable) {
        /* A role granted only the outbox table (as deployments before this
         * check were told) still relays; the version is simply unknown. */
        if (!r->warned_ledger)
            log_warn("cannot read the outbox table's schema version: this role may not read "
                     "the migrations table; relaying on the table as it is",
                     "fix=%s", log_quote("GRANT SELECT ON \"outbox_relay_migrations\" (in relay.schema) "
                                         "to the relay's role"));
        r->warned_ledger = true;
        r->st.schema_problem[0] = '\0';
        r->schema_checked = true;
        step(r);
        return;
    }
    /* Valid identifiers (sql_session_init checked them) are short. */
    char plain[256];
    snprintf(plain, sizeof plain, "%s.%s", r->cfg->schema, r->cfg->table);
    const char *params[] = { plain };
    pg_query(&r->pg, r->ssql.version, 1, params, on_schema_version, r);
}

static void session_check(struct relay *r)
{
    /* Unless allowed, row_security = off makes a policy that appears later
     * fail the claim loudly instead of hiding rows. */
    const char *params[] = { r->token, r->cfg->allow_row_security ? "f" : "t" };
    pg_query(&r->pg, r->ssql.check, 2, params, on_session_checked, r);
}

static void on_lock(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 || PQnfields(res) != 4) {
        log_error("leader lock query failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        r->backoff = true;
        return;
    }
    int pid = atoi(PQgetvalue(res, 0, 0));
    if (session_shared(r, pid, col_true(res, 1)))
        return;
    if (col_true(res, 2)) {
        /* Our own session cannot hold a lock this relay never took. */
        refuse(r, POOLED "backend %d already held the leader lock before this relay asked for "
                         "it (another client shares that server session)" POOLED_FIX,
               pid);
        return;
    }
    if (col_true(res, 3)) {
        r->may_hold_lock = true;
        r->lead_unverified = false;
        set_role(r, STATS_ROLE_LEADER);
        r->wake = true; /* catch up: notifications were not heard before */
        r->claim_first = !r->st.halted; /* a halted relay claims nothing */
        r->claim_first_until = now_ms(r) + 2000;
        log_info("became leader", "schema=%s table=%s backend_pid=%d", r->cfg->schema,
                 r->cfg->table, pid);
    } else {
        if (r->st.role != STATS_ROLE_STANDBY)
            log_info("standing by", "schema=%s table=%s reason=\"another session holds the leader lock\"",
                     r->cfg->schema, r->cfg->table);
        set_role(r, STATS_ROLE_STANDBY);
        r->holder_due = true;
    }
    step(r);
}

/* The leader, every tick: same backend, our marker, the lock still ours. */
static void on_verified(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 || PQnfields(res) != 3) {
        log_error("leader lock check failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        r->backoff = true;
        return;
    }
    int pid = atoi(PQgetvalue(res, 0, 0));
    if (session_shared(r, pid, col_true(res, 1)))
        return;
    if (!col_true(res, 2)) {
        refuse(r, "the leader lock is no longer held by this relay's session (backend %d); "
                  "relaying stopped so that two relays never lead at once; restart the relay",
               pid);
        return;
    }
    r->lead_unverified = false;
    step(r);
}

/* "2025-01-07T09:12:01Z", or "unknown" for 0. */
static const char *utc_text(double t, char *buf, size_t len)
{
    time_t secs = (time_t)t;
    struct tm tm;
    if (t <= 0 || !gmtime_r(&secs, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, len, "unknown");
    return buf;
}

/* A standby long behind a holder that is not a relay, or that has been idle
 * longer than any live relay is, may wait for ever: say who it is. */
static void judge_holder(struct relay *r)
{
    const struct stats_lock_holder *h = &r->st.holder;
    double waited = stats_now() - r->st.role_since;
    bool not_relay = h->application_name[0] && !h->looks_like_relay;
    bool idle = h->idle_seconds >= STANDBY_STUCK_S && strcmp(h->state, "active") != 0;
    bool was = r->st.standby_stuck;
    r->st.standby_stuck = h->known && waited >= STANDBY_STUCK_S && (not_relay || idle);
    if (!r->st.standby_stuck)
        return;
    char started[32], idle_text[48] = "";
    if (h->idle_seconds >= 0)
        snprintf(idle_text, sizeof(idle_text), " for %.0f s", h->idle_seconds);
    char why[128];
    if (not_relay)
        snprintf(why, sizeof(why), "is not an outbox-relay");
    else
        snprintf(why, sizeof(why),
                 "has run no statement for %.0f s (a live relay runs one every few seconds)",
                 h->idle_seconds);
    snprintf(r->st.standby_reason, sizeof(r->st.standby_reason),
             "standby for %.0f s behind backend %d (application_name \"%s\", client_addr %s, "
             "backend_start %s, state %s%s), which %s; if it is stale, end it with "
             "SELECT pg_terminate_backend(%d)",
             waited, h->pid, h->application_name, h->client_addr[0] ? h->client_addr : "unknown",
             utc_text(h->backend_start, started, sizeof(started)),
             h->state[0] ? h->state : "unknown", idle_text, why, h->pid);
    if (!was)
        log_warn("standing by behind a leader lock holder that does not look like a relay",
                 "holder_pid=%d application_name=%s client_addr=%s state=%s idle_s=%.0f",
                 h->pid, log_quote(h->application_name), log_quote(h->client_addr),
                 log_quote(h->state), h->idle_seconds);
}

static void copy_col(char *dst, size_t len, const PGresult *res, int col)
{
    snprintf(dst, len, "%s", PQgetisnull(res, 0, col) ? "" : PQgetvalue(res, 0, col));
}

static void on_holder(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQnfields(res) != HOLDER_NCOLS) {
        log_warn("leader lock holder query failed", "error=%s",
                 log_quote(PQresultErrorMessage(res)));
        step(r);
        return;
    }
    struct stats_lock_holder *h = &r->st.holder;
    memset(h, 0, sizeof(*h));
    h->idle_seconds = -1;
    if (PQntuples(res) == 1) {
        h->known = true;
        h->pid = atoi(PQgetvalue(res, 0, HOLDER_PID));
        copy_col(h->application_name, sizeof(h->application_name), res, HOLDER_APPLICATION_NAME);
        copy_col(h->client_addr, sizeof(h->client_addr), res, HOLDER_CLIENT_ADDR);
        copy_col(h->state, sizeof(h->state), res, HOLDER_STATE);
        if (!PQgetisnull(res, 0, HOLDER_BACKEND_START))
            h->backend_start = strtod(PQgetvalue(res, 0, HOLDER_BACKEND_START), NULL);
        if (!PQgetisnull(res, 0, HOLDER_IDLE_SECONDS))
            h->idle_seconds = strtod(PQgetvalue(res, 0, HOLDER_IDLE_SECONDS), NULL);
        h->looks_like_relay = strncmp(h->application_name, "outbox-relay", 12) == 0;
    }
    judge_holder(r);
    step(r);
}

/* A statement about the leader lock: it names this relay's session marker. */
static void lock_query(struct relay *r, const char *sql, pg_result_cb cb)
{
    const char *params[] = { r->token };
    pg_query(&r->pg, sql, 1, params, cb, r);
}

static void on_released(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && col_true(res, 0)) {
        log_info("leader lock released", "backend_pid=%d", r->st.backend_pid);
        r->may_hold_lock = false;
    }
    step(r);
}

/* Refused: give the lock back where it was taken (behind a pooler the
 * statement may reach another server session: a few tries), then close. */
static void wind_down(struct relay *r)
{
    if (r->may_hold_lock && r->release_tries < RELEASE_TRIES) {
        char pid[16];
        snprintf(pid, sizeof(pid), "%d", r->st.backend_pid);
        const char *params[] = { pid };
        r->release_tries++;
        pg_query(&r->pg, r->ssql.release, 1, params, on_released, r);
        return;
    }
    log_info("postgres connection closed; relaying stays refused until a restart",
             "leader_lock=%s",
             r->may_hold_lock ? "\"may be kept by a pooled server session\"" : "not_held");
    pg_close(&r->pg);
    r->may_hold_lock = false;
    r->st.pg_up = false;
    r->listening = false;
    set_role(r, STATS_ROLE_UNKNOWN);
    notify_status(r);
}

/* ---- the quiet lock ----------------------------------------------------- */

static void quiet_set(struct relay *r, enum plan_quiet q)
{
    r->quiet = q;
    r->st.quiet = q == PLAN_QUIET_ON;
}

static void quiet_reset(struct relay *r)
{
    quiet_set(r, PLAN_QUIET_OFF);
    r->quiet_wanted = false;
    r->quiet_idle = false;
    uv_timer_stop(&r->quiet_timer);
}

/* A quiet-lock statement's one boolean; -1 (logged, back-off) on failure. */
static int quiet_answer(struct relay *r, PGresult *res, const char *what)
{
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        log_error("the quiet lock's statement failed", "statement=%s error=%s", what,
                  log_quote(PQresultErrorMessage(res)));
        session_evidence(r, res, what);
        r->backoff = true;
        return -1;
    }
    return PQgetvalue(res, 0, 0)[0] == 't';
}

static void on_quiet_on(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    r->quiet_wanted = false;
    if (quiet_answer(r, res, "quiet_on") == 1) {
        quiet_set(r, PLAN_QUIET_ON);
        r->quiet_idle = false;
        r->wake = true; /* from now on no NOTIFY says so */
        log_debug("quiet: writers send no NOTIFY while claims find rows", "");
    }
    step(r);
}

static void on_quiet_off(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (quiet_answer(r, res, "quiet_off") < 0)
        return;
    quiet_set(r, PLAN_QUIET_LEAVING);
    r->quiet_check_at_ms = now_ms(r);
    r->quiet_backoff_ms = 0;
    step(r);
}

static void on_quiet_timer(uv_timer_t *t)
{
    struct relay *r = t->data;
    r->wake = true;
    step(r);
}

static void on_quiet_check(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    int none_open = quiet_answer(r, res, "quiet_check");
    if (none_open < 0)
        return;
    if (none_open) {
        /* Every row whose writer sent no NOTIFY is committed: one last claim. */
        quiet_set(r, PLAN_QUIET_OFF);
        r->quiet_wanted = false; /* from claims before: the next ones decide afresh */
        r->wake = true;
        log_debug("quiet: writers notify again", "");
    } else {
        /* Claim what the ones that ended wrote, and look again later. */
        r->quiet_backoff_ms =
            plan_quiet_check_wait(r->quiet_backoff_ms, (uint64_t)r->cfg->poll_interval_ms);
        r->quiet_check_at_ms = now_ms(r) + r->quiet_backoff_ms;
        uv_timer_start(&r->quiet_timer, on_quiet_timer, r->quiet_backoff_ms, 0);
        r->wake = true;
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
    if (producer_start(&r->prod, r->loop, r->cfg, on_report, r, &r->st, err, sizeof(err)) < 0) {
        log_error("cannot recreate the kafka producer", "error=%s", log_quote(err));
        r->backoff = true;
        return false;
    }
    /* Fenced means another relay may lead now: the new instance initialises
     * transactions (fencing in turn) only once the lock check says this
     * session still holds the lock (it fails if the session is gone). */
    if (producer_txn_state(&r->prod) != PRODUCER_TXN_OFF && r->st.role == STATS_ROLE_LEADER) {
        r->lead_unverified = true;
        r->lock_due = true;
    }
    return true;
}

/* ---- fencing: Kafka transactions --------------------------------------- */

/* With relay.fencing=transactional the rows of the batches in flight are one
 * Kafka transaction, committed once a batch has all its reports; a batch is
 * marked only after its transaction committed. A leader initialises
 * transactions before its first produce, which aborts whatever an older
 * leader still had open and fences it: a paused leader that wakes up cannot
 * make anything visible to read_committed consumers, nor mark it. */

/* Held rows whose predecessor aborted would overtake its rows: they are
 * released unproduced and claimed again. */
static void txn_drop_held(struct relay *r)
{
    for (int k = 0; k < N_BATCHES; k++) {
        if (!r->b[k].held)
            continue;
        batch_reset(&r->b[k]);
        r->wake = true;
    }
}

/* Produces held batch @p k into the open, empty transaction; a stale one
 * (a batch was cut after its claim skipped that batch's whole range) is
 * dropped and claimed again. */
static void txn_release(struct relay *r, int k, bool stale)
{
    struct batch *b = &r->b[k];
    if (stale) {
        batch_reset(b);
        r->wake = true;
        return;
    }
    PGresult *res = b->held;
    b->held = NULL;
    b->txn_gen = producer_txn_gen(&r->prod);
    produce_rows(r, b, res);
    PQclear(res);
}

/* The batch's transaction was aborted: what Kafka acknowledged is invisible,
 * so none of it is marked; the rows are produced again without an attempt
 * counted (rows that failed on their own still count theirs). */
static void txn_unpublish(struct relay *r, struct batch *b)
{
    for (int i = 0; i < b->n_rows; i++) {
        if (b->state[i] != ROW_DELIVERED)
            continue;
        row_failed(r, b, i, STATS_FAIL_RETRIABLE, LIMIT_NONE, NULL);
        r->st.published_total--;
    }
    b->n_delivered = 0;
    b->committed = true; /* settled: mark() records what failed and releases the rest */
    /* A claim sent while this batch was in flight skipped its ids: its rows
     * would overtake these, so its result is dropped and claimed again. */
    b->unpublished = true;
    r->truncations++;
    r->wake = true;
}

static void on_txn_ended(void *arg, unsigned gen, enum producer_txn_result res, const char *why)
{
    struct relay *r = arg;
    if (batch_txn_ended(r->b, N_BATCHES, gen, res))
        txn_drop_held(r);
    uint64_t ms = now_ms(r) - r->txn_start_ms;
    switch (res) {
    case PRODUCER_TXN_DONE:
        if (gen == 0)
            log_info("kafka transactions initialised; older leaders are fenced",
                     "transactional_id=%s ms=%" PRIu64, r->prod.txn_id, ms);
        else
            log_debug("transaction committed", "ms=%" PRIu64, ms);
        break;
    case PRODUCER_TXN_ABORTED:
        r->st.txn_aborted_total++;
        log_warn("kafka transaction aborted; its rows stay unsent and are produced again",
                 "error=%s", log_quote(why));
        break;
    case PRODUCER_TXN_RETRY:
        log_warn("kafka transactions not initialised yet; retrying", "error=%s", log_quote(why));
        break;
    case PRODUCER_TXN_FAILED:
        log_error("kafka producer fenced or failed: nothing of its open transaction is visible "
                  "or marked; leadership is checked again before producing",
                  "transactional_id=%s error=%s", r->prod.txn_id, log_quote(why));
        break;
    }
    step(r);
}

/* Carries out what plan_fence decided, in its order: settles, initialises,
 * commits, releases; needs no PostgreSQL. */
static void fence_step(struct relay *r, const struct plan_state *s)
{
    struct producer *p = &r->prod;
    struct fence_plan f = plan_fence(s);
    for (int k = 0; k < N_BATCHES; k++)
        if (f.unpublish & (1u << k))
            txn_unpublish(r, &r->b[k]);
    if (f.init && producer_txn_init(p, on_txn_ended, r) == 0)
        r->txn_start_ms = now_ms(r);
    if (f.drop_held)
        txn_drop_held(r);
    for (int k = 0; k < N_BATCHES; k++)
        if (f.settle_empty & (1u << k))
            r->b[k].committed = true;
    if (f.commit && producer_txn_commit(p, on_txn_ended, r) == 0)
        r->txn_start_ms = now_ms(r);
    if (f.release >= 0)
        txn_release(r, f.release, f.release_stale);
}

/* ---- the decision ------------------------------------------------------ */

/* The statements of the hot path are parsed and planned once per
 * connection, not once per batch. */
static const struct {
    const char *name;
    size_t offset;
    int nparams;
} hot_statements[] = {
    { "claim", offsetof(struct sql_statements, claim), 4 },
    { "mark", offsetof(struct sql_statements, mark_sent), 1 },
};
#define N_HOT (int)(sizeof(hot_statements) / sizeof(hot_statements[0]))

static void on_prepared(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        log_error("preparing a statement failed", "statement=%s error=%s",
                  hot_statements[r->prepared].name, log_quote(PQresultErrorMessage(res)));
        session_evidence(r, res, hot_statements[r->prepared].name);
        r->backoff = true;
        return;
    }
    r->prepared++;
    step(r);
}

static void prepare(struct relay *r, int i)
{
    const char *sql = *(char *const *)((const char *)&r->sql + hot_statements[i].offset);
    pg_prepare(&r->pg, hot_statements[i].name, sql, hot_statements[i].nparams, on_prepared, r);
}

/* The relay as plan_next sees it. */
static void snapshot(const struct relay *r, struct plan_state *s)
{
    const struct producer *p = &r->prod;
    *s = (struct plan_state){
        .now_ms = uv_now(r->loop),
        .pg_ready = pg_ready(&r->pg),
        .backoff = r->backoff,
        .session_checked = r->session_checked,
        .schema_checked = r->schema_checked,
        .prepared = r->prepared,
        .n_hot = N_HOT,
        .listening = r->listening,
        .quiet = r->quiet,
        .quiet_wanted = r->quiet_wanted,
        .notifies = r->notifies,
        .quiet_idle = r->quiet_idle,
        .quiet_check_at_ms = r->quiet_check_at_ms,
        .role = r->st.role,
        .lock_due = r->lock_due,
        .holder_due = r->holder_due,
        .ready_sent = r->ready_sent,
        .refused = r->st.refused,
        .refuse_deadline_ms = r->refuse_deadline_ms,
        .stopping = r->stopping,
        .wake = r->wake,
        .halted = r->st.halted,
        .halt_pending = r->halt_pending,
        .queue_full = r->queue_full,
        .isolating = r->isolating,
        .isolate_until_id = r->isolate_until_id,
        .truncations = r->truncations,
        .batch_size = r->cfg->batch_size,
        .retention_due = r->retention_due,
        .backlog_due_ms = r->backlog_due_ms,
        .backlog_took_ms = r->backlog_took_ms,
        .row_security = r->st.row_security,
        .claim_first = r->claim_first,
        .claim_first_until = r->claim_first_until,
        .producer_fatal = producer_fatal(p),
        .txn = producer_txn_state(p),
        .txn_doomed = producer_txn_doomed(p),
        .txn_empty = producer_txn_empty(p),
        .txn_gen = producer_txn_gen(p),
        .lead_unverified = r->lead_unverified,
        .b = r->b,
        .n_batches = N_BATCHES,
    };
}

/* Carries out @p p. @return true when the relay is to be planned again (what
 * was done sent no statement and decided nothing else). */
static bool carry_out(struct relay *r, const struct plan_step *p)
{
    if (p->queue_drained)
        r->queue_full = false;
    switch (p->act) {
    case PLAN_WAIT: break;
    case PLAN_FINISH: finish(r); break;
    case PLAN_CHECK_SESSION: session_check(r); break;
    case PLAN_WIND_DOWN: wind_down(r); break;
    case PLAN_CHECK_SCHEMA: schema_check(r); break;
    case PLAN_PREPARE: prepare(r, p->index); break;
    case PLAN_MARK: mark(r, &r->b[p->slot], p->with); break;
    /* Fails (and backs off) when no new instance can be made. */
    case PLAN_REPLACE_PRODUCER: return replace_producer(r);
    case PLAN_TAKE_LOCK:
        r->lock_due = false;
        lock_query(r, r->ssql.lock, on_lock);
        break;
    case PLAN_VERIFY_LOCK:
        r->lock_due = false;
        lock_query(r, r->ssql.verify, on_verified);
        break;
    case PLAN_ASK_HOLDER:
        r->holder_due = false;
        pg_query(&r->pg, r->ssql.holder, 0, NULL, on_holder, r);
        break;
    case PLAN_READY:
        r->ready_sent = true;
        notify_send("READY=1");
        return true;
    case PLAN_COUNT_BACKLOG:
        r->backlog_due_ms = p->at_ms;
        r->backlog_sent_ms = now_ms(r);
        pg_query(&r->pg, r->sql.backlog, 0, NULL, on_backlog, r);
        break;
    case PLAN_LISTEN: pg_query(&r->pg, r->sql.listen, 0, NULL, on_listen, r); break;
    case PLAN_TAKE_QUIET: pg_query(&r->pg, r->ssql.quiet_on, 0, NULL, on_quiet_on, r); break;
    case PLAN_RELEASE_QUIET: pg_query(&r->pg, r->ssql.quiet_off, 0, NULL, on_quiet_off, r); break;
    case PLAN_CHECK_QUIET:
        pg_query(&r->pg, r->ssql.quiet_check, 0, NULL, on_quiet_check, r);
        break;
    case PLAN_CLAIM: claim(r, p); break;
    case PLAN_RETENTION: retention(r); break;
    }
    return false;
}

/* The one decision point, called after every event: the Kafka transaction's
 * needs first, then at most one statement (the connection runs one at a
 * time), as plan_next decides. */
static void step(struct relay *r)
{
    struct plan_state s;
    if (r->finished)
        return;
    snapshot(r, &s);
    fence_step(r, &s);
    struct plan_step p;
    do {
        snapshot(r, &s); /* after what fence_step, or the step before, changed */
        p = plan_next(&s);
    } while (carry_out(r, &p) && !r->finished);
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
        if (plan_drain_on_lost(any_phase(r, PHASE_PRODUCING)) == DRAIN_FINISH)
            finish(r);
        return;
    }
    if (r->st.refused)
        return; /* for good: a new connection would be refused the same way */
    uint64_t delay = plan_reconnect_delay(r->reconnect_attempt, (uint64_t)r->cfg->reconnect_interval_ms,
                                          (uint64_t)r->cfg->reconnect_max_ms, (uint64_t)rand());
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
    log_info("postgres connected", "server_version=%d", pg_server_version(pg));
    set_role(r, STATS_ROLE_UNKNOWN);
    session_reset(r);
    r->listening = false;
    r->backoff = false;
    r->reconnect_attempt = 0;
    r->prepared = 0;
    r->halt_pending = false; /* its record may be lost: the row is claimed and fails again */
    r->st.pg_up = true;
    quiet_reset(r); /* a new session holds no lock */
    step(r);
}

static void on_pg_lost(struct pg_conn *pg, const char *why, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (r->st.role == STATS_ROLE_LEADER)
        log_warn("postgres connection lost; leadership released", "error=%s", log_quote(why));
    else
        log_warn("postgres connection failed", "error=%s", log_quote(why));
    set_role(r, STATS_ROLE_UNKNOWN);
    r->may_hold_lock = false; /* the server ends the session, and the lock with it */
    r->st.pg_up = false;
    r->listening = false;
    quiet_reset(r);
    notify_status(r);
    schedule_reconnect(r);
}

static void on_pg_notify(struct pg_conn *pg, const char *channel, void *arg)
{
    (void)pg;
    (void)channel;
    struct relay *r = arg;
    r->wake = true;
    if (r->notifies < INT_MAX) /* a standby claims nothing, and counts on */
        r->notifies++;
    step(r);
}

/* ---- timers, signals, shutdown ----------------------------------------- */

static void on_tick(uv_timer_t *t)
{
    struct relay *r = t->data;
    r->backoff = false;
    r->lock_due = true;
    r->wake = true;
    if (plan_retention_due(r->retention_s, now_ms(r), r->last_retention_ms))
        r->retention_due = true;
    producer_poll(&r->prod);
    log_limit_flush(&r->failures, stats_mono());
    step(r);
}

static void on_shutdown_timer(uv_timer_t *t)
{
    struct relay *r = t->data;
    if (plan_drain_on_deadline(r->purged, any_phase(r, PHASE_PRODUCING)) == DRAIN_PURGE) {
        /* Deadline reached: fail what is still in flight so the delivered part
         * can be marked; the failed rows stay unsent for the next run. */
        log_warn("shutdown timeout; abandoning undelivered messages",
                 "in_flight=%d", in_flight(r));
        r->purged = true;
        producer_purge(&r->prod);
        producer_poll(&r->prod);
        uv_timer_start(&r->shutdown, on_shutdown_timer, PLAN_PURGE_GRACE_MS, 0);
        return;
    }
    log_warn("shutdown deadline passed; exiting without writing pending marks", "");
    finish(r);
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct relay *r = s->data;
    bool connected = pg_ready(&r->pg) || pg_busy(&r->pg);
    enum drain_act drain = plan_drain_on_signal(r->stopping, connected, any_phase(r, PHASE_PRODUCING));
    if (r->stopping) {
        log_warn("second signal; exiting now", "signal=%d", signum);
        finish(r);
        return;
    }
    log_info("shutting down", "signal=%d in_flight=%d", signum, in_flight(r));
    notify_send("STOPPING=1");
    r->stopping = r->st.stopping = true;
    uv_timer_stop(&r->tick);
    uv_timer_stop(&r->reconnect);
    uv_timer_start(&r->shutdown, on_shutdown_timer, (uint64_t)r->cfg->shutdown_timeout_ms, 0);
    if (drain == DRAIN_FINISH)
        finish(r);
    else
        step(r);
}

/* SIGHUP: read the file again; apply what is safe to change live, name what
 * is not; a file that does not validate changes nothing. */
static void on_sighup(uv_signal_t *s, int signum)
{
    (void)signum;
    struct relay *r = s->data;
    if (!r->reload) {
        log_warn("SIGHUP ignored: no configuration to reload", "");
        return;
    }
    struct relay_config next;
    char err[1024];
    config_init(&next);
    int rc = r->reload(&next, err, sizeof(err), r->reload_arg);
    stats_reloaded(&r->st, rc >= 0);
    if (rc < 0) {
        log_error("configuration reload rejected; keeping the running configuration",
                  "error=%s", log_quote(err));
    } else {
        int changed = config_reload_apply(r->live, &next);
        log_set_level((enum log_level)r->live->log_level);
        log_info("configuration reloaded", "changed=%d batch_size=%d poll_interval_ms=%d", changed,
                 r->cfg->batch_size, r->cfg->poll_interval_ms);
        uv_timer_set_repeat(&r->tick, (uint64_t)r->cfg->poll_interval_ms);
        uv_timer_again(&r->tick);
    }
    config_free(&next);
}

static void on_watchdog(uv_timer_t *t)
{
    /* The loop turned: that is what the watchdog asks. */
    (void)t;
    notify_send("WATCHDOG=1");
}

static void finish(struct relay *r)
{
    if (r->finished)
        return;
    r->finished = true;
    uv_timer_stop(&r->tick);
    uv_timer_stop(&r->reconnect);
    uv_timer_stop(&r->shutdown);
    uv_timer_stop(&r->watchdog);
    uv_close((uv_handle_t *)&r->tick, NULL);
    uv_close((uv_handle_t *)&r->reconnect, NULL);
    uv_close((uv_handle_t *)&r->shutdown, NULL);
    uv_close((uv_handle_t *)&r->watchdog, NULL);
    uv_close((uv_handle_t *)&r->quiet_timer, NULL);
    uv_close((uv_handle_t *)&r->sigterm, NULL);
    uv_close((uv_handle_t *)&r->sigint, NULL);
    uv_close((uv_handle_t *)&r->sighup, NULL);
    pg_close(&r->pg);
    producer_stop(&r->prod);
    /* the status endpoint answers until here */
    http_stop(r->http);
    r->http = NULL;
    verify_task_stop(r->verify);
    r->verify = NULL;
    progress_stop(r->progress);
    r->progress = NULL;
    log_limit_flush(&r->failures, INFINITY);
    uint64_t failed = 0;
    for (int i = 0; i < STATS_FAIL_NREASONS; i++)
        failed += r->st.failed_total[i];
    log_info("stopped", "published_total=%" PRIu64 " failed_total=%" PRIu64
             " dead_lettered_total=%" PRIu64,
             r->st.published_total, failed, r->st.dead_total);
}

static void relay_free(struct relay *r)
{
    pg_free(&r->pg);
    sql_statements_free(&r->sql);
    sql_session_free(&r->ssql);
    for (int k = 0; k < N_BATCHES; k++) {
        batch_reset(&r->b[k]); /* the claim result a batch may hold */
        batch_free(&r->b[k]);
    }
    for (size_t i = 0; i < sizeof(r->params) / sizeof(r->params[0]); i++)
        strbuf_free(&r->params[i]);
}

/* The timers and signal handlers of the loop. */
static void loop_start(struct relay *r)
{
    uv_timer_init(r->loop, &r->tick);
    uv_timer_init(r->loop, &r->reconnect);
    uv_timer_init(r->loop, &r->shutdown);
    r->tick.data = r->reconnect.data = r->shutdown.data = r;
    uv_signal_init(r->loop, &r->sigterm);
    uv_signal_init(r->loop, &r->sigint);
    r->sigterm.data = r->sigint.data = r;
    uv_signal_start(&r->sigterm, on_signal, SIGTERM);
    uv_signal_start(&r->sigint, on_signal, SIGINT);
    uv_signal_init(r->loop, &r->sighup);
    r->sighup.data = r;
    uv_signal_start(&r->sighup, on_sighup, SIGHUP);
    uv_timer_init(r->loop, &r->watchdog);
    uv_timer_init(r->loop, &r->quiet_timer);
    r->quiet_timer.data = r;
    uint64_t wd_usec = notify_watchdog_usec();
    if (wd_usec > 0) /* twice per interval, as sd_watchdog_enabled(3) advises */
        uv_timer_start(&r->watchdog, on_watchdog, wd_usec / 2000, wd_usec / 2000);
    uv_timer_start(&r->tick, on_tick, (uint64_t)r->cfg->poll_interval_ms,
                   (uint64_t)r->cfg->poll_interval_ms);
    /* First retention pass a minute after start, not during the catch-up. */
    r->last_retention_ms = uv_now(r->loop);
}

int relay_run(struct relay_config *cfg, relay_reload_fn reload, void *reload_arg)
{
    struct relay r;
    memset(&r, 0, sizeof(r));
    r.cfg = r.live = cfg;
    r.reload = reload;
    r.reload_arg = reload_arg;
    r.loop = uv_default_loop();
    stats_init(&r.st);
    log_limit_init(&r.failures, LOG_LIMIT_INTERVAL_S, LOG_LIMIT_BURST);
    r.poison = poison_rules_of(poison_policy_parse(cfg->on_poison));
    r.retention_s = strcmp(cfg->on_sent, "delete") == 0 ? 0 : config_parse_duration(cfg->retention);
    srand((unsigned)uv_hrtime() ^ (unsigned)getpid());

    unsigned flags = (r.poison->hold_claim ? SQL_HOLD_AGGREGATE : 0) |
                     (strcmp(cfg->on_sent, "delete") == 0 ? SQL_DELETE_SENT : 0);
    if (sql_statements_init(&r.sql, cfg->schema, cfg->table, cfg->notify_channel, flags) < 0) {
        log_error("cannot build SQL statements", "schema=%s table=%s", cfg->schema, cfg->table);
        return EXIT_CONFIG;
    }
    if (sql_session_init(&r.ssql, cfg->schema, cfg->table) < 0) {
        log_error("cannot build SQL statements", "schema=%s table=%s", cfg->schema, cfg->table);
        relay_free(&r);
        return EXIT_CONFIG;
    }
    for (int k = 0; k < N_BATCHES; k++) {
        r.b[k].slot = k;
        if (batch_reserve(&r.b[k], cfg->batch_size) < 0) {
            log_error("out of memory", "batch_size=%d", cfg->batch_size);
            relay_free(&r);
            return EXIT_SOFTWARE;
        }
    }

    char err[512];
    if (producer_start(&r.prod, r.loop, cfg, on_report, &r, &r.st, err, sizeof(err)) < 0) {
        log_error("kafka producer rejected the configuration", "error=%s", log_quote(err));
        relay_free(&r);
        return EXIT_CONFIG;
    }

    /* ---- the status endpoint; an address we cannot listen on is a
     * configuration error, like any other rejected key. */
    if (http_start(&r.http, r.loop, cfg, &r.st, err, sizeof(err)) < 0) {
        log_error("cannot start the status endpoint", "error=%s", log_quote(err));
        producer_stop(&r.prod);
        uv_run(r.loop, UV_RUN_DEFAULT); /* lets the closed handles finish */
        relay_free(&r);
        return EXIT_CONFIG;
    }
    /* ---- end of the status endpoint */
    if (verify_task_start(&r.verify, r.loop, cfg, &r.st) < 0)
        log_error("out of memory starting the periodic verify; running without it", "");
    if (progress_start(&r.progress, r.loop, cfg, &r.st) < 0)
        log_error("out of memory starting the progress reports; running without them", "");

    struct pg_callbacks cb = {
        .on_connected = on_pg_connected,
        .on_lost = on_pg_lost,
        .on_notify = on_pg_notify,
        .arg = &r,
    };
    pg_init(&r.pg, r.loop, cfg->pg_conninfo, &cb);
    loop_start(&r);

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
