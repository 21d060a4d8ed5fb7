/* test_plan_faults.c — the engine's next step (plan.c) when things fail or
 * end: a fatal producer, a lost connection, shutdown, every row ending once,
 * the Kafka transaction and the reconnect back-off. The priorities, two
 * batches in flight and the poison policies: test_plan.c. */
#include "plan_fixture.h"

/* ---- a fatal producer ----------------------------------------------------- */

/* Kafka refused the producer a right (a missing ACL): it is replaced only
 * once its back-off has passed, not at once and again dozens of times a
 * second; the relay waits meanwhile. */
Test(plan, a_denied_producer_is_replaced_after_its_back_off)
{
    struct plan_state s = leader();
    s.producer_fatal = true;
    s.txn = PRODUCER_TXN_DEAD;
    s.now_ms = 10000;
    s.producer_retry_at_ms = 12000;
    assert_act(&s, PLAN_WAIT);
    s.now_ms = 11999;
    assert_act(&s, PLAN_WAIT);
    s.now_ms = 12000;
    assert_act(&s, PLAN_REPLACE_PRODUCER);
}

/* The brokers refuse the producer's connections (credentials, TLS): kept for
 * its back-off, librdkafka would connect again every second, so it is
 * stopped at once, with rows in flight too (the stop fails them: nothing of
 * them reached a broker), once no transaction call runs on it; the next one
 * starts when the back-off has passed and the batches are done, and
 * initialises no transaction (a call that holds the instance for seconds)
 * before a broker is up. */
Test(plan, a_refused_producer_is_stopped_at_once_and_started_after_its_back_off)
{
    struct plan_state s = leader();
    s.wake = true;
    s.producer_fatal = s.producer_refused = true;
    s.txn = PRODUCER_TXN_BUSY;
    s.now_ms = 10000;
    s.producer_retry_at_ms = 9000; /* the last attempt's */
    assert_act(&s, PLAN_WAIT);
    s.txn = PRODUCER_TXN_DEAD;
    assert_act(&s, PLAN_STOP_PRODUCER);
    s.producer_retry_at_ms = 14000; /* a later refusal stops it too, at once */
    struct batch *b = load(0, 1, 4, PHASE_PRODUCING);
    producing(b);
    assert_act(&s, PLAN_STOP_PRODUCER);
    s.producer_down = true;
    assert_act(&s, PLAN_WAIT); /* no claim while none runs */
    s.now_ms = 14000;
    assert_act(&s, PLAN_WAIT); /* its batch first */
    batch_clear(b);
    s.now_ms = 13999;
    assert_act(&s, PLAN_WAIT);
    s.now_ms = 14000;
    assert_act(&s, PLAN_REPLACE_PRODUCER);

    s.producer_fatal = s.producer_refused = s.producer_down = false;
    s.txn = PRODUCER_TXN_UNINIT;
    s.connect_refused = true;
    cr_assert(!plan_fence(&s).init, "no transaction before a broker is up");
    s.connect_refused = false;
    cr_assert(plan_fence(&s).init);
}

/* Doubling from PLAN_DENIED_FIRST_MS, capped near a minute, jittered in the
 * upper half: at most a handful of attempts (and lines) a minute. */
Test(plan, the_denied_back_off_doubles_to_about_a_minute)
{
    cr_assert_geq(plan_denied_delay(0, 0), PLAN_DENIED_FIRST_MS / 2);
    cr_assert_leq(plan_denied_delay(0, UINT64_MAX), PLAN_DENIED_FIRST_MS);
    uint64_t prev = 0, total = 0;
    unsigned attempts = 0;
    for (unsigned a = 0; a < 40; a++) {
        uint64_t lo = plan_denied_delay(a, 0), hi = plan_denied_delay(a, UINT64_MAX - 1);
        cr_assert_geq(lo, prev / 2, "attempt %u", a);
        cr_assert_leq(hi, PLAN_DENIED_MAX_MS, "attempt %u", a);
        prev = lo;
        if (total < 10 * 60000) {
            total += lo; /* the shortest waits: the most attempts */
            attempts++;
        }
    }
    cr_assert_geq(plan_denied_delay(30, 0), PLAN_DENIED_MAX_MS / 2);
    /* ten minutes: the doubling's first steps, then at most two a minute */
    cr_assert_leq(attempts, 7 + 10 * 2, "%u attempts in ten minutes", attempts);
}


