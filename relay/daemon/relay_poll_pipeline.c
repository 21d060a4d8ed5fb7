/* relay_poll_pipeline.c — relay.capture = poll: a row's way through the relay, top
 * to bottom: the claim, producing its rows, their delivery reports,
 * recording failures, the conditional mark, then retention of sent rows. */
#include "daemon/relay_poll_int.h"

/* ---- batch ------------------------------------------------------------- */

/* A batch's owner: the batches are an array inside struct poll_capture. */
static struct relay *relay_of(struct batch *b)
{
    return ((struct poll_capture *)((char *)(b - b->slot) - offsetof(struct poll_capture, b)))->relay;
}

int relay_in_flight(const struct relay *r)
{
    return batch_outstanding(r->poll->b, N_BATCHES);
}

bool relay_any_phase(const struct relay *r, enum phase ph)
{
    return batch_any_in(r->poll->b, N_BATCHES, ph);
}

/* Empties @p b, releasing a claim result it held. */
void relay_batch_reset(struct batch *b)
{
    if (b->held)
        PQclear(b->held);
    batch_clear(b);
}

void relay_row_failed(struct relay *r, struct batch *b, int i, enum stats_fail_reason kind,
                       enum attempt_limit limit, const char *why)
{
    if (batch_row_failed(b, i, limit, why))
        r->st.failed_total[kind]++;
}

/* The batch is complete (marks and failure records written): account for it. */
static void batch_done(struct relay *r, struct batch *b)
{
    double now = stats_now();
    double took = (double)(relay_now_ms(r) - b->start_ms) / 1000.0;
    r->st.batches_total++;
    stats_observe(&r->st.batch_duration, took);
    r->st.last_batch_rows = b->n_rows;
    r->st.last_batch_duration = took;
    r->st.last_batch_time = now;
    if (b->rescan_after_mark)
        r->poll->wake = true; /* rows inside this batch's id range were skipped by the other claim */
    relay_batch_reset(b);
}

void relay_poll_on_report(struct relay *r, void *opaque, rd_kafka_resp_err_t err)
{
    intptr_t v = (intptr_t)opaque;
    int k = (int)(v >> OPAQUE_ROW_BITS), i = (int)(v & ((1 << OPAQUE_ROW_BITS) - 1));
    struct batch *b = k >= 0 && k < N_BATCHES ? &r->poll->b[k] : NULL;
    if (!b || b->phase != PHASE_PRODUCING || i >= b->n_rows) {
        log_error("delivery report for no row in flight", "batch=%d index=%d", k, i);
        return;
    }
    bool last;
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        last = batch_reported(b, i, NULL, NULL);
        relay_topic_granted(r);
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
        if (verdict.denied) {
            /* Once per batch, not per row: the batch's other rows follow alike. */
            if (r->producer_retry_at_ms <= relay_now_ms(r))
                relay_topic_denied(r, err);
        } else if (verdict.suspect) {
            r->poll->isolating = true;
            r->poll->wake = true;
            if (b->ids[i] > r->poll->isolate_until_id)
                r->poll->isolate_until_id = b->ids[i];
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
                  b->n_delivered, relay_now_ms(r) - b->start_ms);
        /* One line per batch, and a broker that refuses every batch fails
         * one after another: limited like the per-row lines. */
        if (b->n_suspects > 0 &&
            log_limit_allow(&r->failures, stats_mono(), LOG_LVL_WARN,
                            "delivery failed; retrying the rows one at a time before any is charged",
                            rd_kafka_err2name(b->suspect_err), b->span.lo))
            log_warn("delivery failed; retrying the rows one at a time before any is charged",
                     "rows=%d error=%s first_outbox_id=%" PRId64 " retry_up_to_outbox_id=%" PRId64,
                     b->n_suspects, rd_kafka_err2name(b->suspect_err), b->span.lo, r->poll->isolate_until_id);
        r->poll->queue_full = false; /* this batch's messages left the queue */
        relay_step(r);
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
    r->poll->queue_full = queue_full;
    r->poll->truncations++;
    r->poll->wake = true;
}

/* Row @p i can never be produced as it is: charged (one attempt exhausts
 * it), and under a policy that holds, later rows of its aggregate wait. */
