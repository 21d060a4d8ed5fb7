/* relay_fence.c — relay.fencing = transactional: the rows in flight as one
 * Kafka transaction, its commit or abort and what follows for the batches;
 * and a fatal producer replaced. What becomes of the batches is the capture
 * mode's (txn_settle, txn_ended: relay_poll_fence.c; with wal, whose stream
 * commits its own transactions, nothing). */
#include "daemon/relay_int.h"

/* ---- producer ---------------------------------------------------------- */

/* A fatal error (e.g. the idempotent producer's epoch cannot be bumped)
 * leaves the instance unusable: its messages failed with __FATAL and stay
 * unsent; a new instance republishes them. @return true when usable again. */
bool relay_replace_producer(struct relay *r)
{
    char err[512];
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

static void on_txn_ended(void *arg, unsigned gen, enum producer_txn_result res, const char *why)
{
    struct relay *r = arg;
    r->ops->txn_ended(r, gen, res);
    uint64_t ms = relay_now_ms(r) - r->txn_start_ms;
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
    relay_step(r);
}

/* Carries out what plan_fence decided: the batches settled (and a held one
 * released) by the capture mode, then the transaction initialised or
 * committed; needs no PostgreSQL. plan_fence never answers init with any
 * of the batches' parts, nor a release with a commit, so this is its order. */
void relay_fence_step(struct relay *r, const struct plan_state *s)
{
    struct producer *p = &r->prod;
    struct fence_plan f = plan_fence(s);
    r->ops->txn_settle(r, &f);
    if (f.init && producer_txn_init(p, on_txn_ended, r) == 0)
        r->txn_start_ms = relay_now_ms(r);
    if (f.commit && producer_txn_commit(p, on_txn_ended, r) == 0)
        r->txn_start_ms = relay_now_ms(r);
}
