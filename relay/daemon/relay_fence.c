/* relay_fence.c — relay.fencing = transactional: the rows in flight as one
 * Kafka transaction, its commit or abort and what follows for the batches;
 * and a fatal producer replaced. */
#include "daemon/relay_int.h"

/* ---- producer ---------------------------------------------------------- */

/* A right Kafka refuses (core/kafka_rules.c) stays refused until someone
 * changes an ACL or the credentials: it is named once, when it starts or
 * changes, and the next producer waits out a back-off (plan_denied_delay),
 * so that a principal without its ACLs costs a few lines a minute, not
 * dozens of replacements a second. @return whether the relay is denied. */
static bool note_denial(struct relay *r, int code)
{
    enum kafka_denial d = kafka_denial_of(code);
    /* The broker answered the last producer: a refusal now is a new one. */
    if (r->st.kafka_answered || d == KAFKA_DENIAL_NONE)
        r->denied_attempt = 0;
    if (d == KAFKA_DENIAL_NONE) {
        r->st.kafka_denial = 0;
        r->producer_retry_at_ms = 0;
        return false;
    }
    uint64_t delay = plan_denied_delay(r->denied_attempt, (uint64_t)rand());
    if (r->denied_attempt == 0 || r->st.kafka_denial != (int)d)
        log_error("kafka refuses the relay's principal a right; retrying with a back-off until "
                  "an ACL or the credentials change",
                  "denied=%s needs=%s error=%s transactional_id=%s retry_in_ms=%" PRIu64,
                  kafka_denial_name(d), log_quote(kafka_denial_need(d)),
                  rd_kafka_err2name((rd_kafka_resp_err_t)code), r->prod.txn_id, delay);
    else
        log_debug("kafka still refuses the relay's principal a right", "denied=%s attempt=%u "
                  "retry_in_ms=%" PRIu64, kafka_denial_name(d), r->denied_attempt, delay);
    r->st.kafka_denial = (int)d;
    snprintf(r->st.kafka_denial_error, sizeof r->st.kafka_denial_error, "%s",
             rd_kafka_err2name((rd_kafka_resp_err_t)code));
    r->denied_attempt++;
    r->producer_retry_at_ms = relay_now_ms(r) + delay;
    return true;
}

/* A fatal error (e.g. the idempotent producer's epoch cannot be bumped)
 * leaves the instance unusable: its messages failed with __FATAL and stay
 * unsent; a new instance republishes them. @return true when usable again. */
bool relay_replace_producer(struct relay *r)
{
    char err[512];
    if (!note_denial(r, producer_fatal_code(&r->prod)))
        log_warn("replacing the kafka producer after a fatal error", "");
    producer_stop(&r->prod);
    if (producer_start(&r->prod, r->loop, r->cfg, relay_on_report, r, &r->st, err, sizeof(err)) < 0) {
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
        relay_batch_reset(&r->b[k]);
        r->wake = true;
    }
}

/* Produces held batch @p k into the open, empty transaction; a stale one
 * (a batch was cut after its claim skipped that batch's whole range) is
 * dropped and claimed again. Dropping it is a cut too: a claim held behind
 * it skipped its rows and would overtake them. */
static void txn_release(struct relay *r, int k, bool stale)
{
    struct batch *b = &r->b[k];
    if (stale) {
        relay_batch_reset(b);
        r->truncations++;
        r->wake = true;
        return;
    }
    PGresult *res = b->held;
    b->held = NULL;
    b->txn_gen = producer_txn_gen(&r->prod);
    relay_produce_rows(r, b, res);
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
        relay_row_failed(r, b, i, STATS_FAIL_RETRIABLE, LIMIT_NONE, NULL);
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
    uint64_t ms = relay_now_ms(r) - r->txn_start_ms;
    switch (res) {
    case PRODUCER_TXN_DONE:
        if (gen == 0 && r->st.kafka_denial)
            log_info("kafka grants the relay's principal its rights again",
                     "was_denied=%s", kafka_denial_name(r->st.kafka_denial));
        if (gen == 0) {
            r->st.kafka_denial = 0;
            r->denied_attempt = 0;
            log_info("kafka transactions initialised; older leaders are fenced",
                     "transactional_id=%s ms=%" PRIu64, r->prod.txn_id, ms);
        }
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
        /* A refused right is named once, by relay_replace_producer. */
        if (kafka_denial_of(producer_fatal_code(&r->prod)) != KAFKA_DENIAL_NONE)
            log_debug("kafka producer refused a right", "error=%s", log_quote(why));
        else
            log_error("kafka producer fenced or failed: nothing of its open transaction is "
                      "visible or marked; leadership is checked again before producing",
                      "transactional_id=%s error=%s", r->prod.txn_id, log_quote(why));
        break;
    }
    relay_step(r);
}

/* Carries out what plan_fence decided, in its order: settles, initialises,
 * commits, releases; needs no PostgreSQL. */
void relay_fence_step(struct relay *r, const struct plan_state *s)
{
    struct producer *p = &r->prod;
    struct fence_plan f = plan_fence(s);
    for (int k = 0; k < N_BATCHES; k++)
        if (f.unpublish & (1u << k))
            txn_unpublish(r, &r->b[k]);
    if (f.init && producer_txn_init(p, on_txn_ended, r) == 0)
        r->txn_start_ms = relay_now_ms(r);
    if (f.drop_held)
        txn_drop_held(r);
    for (int k = 0; k < N_BATCHES; k++)
        if (f.settle_empty & (1u << k))
            r->b[k].committed = true;
    if (f.commit && producer_txn_commit(p, on_txn_ended, r) == 0)
        r->txn_start_ms = relay_now_ms(r);
    if (f.release >= 0)
        txn_release(r, f.release, f.release_stale);
}