/* The producer's fatal error fails its messages with __FATAL: nobody's
 * fault, no row charged, nothing recorded; once no batch is in flight and
 * no transaction call runs, the producer is replaced, then the relay goes on. */
Test(plan, a_fatal_producer_charges_no_row_and_is_replaced)
{
    struct plan_state s = leader();
    s.wake = true;
    s.producer_fatal = true;
    struct batch *b = load(0, 1, 4, PHASE_PRODUCING);
    producing(b);
    assert_act(&s, PLAN_WAIT);
    batch_reported(b, 0, NULL, NULL);
    for (int i = 1; i < 4; i++) {
        enum kafka_fault f = kafka_fault_of(i == 1 ? RD_KAFKA_RESP_ERR__FATAL
                                                   : RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, true);
        struct failure_verdict v = engine_judge_failure(f, false);
        cr_assert(!v.charged && !v.suspect && !v.counted, "row %d", i);
        batch_reported(b, i, &v, rd_kafka_err2name(RD_KAFKA_RESP_ERR__FATAL));
    }
    cr_assert_eq(b->phase, PHASE_DELIVERED);
    cr_assert_eq(plan_next(&s).act, PLAN_MARK, "what was delivered is marked first");
    cr_assert_eq(batch_failures_to_record(b), 0, "no row charged");
    for (int i = 1; i < 4; i++)
        cr_assert_eq(batch_row_end(b, i), ROW_END_CLAIMABLE);
    b->marked = true;
    cr_assert_eq(batch_after_marks(b), BATCH_DONE);
    batch_clear(b);
    s.txn = PRODUCER_TXN_BUSY;
    assert_act(&s, PLAN_WAIT);
    s.txn = PRODUCER_TXN_OFF;
    assert_act(&s, PLAN_REPLACE_PRODUCER);
    s.producer_fatal = false;
    assert_act(&s, PLAN_CLAIM);

    /* Transactional: the new instance fences only once the lock is known ours. */
    s.txn = PRODUCER_TXN_UNINIT;
    s.lead_unverified = s.lock_due = true;
    cr_assert(!plan_fence(&s).init);
    assert_act(&s, PLAN_VERIFY_LOCK);
    s.lead_unverified = s.lock_due = false;
    cr_assert(plan_fence(&s).init);
    assert_act(&s, PLAN_WAIT); /* no claim before transactions are initialised */
}

/* Nothing of a batch reached Kafka, and no row is to blame: wait a poll
 * interval before its rows are claimed again; suspects go at once. */
Test(plan, a_batch_nothing_of_which_reached_kafka_retries_later)
{
    struct batch *b = load(0, 1, 3, PHASE_DELIVERED);
    for (int i = 0; i < 3; i++)
        batch_row_failed(b, i, LIMIT_NONE, NULL);
    cr_assert(!batch_marks_due(b));
    cr_assert_eq(batch_after_marks(b), BATCH_RETRY_LATER);
    b->n_suspects = 3;
    cr_assert_eq(batch_after_marks(b), BATCH_DONE);
}

/* ---- a lost connection ------------------------------------------------------ */

/* The connection drops with one batch marking and the other claiming: the
 * claim produced nothing (its rows are claimable again), the marks were not
 * written (written again, after the new connection's checks); a batch with
 * Kafka goes on; a lost failure record is tried again with its rows. */