static void row_refused(struct relay *r, struct batch *b, PGresult *res, int i,
                        const struct event_row *row, const char *err)
{
    relay_row_failed(r, b, i, STATS_FAIL_INVALID, LIMIT_ONE, err);
    if (r->poison->halts)
        r->poll->halt_pending = true;
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
void relay_produce_rows(struct relay *r, struct batch *b, PGresult *res)
{
    int n = PQntuples(res);
    char topic[256];
    char err[512];
    bool holding = r->poison->hold_in_flight;
    bool any_held = false;
    for (int k = 0; k < N_BATCHES && holding; k++)
        for (int j = 0; j < r->poll->b[k].n_rows && !any_held; j++)
            any_held = r->poll->b[k].agg[j] != NULL;

    for (int i = 0; i < n; i++) {
        if (r->st.halted)
            break; /* the rest stays ROW_SKIPPED: claimed again after a restart */
        if (any_held) {
            char *key = agg_key(res, i);
            if (key && batch_holds(r->poll->b, N_BATCHES, key)) {
                b->agg[i] = key; /* held too: later rows of it wait as well */
                continue;
            }
            free(key);
        }

        struct event_row row;
        pg_claim_row(res, i, &row);
        pg_claim_placed(res, i, CLAIM_NCOLS, &row);
        int rc = relay_row_topic(r, &row, topic, sizeof(topic), err, sizeof(err));
        if (rc == 0) {
            b->state[i] = ROW_PENDING;
            err[0] = '\0';
            void *opaque = (void *)(((intptr_t)b->slot << OPAQUE_ROW_BITS) | i);
            rc = producer_send(&r->prod, &row, topic, opaque, err, sizeof(err));
        }
        enum send_verdict v = rc == 0 ? SEND_QUEUED : engine_send_verdict(rc, relay_in_flight(r) == 0);
        if (v == SEND_CUT || v == SEND_DENIED) {
            b->state[i] = ROW_SKIPPED;
            if (v == SEND_DENIED)
                relay_topic_denied(r, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
            else /* refused connections were named: each attempt's batch is their echo */
                log_write(kafka_denial_at_connect(r->st.kafka_denial) ? LOG_LVL_DEBUG : LOG_LVL_WARN,
                          "producer cannot take more now", "rows_queued=%d reason=%s", i,
                          log_quote(err));
            batch_cut(r, b, i, rc == -ENOBUFS);
            break;
        }
        if (v == SEND_TOO_LARGE)
            snprintf(err + strlen(err), sizeof(err) - strlen(err), ENGINE_TOO_LARGE_WHY);
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

/* The claim's rows are the lowest unsent ones it could see but those it
 * skipped (the batches in flight, by their ids and the range it was given)
 * and those held behind a dead row (`outbox-relay dead` gives them a new
 * transaction id when it ends the hold): its snapshot and the lowest of
 * those ids are the next claim's floor (sql_floor.h). */
static void floor_advance(struct relay *r, const struct batch *b, PGresult *res)
{
    int64_t lowest = pg_claim_id(res, 0);
    if (b->skipped_lo < lowest)
        lowest = b->skipped_lo;
    for (int k = 0; k < N_BATCHES; k++) {
        const struct batch *o = &r->poll->b[k];
        if (o != b && o->phase != PHASE_EMPTY && o->n_rows > 0 && o->ids[0] < lowest)
            lowest = o->ids[0];
    }
    struct sql_floor_snap snap;
    if (sql_floor_parse(PQgetvalue(res, 0, CLAIM_SNAPSHOT), &snap) < 0)
        return; /* the older floor stays true */
    r->poll->floor_snap = snap;
    r->poll->floor_id = lowest;
    r->poll->has_floor = true;
}

void relay_floor_params(const struct relay *r, char id[24], const char *out[4])
{
    snprintf(id, 24, "%" PRId64, r->poll->floor_id);
    out[0] = r->poll->has_floor ? id : NULL;
    out[1] = r->poll->has_floor ? r->poll->floor_snap.xmax : NULL;
    out[2] = r->poll->has_floor ? r->poll->floor_snap.xip : NULL;
    out[3] = r->poll->has_floor ? r->poll->floor_snap.xmin : NULL;
}

static void on_claimed(struct pg_conn *pg, PGresult *res, void *arg)
{
    struct batch *b = arg;
    struct relay *r = relay_of(b);
    if (!res) {
        if (batch_lost(b))
            relay_batch_reset(b);
        return;
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        log_error("claim failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        relay_session_evidence(r, res, "claim");
        relay_batch_reset(b);
        r->backoff = true;
        return;
    }
    int n = PQntuples(res);
    if (n == 0)
        r->poll->claim_first = false; /* nothing waits: the backlog count may run */
    log_debug("claimed", "batch=%d rows=%d ms=%" PRIu64, b->slot, n, relay_now_ms(r) - b->start_ms);
    struct plan_state s;
    relay_snapshot(r, &s);
    struct claim_verdict v = plan_claimed(&s, b, n, n ? pg_claim_id(res, 0) : 0);
    if (v.isolation_over) {
        r->poll->isolating = false;
        r->poll->isolate_until_id = 0;
    }
    b->alone = v.alone;
    r->quiet_wanted |= v.quiet_wanted;
    r->quiet_idle = v.quiet_idle;
    if (v.use != CLAIM_PRODUCE) {
        relay_batch_reset(b); /* rows claimed but not produced stay unsent */
        r->poll->wake |= v.use == CLAIM_STALE;
        relay_step(r);
        return;
    }
    r->poll->claim_full = n >= r->cfg->batch_size;
    if (r->poll->floor_mode && n > 0)
        floor_advance(r, b, res);
    if (v.more)
        r->poll->wake = true;
    /* Send PostgreSQL its next statement (the next claim, or a mark) before
     * producing this batch, so the database works while we do. */
    batch_load(b, res);
    b->phase = PHASE_PRODUCING;
    if (!plan_txn_holds(&s, b)) {
        b->txn_gen = producer_txn_gen(&r->prod);
        relay_step(r);
        /* That step may have begun ending the transaction these rows were to
         * join: then they wait for the next one, as if held from the start. */
        relay_snapshot(r, &s);
        if (b->phase != PHASE_PRODUCING || !plan_txn_holds(&s, b)) {
            relay_produce_rows(r, b, res);
            relay_step(r);
            return;
        }
    }
    b->held = res; /* produced when the open transaction is done (fence_step) */
    pg_result_keep(pg);
    relay_step(r);
}

/* Claims as @p p says: into its slot, skipping the id range of the other
 * batches in flight (plan_next chose both). */
void relay_claim(struct relay *r, const struct plan_step *p)
{
    struct batch *b = &r->poll->b[p->slot];
    if (batch_reserve(b, r->cfg->batch_size) < 0) {
        log_error("out of memory sizing the batch", "batch_size=%d", r->cfg->batch_size);
        r->backoff = true;
        return;
    }
    for (int k = 0; k < N_BATCHES; k++)
        if (p->rescan & (1u << k))
            r->poll->b[k].rescan_after_mark = true;
    char limit[16], los[24], his[24];
    int64_t gaps[BATCH_GAPS_MAX];
    b->alone = p->alone;
    b->claim_gen = r->poll->truncations;
    snprintf(limit, sizeof(limit), "%d", p->limit);
    snprintf(los, sizeof(los), "%" PRId64, p->skip.lo);
    snprintf(his, sizeof(his), "%" PRId64, p->skip.hi);
    int n_gaps = batch_gaps_within(r->poll->b, N_BATCHES, p->rescan, p->skip, gaps, BATCH_GAPS_MAX);
    struct strbuf *in_gaps = &r->poll->params[0]; /* free: no mark or record is being built */
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
    b->skipped_lo = p->skip.lo <= p->skip.hi ? p->skip.lo : INT64_MAX;
    char floor_id[24];
    const char *floor[4];
    relay_floor_params(r, floor_id, floor);
    const char *params[] = { limit, los, his, n_gaps < 0 ? NULL : strbuf_str(in_gaps),
                             floor[0], floor[1], floor[2] };
    r->poll->wake = false;
    r->notifies = 0;
    b->phase = PHASE_CLAIMING;
    b->start_ms = relay_now_ms(r);
    b->claim_seq = r->poll->claims_sent++;
    if (pg_query_prepared_binary(&r->pg, "claim", r->sql.claim_nparams, params, on_claimed, b) < 0)
        relay_batch_reset(b);
}

static void on_recorded(struct pg_conn *pg, PGresult *res, void *arg);
static void record_failure_from(struct relay *r, struct batch *b, int from);

/* Rows whose failure counts as an attempt (ROW_FAILED with a reason). */
/* The record statement's parameters are three array literals, built row by
 * row: begin, add each row (the @p n-th so far), send. */
static void failures_begin(struct relay *r)
{
    for (int k = 0; k < 3; k++)
        strbuf_reset(&r->poll->params[k]);
}

static void failures_add(struct relay *r, const struct batch *b, int i, int n)
{
    struct strbuf *ids = &r->poll->params[0], *errs = &r->poll->params[1], *max = &r->poll->params[2];
    strbuf_printf(ids, "%s%" PRId64, n ? "," : "{", b->ids[i]);
    strbuf_printf(errs, "%s", n ? "," : "{");
    strbuf_array_elem(errs, b->reason[i]);
    strbuf_printf(max, "%s%d", n ? "," : "{", b->limit[i] == LIMIT_ONE ? 1 : r->cfg->max_attempts);
}

static void failures_send(struct relay *r, struct batch *b, int n)
{
    struct strbuf *ids = &r->poll->params[0], *errs = &r->poll->params[1], *max = &r->poll->params[2];
    strbuf_printf(ids, "}");
    strbuf_printf(errs, "}");
    strbuf_printf(max, "}");
    if (ids->oom || errs->oom || max->oom) {
        log_error("out of memory recording failures", "rows=%d", n);
        relay_batch_reset(b);
        r->backoff = true;
        return;
    }
    const char *params[] = { strbuf_str(ids), strbuf_str(errs), strbuf_str(max),
                             r->poison->dead_letters ? "t" : "f" };
    b->phase = PHASE_RECORDING;
    if (pg_query(&r->pg, r->sql.record_failures, 4, params, on_recorded, b) < 0)
        relay_batch_reset(b);
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
            relay_batch_reset(b);
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
            relay_batch_reset(b);
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
    relay_step(r);
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
        log_write(kafka_denial_at_connect(r->st.kafka_denial) ? LOG_LVL_DEBUG : LOG_LVL_WARN,
                  "no row of the batch reached Kafka; retrying without counting attempts",
                  "failed=%d", batch_failures_uncharged(b));
        relay_batch_reset(b);
        /* A producer given up on a broker that stopped answering is replaced
         * at once: nothing is down that a back-off would wait out. */
        if (!producer_abandoned(&r->prod))
            r->backoff = true;
        break;
    case BATCH_DONE:
        batch_done(r, b);
        break;
    }
    relay_step(r);
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
    relay_step(r);
}

/* Every batch whose marks the statement just ended was writing. */
static unsigned marking_slots(const struct relay *r)
{
    unsigned slots = 0;
    for (int k = 0; k < N_BATCHES; k++)
        if (r->poll->b[k].phase == PHASE_MARKING)
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
            if ((slots & (1u << k)) && batch_lost(&r->poll->b[k]))
                relay_batch_reset(&r->poll->b[k]);
        return;
    }
    for (int k = 0; k < N_BATCHES; k++)
        if (slots & (1u << k))
            r->poll->b[k].phase = PHASE_DELIVERED;
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        log_error("marking rows sent failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        relay_session_evidence(r, res, "mark");
        r->backoff = true;
        return;
    }
    r->poll->claim_first = false; /* a new leader's first batch is through: count the backlog */
    int rows = 0;
    for (int k = 0; k < N_BATCHES; k++) {
        if (!(slots & (1u << k)))
            continue;
        r->poll->b[k].marked = true;
        rows += r->poll->b[k].n_delivered;
    }
    log_debug("batch marked sent", "batch=%d batches=%d rows=%d marked=%s ms=%" PRIu64, b->slot,
              __builtin_popcount(slots), rows, PQcmdTuples(res), relay_now_ms(r) - b->start_ms);
    /* The others are DELIVERED and marked: the plan hands them to mark(),
     * which goes straight on to their failures. */
    record_failures(r, b);
}

/* Marks the delivered rows of @p b, and in the same statement those of the
 * slots in @p with (bit k): one round trip and one commit instead of one
 * each, when a Kafka transaction settled several batches at once. */
void relay_mark(struct relay *r, struct batch *b, unsigned with)
{
    if (!batch_marks_due(b)) {
        record_failures(r, b);
        return;
    }
    struct strbuf *ids = &r->poll->params[0];
    int n = 0;
    strbuf_reset(ids);
    strbuf_printf(ids, "{");
    with = (with | (1u << b->slot));
    for (int k = 0; k < N_BATCHES; k++) {
        struct batch *x = &r->poll->b[k];
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
            if (r->poll->b[k].phase == PHASE_MARKING)
                r->poll->b[k].phase = PHASE_DELIVERED;
        r->backoff = true;
        return;
    }
    const char *params[] = { strbuf_str(ids) };
    /* Refused for a pooled session: the prepared mark may be gone, the text is not. */
    int rc = r->st.refused ? pg_query(&r->pg, r->sql.mark_sent, 1, params, on_marked, b)
                           : pg_query_prepared(&r->pg, "mark", 1, params, on_marked, b);
    if (rc < 0)
        for (int k = 0; k < N_BATCHES; k++)
            if (r->poll->b[k].phase == PHASE_MARKING)
                r->poll->b[k].phase = PHASE_DELIVERED;
}

/* ---- retention --------------------------------------------------------- */

/* Sent rows older than relay.retention. */
void relay_retention(struct relay *r)
{
    char secs[24];
    snprintf(secs, sizeof(secs), "%ld", r->retention_s);
    relay_retention_delete(r, r->sql.retention, secs);
}
