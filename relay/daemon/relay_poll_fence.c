/* relay_poll_fence.c — relay.fencing = transactional, polling's part: what
 * a Kafka transaction's end, and plan_fence's answer, do to the batches in
 * flight (relay_fence.c initialises and commits the transaction). */
#include "daemon/relay_poll_int.h"

/* Held rows whose predecessor aborted would overtake its rows: they are
 * released unproduced and claimed again. */
static void txn_drop_held(struct relay *r)
{
    for (int k = 0; k < N_BATCHES; k++) {
        if (!r->poll->b[k].held)
            continue;
        relay_batch_reset(&r->poll->b[k]);
        r->poll->wake = true;
    }
}

/* Produces held batch @p k into the open, empty transaction; a stale one
 * (a batch was cut after its claim skipped that batch's whole range) is
 * dropped and claimed again. Dropping it is a cut too: a claim held behind
 * it skipped its rows and would overtake them. */
static void txn_release(struct relay *r, int k, bool stale)
{
    struct batch *b = &r->poll->b[k];
    if (stale) {
        relay_batch_reset(b);
        r->poll->truncations++;
        r->poll->wake = true;
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
    r->poll->truncations++;
    r->poll->wake = true;
}

/* plan_fence's answer for the batches: settled as aborted, held ones dropped,
 * empty ones settled, the oldest held one released into the transaction. */
void relay_poll_txn_settle(struct relay *r, const struct fence_plan *f)
{
    struct batch *b = r->poll->b;
    for (int k = 0; k < N_BATCHES; k++)
        if (f->unpublish & (1u << k))
            txn_unpublish(r, &b[k]);
    if (f->drop_held)
        txn_drop_held(r);
    for (int k = 0; k < N_BATCHES; k++)
        if (f->settle_empty & (1u << k))
            b[k].committed = true;
    if (f->release >= 0)
        txn_release(r, f->release, f->release_stale);
}

void relay_poll_txn_ended(struct relay *r, unsigned gen, enum producer_txn_result res)
{
    if (batch_txn_ended(r->poll->b, N_BATCHES, gen, res))
        txn_drop_held(r);
}