Test(plan, connection_loss_mid_batch)
{
    struct plan_state s = leader();
    struct batch *a = load(0, 1, 5, PHASE_DELIVERED), *b = load(1, 6, 5, PHASE_CLAIMING);
    delivered(a);
    a->phase = PHASE_MARKING;
    cr_assert(!batch_lost(a));
    cr_assert(a->phase == PHASE_DELIVERED && !a->marked, "nothing marked, marks due again");
    cr_assert(batch_lost(b), "a lost claim empties its batch");
    batch_clear(b);
    s.pg_ready = false;
    assert_act(&s, PLAN_WAIT);
    /* Reconnected: the checks come first, then the marks. */
    s.pg_ready = true;
    s.session_checked = s.schema_checked = false;
    s.prepared = 0;
    s.role = STATS_ROLE_UNKNOWN;
    s.wake = true;
    assert_act(&s, PLAN_CHECK_SESSION);
    s.session_checked = s.schema_checked = true;
    s.prepared = 2;
    struct plan_step p = plan_next(&s);
    cr_assert(p.act == PLAN_MARK && p.slot == 0);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(batch_row_end(a, i), ROW_END_SENT);
    /* A batch still producing keeps its phase: its reports come anyway. */
    producing(load(1, 6, 5, PHASE_PRODUCING));
    cr_assert(!batch_lost(&slots[1]));
    cr_assert_eq(slots[1].phase, PHASE_PRODUCING);
    /* A lost failure record: the batch is emptied, its charged row is claimed
     * again and fails again, since its attempt was not written. */
    a->phase = PHASE_RECORDING;
    cr_assert(batch_lost(a));
}

/* ---- shutdown ---------------------------------------------------------------- */

/* SIGTERM with one batch delivered and one still with Kafka: the delivered
 * one is marked, no claim goes out, the reports are awaited until the
 * deadline, which purges what Kafka still holds; the delivered part is
 * marked and the relay stops. A second deadline or signal stops at once. */
Test(plan, shutdown_with_batches_in_flight)
{
    struct plan_state s = leader();
    s.wake = true;
    struct batch *a = load(0, 1, 5, PHASE_PRODUCING), *b = load(1, 6, 5, PHASE_DELIVERED);
    producing(a);
    delivered(b);
    cr_assert_eq(plan_drain_on_signal(false, true, true), DRAIN_WAIT);
    s.stopping = true;
    struct plan_step p = plan_next(&s);
    cr_assert(p.act == PLAN_MARK && p.slot == 1);
    batch_clear(b);
    assert_act(&s, PLAN_WAIT);
    cr_assert_eq(plan_fence(&s).drop_held, false, "no transactions: nothing held");
    cr_assert_eq(plan_drain_on_deadline(false, true), DRAIN_PURGE);
    /* The purge fails what was not acknowledged: nobody's fault. */
    batch_reported(a, 0, NULL, NULL);
    batch_reported(a, 1, NULL, NULL);
    struct failure_verdict purged = engine_judge_failure(
        kafka_fault_of(RD_KAFKA_RESP_ERR__PURGE_INFLIGHT, false), false);
    for (int i = 2; i < 5; i++)
        batch_reported(a, i, &purged, rd_kafka_err2name(RD_KAFKA_RESP_ERR__PURGE_INFLIGHT));
    cr_assert_eq(a->phase, PHASE_DELIVERED);
    assert_act(&s, PLAN_MARK);
    cr_assert_eq(batch_failures_to_record(a), 0);
    batch_clear(a);
    assert_act(&s, PLAN_FINISH);
    cr_assert_eq(plan_drain_on_deadline(true, true), DRAIN_FINISH, "the purge's grace is over");
    cr_assert_eq(plan_drain_on_deadline(false, false), DRAIN_FINISH);
    cr_assert_eq(plan_drain_on_signal(true, true, true), DRAIN_FINISH, "a second signal");
    cr_assert_eq(plan_drain_on_signal(false, false, false), DRAIN_FINISH, "nothing to wait for");
    cr_assert_eq(plan_drain_on_signal(false, false, true), DRAIN_WAIT, "reports to wait for");
    cr_assert_eq(plan_drain_on_lost(true), DRAIN_WAIT);
    cr_assert_eq(plan_drain_on_lost(false), DRAIN_FINISH, "nothing more can be marked");
}

/* Stopping before the new connection's checks passed: nothing was claimed
 * on it, so nothing is waited for; a claim answered while stopping is given back. */
Test(plan, stopping_claims_nothing)
{
    struct plan_state s = leader();
    s.stopping = true;
    s.session_checked = false;
    assert_act(&s, PLAN_FINISH);
    s.session_checked = true;
    s.wake = true;
    assert_act(&s, PLAN_FINISH);
    struct batch *b = load(0, 0, 0, PHASE_CLAIMING);
    cr_assert_eq(plan_claimed(&s, b, 10, 1).use, CLAIM_DROP);
    s.txn = PRODUCER_TXN_UNINIT;
    cr_assert(!plan_fence(&s).init, "no new transactions while stopping");
    s.txn = PRODUCER_TXN_OPEN;
    cr_assert(plan_fence(&s).drop_held, "held claims are given back");
}

/* ---- every row ends once -------------------------------------------------- */

/* One batch through every event a row can meet: each row ends sent,
 * charged (attempts + 1), or claimable again, and only one of them. */
Test(plan, every_row_ends_in_exactly_one_state)
{
    struct batch *b = load(0, 100, 8, PHASE_PRODUCING);
    /* 0, 1 delivered; 2 its own permanent failure (alone); 3 a suspect of a
     * shared request; 4 an outage; 5 caught in a fatal error; 6 held behind
     * a failed row; 7 cut by a full queue. */
    for (int i = 0; i < 6; i++)
        b->state[i] = ROW_PENDING;
    b->n_outstanding = 6;
    batch_cut_at(b, 7);
    cr_assert(!batch_reported(b, 0, NULL, NULL));
    cr_assert(!batch_reported(b, 1, NULL, NULL));
    struct {
        int row;
        enum kafka_fault fault;
        bool alone;
    } failures[] = {
        {2, KAFKA_FAULT_PERMANENT, true},
        {3, KAFKA_FAULT_RETRIABLE, false},
        {4, KAFKA_FAULT_OUTAGE, false},
        {5, KAFKA_FAULT_OURS, false},
    };
    for (size_t k = 0; k < sizeof failures / sizeof failures[0]; k++) {
        struct failure_verdict v = engine_judge_failure(failures[k].fault, failures[k].alone);
        bool last = batch_reported(b, failures[k].row, &v, "an error");
        cr_assert_eq(last, k == 3, "the batch is complete with its last report only");
    }
    cr_assert_eq(b->phase, PHASE_DELIVERED);
    cr_assert_eq(b->n_suspects, 1);
    cr_assert_eq(b->n_delivered, 2);
    int ends[3] = {0};
    enum row_end want[] = {ROW_END_SENT, ROW_END_SENT, ROW_END_CHARGED, ROW_END_CLAIMABLE,
                           ROW_END_CLAIMABLE, ROW_END_CLAIMABLE, ROW_END_CLAIMABLE,
                           ROW_END_CLAIMABLE};
    for (int i = 0; i < b->n_rows; i++) {
        enum row_end e = batch_row_end(b, i);
        cr_assert_eq(e, want[i], "row %d", i);
        ends[e]++;
    }
    cr_assert_eq(ends[ROW_END_SENT], b->n_delivered, "what is marked is what was delivered");
    cr_assert_eq(ends[ROW_END_CHARGED], batch_failures_to_record(b), "what is recorded is charged");
    cr_assert_eq(ends[0] + ends[1] + ends[2], b->n_rows);
    cr_assert_eq(b->limit[2], LIMIT_ONE, "a permanent error exhausts the row: attempts + 1 = max");
    cr_assert(b->span.lo == 100 && b->span.hi == 106, "the cut row is outside the span");
    struct plan_state s = leader();
    cr_assert_eq(plan_next(&s).act, PLAN_MARK);
    b->marked = true;
    cr_assert_eq(batch_after_marks(b), BATCH_RECORD);
}

/* ---- the Kafka transaction ---------------------------------------------- */

Test(plan, fencing_initialises_commits_and_releases)
{
    struct plan_state s = leader();
    cr_assert_eq(plan_fence(&s).init, false, "no fencing: nothing to do");
    s.txn = PRODUCER_TXN_UNINIT;
    cr_assert(plan_fence(&s).init, "a leader initialises before its first produce");
    s.role = STATS_ROLE_STANDBY;
    cr_assert(!plan_fence(&s).init, "a standby never does");
    s.role = STATS_ROLE_LEADER;

    /* A delivered batch of the open transaction: commit; not marked before. */
    s.txn = PRODUCER_TXN_OPEN;
    s.txn_gen = 4;
    struct batch *a = load(0, 1, 5, PHASE_DELIVERED);
    delivered(a);
    a->txn_gen = 4;
    struct fence_plan f = plan_fence(&s);
    cr_assert(f.commit && f.unpublish == 0 && f.release < 0);
    s.txn = PRODUCER_TXN_BUSY; /* committing */
    s.wake = true;
    assert_act(&s, PLAN_CLAIM); /* with Kafka, not waiting for marks: the next claim goes */
    s.txn = PRODUCER_TXN_OPEN;
    a->committed = true;
    assert_act(&s, PLAN_MARK);
    cr_assert(plan_txn_settled(&s, a));

    /* A claim held for the next, empty transaction is released, oldest first:
     * in the order the claims were sent, which the loop's millisecond clock
     * cannot tell when both went out in one millisecond (the later claim
     * skipped the earlier one's rows, and released first it overtook them). */
    batch_clear(a);
    s.txn_empty = true;
    struct batch *h1 = load(0, 20, 5, PHASE_PRODUCING), *h0 = load(1, 10, 5, PHASE_PRODUCING);
    int dummy;
    h1->held = h0->held = &dummy;
    h1->start_ms = h0->start_ms = 100;
    h1->claim_seq = 8;
    h0->claim_seq = 7;
    f = plan_fence(&s);
    cr_assert(!f.commit && f.release == 1 && !f.release_stale);
    s.truncations = 1;
    cr_assert(plan_fence(&s).release_stale, "a cut since its claim: claimed again");
    h1->held = h0->held = NULL;
}

/* A transaction's commit settles its batches at once: one statement marks
 * them all. A batch still with Kafka, or with nothing delivered, is not in
 * it; a batch marked with another goes on to its failures without one. */
Test(plan, batches_settled_together_are_marked_by_one_statement)
{
    struct plan_state s = leader();
    s.txn = PRODUCER_TXN_OPEN;
    s.txn_gen = 7;
    struct batch *a = load(0, 1, 5, PHASE_DELIVERED), *b = load(1, 6, 5, PHASE_DELIVERED);
    delivered(a);
    delivered(b);
    a->txn_gen = b->txn_gen = 7;
    a->committed = true;
    struct plan_step p = plan_next(&s);
    cr_assert(p.act == PLAN_MARK && p.slot == 0 && p.with == 0,
              "the other batch's transaction has not committed: not marked with it");
    b->committed = true;
    p = plan_next(&s);
    cr_assert(p.act == PLAN_MARK && p.slot == 0 && p.with == 2u, "both in one statement, got %s %d %u",
              plan_act_name(p.act), p.slot, p.with);
    /* Marked together: the second is DELIVERED and marked, nothing is due. */
    a->marked = b->marked = true;
    batch_clear(a);
    p = plan_next(&s);
    cr_assert(p.act == PLAN_MARK && p.slot == 1 && p.with == 0);
    cr_assert(!batch_marks_due(b) && batch_after_marks(b) == BATCH_DONE);
    /* A batch none of whose rows was delivered has failures to record only. */
    load(0, 1, 5, PHASE_DELIVERED);
    a->committed = true;
    b->marked = false;
    p = plan_next(&s);
    cr_assert(p.act == PLAN_MARK && p.slot == 0 && p.with == 0,
              "nothing of slot 0 to mark: it is not the statement's lead, nor slot 1 marked with it");
    /* Without fencing, every delivered batch is settled. */
    s.txn = PRODUCER_TXN_OFF;
    delivered(a);
    a->committed = b->committed = false;
    p = plan_next(&s);
    cr_assert(p.act == PLAN_MARK && p.slot == 0 && p.with == 2u);
}

/* Rows claimed while the open transaction takes messages join it, even
 * when another batch is in it; rows claimed while it is ending or doomed
 * wait for the next one, and so do rows claimed while an older claim waits. */
Test(plan, a_claim_joins_the_open_transaction_unless_it_ends)
{
    struct plan_state s = leader();
    struct batch *b = load(1, 20, 5, PHASE_PRODUCING);
    cr_assert(!plan_txn_holds(&s, b), "no fencing: produced at once");
    s.txn = PRODUCER_TXN_OPEN;
    s.txn_empty = true;
    cr_assert(!plan_txn_holds(&s, b), "an open, empty transaction takes it");
    s.txn_empty = false;
    cr_assert(!plan_txn_holds(&s, b), "it joins the batch in flight in the open transaction");
    s.txn_empty = true;
    s.txn = PRODUCER_TXN_BUSY;
    cr_assert(plan_txn_holds(&s, b), "a commit runs");
    s.txn = PRODUCER_TXN_OPEN;
    s.txn_doomed = true;
    cr_assert(plan_txn_holds(&s, b), "the open transaction can only abort");
    s.txn_doomed = false;
    int dummy;
    slots[0].held = &dummy;
    cr_assert(plan_txn_holds(&s, b), "an older claim waits: it goes first");
    slots[0].held = NULL;
}

/* The first PLAN_TXN_BATCHES_MAX slots hold @p n rows each, one after the
 * other, being produced into transaction @p gen. */
static void all_producing(int n, unsigned gen)
{
    for (int k = 0; k < PLAN_TXN_BATCHES_MAX; k++) {
        producing(load(k, 1 + k * n, n, PHASE_PRODUCING));
        slots[k].txn_gen = gen;
        slots[k].committed = false;
    }
}

#define TXN_MASK ((1u << PLAN_TXN_BATCHES_MAX) - 1)

/* With transactions and a backlog, one slot more than a transaction carries
 * claims while the batches of the open transaction are with Kafka, skipping
 * them all; its rows wait for the next transaction, so that Kafka works on
 * them while the others are marked. Under a trickle (batches not full) or
 * without transactions there is no such claim: its rows would wait for that
 * transaction instead of joining. */
Test(plan, one_more_batch_is_claimed_for_the_next_transaction_of_a_backlog)
{
    const int last = PLAN_TXN_BATCHES_MAX;
    struct plan_state s = leader();
    s.n_batches = SLOTS;
    s.txn = PRODUCER_TXN_OPEN;
    s.txn_gen = 4;
    s.wake = true;
    struct batch *a = &slots[0], *b = &slots[1];
    all_producing(BATCH_SIZE, 4);
    struct plan_step p = plan_next(&s);
    cr_assert(p.act == PLAN_CLAIM && p.slot == last, "got %s slot %d", plan_act_name(p.act), p.slot);
    cr_assert(p.skip.lo == 1 && p.skip.hi == last * BATCH_SIZE && p.rescan == TXN_MASK,
              "all are skipped");
    struct batch *c = load(last, 1 + last * BATCH_SIZE, BATCH_SIZE, PHASE_PRODUCING);
    cr_assert(plan_txn_holds(&s, c), "the open transaction is full: the next takes it");
    a->phase = PHASE_EMPTY;
    cr_assert(!plan_txn_holds(&s, c), "with room in it, it joins");
    a->phase = PHASE_PRODUCING;

    /* They committed: the held claim is produced into the next
     * transaction, and the others are marked meanwhile, by one statement. */
    int dummy;
    c->held = &dummy;
    for (int k = 0; k < last; k++) {
        delivered(&slots[k]);
        slots[k].committed = true;
    }
    s.txn_gen = 5;
    s.txn_empty = true;
    struct fence_plan f = plan_fence(&s);
    cr_assert(f.release == last && !f.release_stale && !f.commit);
    c->held = NULL;
    c->txn_gen = 5;
    producing(c);
    s.txn_empty = false;
    p = plan_next(&s);
    cr_assert(p.act == PLAN_MARK && p.slot == 0 && p.with == (TXN_MASK & ~1u), "got %s with %x",
              plan_act_name(p.act), p.with);

    /* A trickle: batches that are not full leave the extra slot alone. */
    load(last, 0, 0, PHASE_EMPTY);
    all_producing(5, 5);
    assert_act(&s, PLAN_WAIT);
    all_producing(BATCH_SIZE, 5);
    assert_act(&s, PLAN_CLAIM);
    /* A batch cut short (a full producer queue) gave its later rows back:
     * they lie between the spans, and a claim skipping them all would
     * publish the rows above them first. */
    batch_cut_at(b, BATCH_SIZE / 2);
    assert_act(&s, PLAN_WAIT);
    all_producing(BATCH_SIZE, 5);
    assert_act(&s, PLAN_CLAIM);
    /* Without transactions nothing would hold it: a transaction's worth at most. */
    s.txn = PRODUCER_TXN_OFF;
    assert_act(&s, PLAN_WAIT);
}

/* Under a backlog a delivered batch does not end its transaction while the
 * next claim, which will join it, is running: one commit for several
 * batches. Under a trickle, or with the transaction full, it commits at once. */
Test(plan, a_backlog_fills_the_transaction_before_its_commit)
{
    struct plan_state s = leader();
    s.n_batches = SLOTS;
    s.txn = PRODUCER_TXN_OPEN;
    s.txn_gen = 3;
    struct batch *a = load(0, 1, BATCH_SIZE, PHASE_PRODUCING);
    a->txn_gen = 3;
    delivered(a);
    load(1, 0, 0, PHASE_CLAIMING);
    s.claim_full = true;
    cr_assert(!plan_fence(&s).commit, "a claim of the backlog is on its way into the transaction");
    s.claim_full = false;
    cr_assert(plan_fence(&s).commit, "a trickle commits at once");
    s.claim_full = true;
    s.txn_doomed = true;
    cr_assert(plan_fence(&s).commit, "a doomed transaction ends at once");
    s.txn_doomed = false;
    load(1, 0, 0, PHASE_EMPTY);
    s.wake = false;
    cr_assert(plan_fence(&s).commit, "nothing more to claim");
    s.wake = true;
    cr_assert(!plan_fence(&s).commit, "rows wait and a slot is free: the next claim joins");
    for (int k = 1; k < PLAN_TXN_BATCHES_MAX; k++) {
        struct batch *x = load(k, 1 + k * BATCH_SIZE, BATCH_SIZE, PHASE_PRODUCING);
        x->txn_gen = 3;
        x->committed = false;
        producing(x);
    }
    cr_assert(plan_fence(&s).commit, "the transaction is full");
}

/* A claim held for the next transaction is given back, not produced, once
 * the relay halts on a poison row (or will), stops or is refused: a claim
 * answering now would be dropped too. */
Test(plan, a_held_claim_is_dropped_when_the_relay_halts)
{
    struct plan_state s = leader();
    s.n_batches = SLOTS;
    s.txn = PRODUCER_TXN_OPEN;
    s.txn_gen = 2;
    s.txn_empty = true;
    struct batch *h = load(2, 11, 5, PHASE_PRODUCING);
    int dummy;
    h->held = &dummy;
    struct fence_plan f = plan_fence(&s);
    cr_assert(f.release == 2 && !f.drop_held, "produced into the open transaction");
    s.halt_pending = true;
    f = plan_fence(&s);
    cr_assert(f.drop_held && f.release < 0, "a row in flight will halt the relay");
    s.halt_pending = false;
    s.halted = true;
    f = plan_fence(&s);
    cr_assert(f.drop_held && f.release < 0, "halted");
    s.halted = false;
    s.refused = true;
    f = plan_fence(&s);
    cr_assert(f.drop_held && f.release < 0, "refused");
    h->held = NULL;
}

/* A failure record that fails: the batch's is retried row by row; a single
 * row's gives the batch up (its rows are claimed again); row by row, a lost
 * one is skipped and the next written. */
Test(plan, a_failed_failure_record)
{
    struct batch *b = load(0, 1, 4, PHASE_RECORDING);
    batch_row_failed(b, 1, LIMIT_MAX, "UNKNOWN_TOPIC_OR_PART");
    cr_assert_eq(batch_record_failed(b), RECORD_GIVE_UP);
    batch_row_failed(b, 3, LIMIT_ONE, "INVALID_RECORD");
    cr_assert_eq(batch_record_failed(b), RECORD_EACH);
    b->record_each = true;
    cr_assert_eq(batch_record_failed(b), RECORD_NEXT);
}

/* The end of a transaction settles the batches produced into it, and only
 * those: committed, or aborted (then held claims are given back). */
Test(plan, the_end_of_a_transaction_settles_its_batches)
{
    struct batch *a = load(0, 1, 5, PHASE_DELIVERED), *b = load(1, 6, 5, PHASE_PRODUCING);
    a->txn_gen = 5;
    b->txn_gen = 6;
    cr_assert(!batch_txn_ended(slots, 2, 5, PRODUCER_TXN_DONE));
    cr_assert(a->committed && !b->committed, "only the batch of that transaction");
    cr_assert(!batch_txn_ended(slots, 2, 6, PRODUCER_TXN_RETRY));
    cr_assert(!b->committed && !b->aborted, "an init to retry settles nothing");
    cr_assert(batch_txn_ended(slots, 2, 6, PRODUCER_TXN_ABORTED), "held claims are given back");
    cr_assert(b->aborted && !b->committed);
    int dummy;
    b->aborted = false;
    b->held = &dummy;
    cr_assert(batch_txn_ended(slots, 2, 6, PRODUCER_TXN_FAILED));
    cr_assert(!b->aborted, "a held claim was not produced into it");
    b->held = NULL;
}

/* A failed message dooms the open transaction: its batch is settled as
 * aborted at once (nothing marked, the rows produced again) and the
 * transaction ended; a dead producer's batches likewise, and its held claims
 * are given back. */
Test(plan, a_doomed_or_dead_transaction_unpublishes_its_batches)
{
    struct plan_state s = leader();
    s.txn = PRODUCER_TXN_OPEN;
    s.txn_gen = 2;
    s.txn_doomed = true;
    struct batch *a = load(0, 1, 5, PHASE_DELIVERED);
    delivered(a);
    a->txn_gen = 2;
    struct fence_plan f = plan_fence(&s);
    cr_assert(f.unpublish == 1u && f.commit);
    cr_assert(!plan_txn_may_claim(&s), "no claim into a transaction that must abort");
    s.txn_doomed = false;
    s.txn = PRODUCER_TXN_DEAD;
    f = plan_fence(&s);
    cr_assert(f.unpublish == 1u && f.drop_held && !f.commit);
    /* Aborted, then unpublished: its rows come before any new claim. */
    s.txn = PRODUCER_TXN_OPEN;
    a->unpublished = true;
    a->committed = true;
    s.wake = true;
    cr_assert(!plan_txn_may_claim(&s));
    assert_act(&s, PLAN_MARK);
}

/* The end of a transaction reported it aborted: the batch is unpublished,
 * which counts as a cut, so a claim held meanwhile (it skipped the batch's
 * rows) is claimed again rather than produced ahead of them. */
Test(plan, an_aborted_batch_makes_a_held_claim_stale)
{
    struct plan_state s = leader();
    s.txn = PRODUCER_TXN_OPEN;
    s.txn_gen = 3;
    s.txn_empty = true;
    struct batch *a = load(0, 1, 5, PHASE_DELIVERED), *h = load(1, 6, 5, PHASE_PRODUCING);
    delivered(a);
    a->txn_gen = 2;
    a->aborted = true;
    int dummy;
    h->held = &dummy;
    struct fence_plan f = plan_fence(&s);
    cr_assert(f.unpublish == 1u && !f.commit && f.release == 1 && f.release_stale);
    a->aborted = false;
    f = plan_fence(&s);
    cr_assert(f.unpublish == 0 && f.release == 1 && !f.release_stale);
    h->held = NULL;
}

/* ---- reconnect back-off --------------------------------------------------- */

Test(plan, reconnect_back_off_doubles_with_jitter_up_to_the_maximum)
{
    const uint64_t base = 500, max = 30000;
    for (unsigned attempt = 0; attempt < 12; attempt++) {
        uint64_t full = base << attempt;
        if (full > max)
            full = max;
        cr_assert_eq(plan_reconnect_delay(attempt, base, max, 0), full / 2, "attempt %u, lowest", attempt);
        cr_assert_eq(plan_reconnect_delay(attempt, base, max, full / 2), full, "attempt %u, highest", attempt);
        for (uint64_t rnd = 0; rnd < 100000; rnd += 7919) {
            uint64_t d = plan_reconnect_delay(attempt, base, max, rnd);
            cr_assert(d >= full / 2 && d <= full, "attempt %u: %llu", attempt, (unsigned long long)d);
        }
    }
    cr_assert_eq(plan_reconnect_delay(1000, base, max, 0), max / 2, "no overflow however many attempts");
    cr_assert_neq(plan_reconnect_delay(3, base, max, 1), plan_reconnect_delay(3, base, max, 2),
                  "the random number spreads the relays");
}
