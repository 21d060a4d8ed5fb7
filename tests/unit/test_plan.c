/* test_plan.c — the relay's decisions event by event, without PostgreSQL or
 * a broker: which step comes next and in what order, the id range a claim
 * skips while batches are in flight, what a shutdown, a lost connection or a
 * fatal producer does to them, the poison policies at work, the Kafka
 * transaction's steps and the reconnect back-off. The relay is a plan_state
 * here; each test changes it the way the daemon (relay/daemon/relay_*.c) does when an event arrives. */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>
#include <librdkafka/rdkafka.h>

#include "core/batch.h"
#include "core/engine.h"
#include "core/plan.h"

#define BATCH_SIZE 100

#define SLOTS 3

static struct batch slots[SLOTS];

static void setup(void)
{
    memset(slots, 0, sizeof slots);
    for (int k = 0; k < SLOTS; k++) {
        slots[k].slot = k;
        cr_assert_eq(batch_reserve(&slots[k], BATCH_SIZE), 0);
    }
}

static void teardown(void)
{
    for (int k = 0; k < SLOTS; k++)
        batch_free(&slots[k]);
}

TestSuite(plan, .init = setup, .fini = teardown);

/* A connected leader, every check done, nothing due. */
static struct plan_state leader(void)
{
    return (struct plan_state){
        .now_ms = 100000,
        .pg_ready = true,
        .session_checked = true,
        .schema_checked = true,
        .prepared = 2,
        .n_hot = 2,
        .listening = true,
        .role = STATS_ROLE_LEADER,
        .ready_sent = true,
        .batch_size = BATCH_SIZE,
        .backlog_due_ms = 105000,
        .txn = PRODUCER_TXN_OFF,
        .b = slots,
        .n_batches = 2,
    };
}

/* Slot @p k holds the rows first..first+n-1, in phase @p ph. */
static struct batch *load(int k, int64_t first, int n, enum phase ph)
{
    struct batch *b = &slots[k];
    for (int i = 0; i < n; i++) {
        b->ids[i] = first + i;
        b->created_ms[i] = 0;
    }
    batch_loaded(b, n);
    b->phase = ph;
    return b;
}

/* Every report of @p b is in and every row was delivered. */
static void delivered(struct batch *b)
{
    for (int i = 0; i < b->n_rows; i++)
        b->state[i] = ROW_DELIVERED;
    b->n_delivered = b->n_rows;
    b->n_outstanding = 0;
    b->phase = PHASE_DELIVERED;
}

static void producing(struct batch *b)
{
    for (int i = 0; i < b->n_rows; i++)
        b->state[i] = ROW_PENDING;
    b->n_outstanding = b->n_rows;
    b->phase = PHASE_PRODUCING;
}

/* The step the daemon would carry out now is @p want. */
#define assert_act(s, want)                                                                   \
    do {                                                                                      \
        struct plan_step got_ = plan_next(s);                                                 \
        cr_assert_eq(got_.act, (want), "expected %s, got %s", plan_act_name(want),            \
                     plan_act_name(got_.act));                                                \
    } while (0)

/* What the daemon sees once the statement of @p p has answered. */
static void answered(struct plan_state *s, struct plan_step p)
{
    switch (p.act) {
    case PLAN_CHECK_SESSION: s->session_checked = true; break;
    case PLAN_CHECK_SCHEMA: s->schema_checked = true; break;
    case PLAN_PREPARE: s->prepared++; break;
    case PLAN_TAKE_LOCK:
        s->role = STATS_ROLE_LEADER;
        s->lock_due = false;
        s->wake = true;
        break;
    case PLAN_READY: s->ready_sent = true; break;
    case PLAN_COUNT_BACKLOG: s->backlog_due_ms = p.at_ms; break;
    case PLAN_LISTEN: s->listening = true; break;
    default: cr_assert_fail("no answer modelled for %s", plan_act_name(p.act));
    }
}

/* ---- priorities ------------------------------------------------------------- */

/* A new connection with everything due: the checks, then the lock, then
 * systemd is told, the backlog counted, LISTEN, and only then a claim. */
Test(plan, a_new_connection_goes_through_its_steps_in_order)
{
    struct plan_state s = leader();
    s.session_checked = s.schema_checked = s.listening = s.ready_sent = false;
    s.prepared = 0;
    s.role = STATS_ROLE_UNKNOWN;
    s.backlog_due_ms = 0;
    s.wake = s.lock_due = true;
    enum plan_act want[] = {PLAN_CHECK_SESSION, PLAN_CHECK_SCHEMA, PLAN_PREPARE, PLAN_PREPARE,
                            PLAN_TAKE_LOCK, PLAN_READY, PLAN_COUNT_BACKLOG, PLAN_LISTEN};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct plan_step p = plan_next(&s);
        cr_assert_eq(p.act, want[i], "step %zu: expected %s, got %s", i, plan_act_name(want[i]),
                     plan_act_name(p.act));
        if (p.act == PLAN_PREPARE)
            cr_assert_eq(p.index, s.prepared, "the hot statements are prepared in order");
        answered(&s, p);
    }
    cr_assert_eq(s.backlog_due_ms, s.now_ms + PLAN_BACKLOG_EVERY_MS);
    struct plan_step p = plan_next(&s);
    cr_assert_eq(p.act, PLAN_CLAIM);
    cr_assert(p.slot == 0 && p.limit == BATCH_SIZE && !p.alone && id_span_is_empty(p.skip) &&
              p.rescan == 0, "nothing in flight: a full claim that skips nothing");
}

/* The count of a large backlog takes a while on the claims' connection: it is
 * spaced to keep its share of that connection small, within bounds. */
Test(plan, a_slow_backlog_count_is_spaced_out)
{
    cr_assert_eq(plan_backlog_next_ms(1000, 0), 1000 + PLAN_BACKLOG_EVERY_MS);
    cr_assert_eq(plan_backlog_next_ms(1000, 100), 1000 + PLAN_BACKLOG_EVERY_MS);
    cr_assert_eq(plan_backlog_next_ms(1000, 400), 1000 + 400 * PLAN_BACKLOG_SHARE);
    cr_assert_eq(plan_backlog_next_ms(1000, 5000), 1000 + PLAN_BACKLOG_AT_MOST_EVERY_MS);

    struct plan_state s = leader();
    s.backlog_due_ms = 0;
    s.backlog_took_ms = 400;
    struct plan_step p = plan_next(&s);
    cr_assert_eq(p.act, PLAN_COUNT_BACKLOG);
    cr_assert_eq(p.at_ms, s.now_ms + 400 * PLAN_BACKLOG_SHARE,
                 "the next count waits 20 times as long as the last one took");
}

/* Marks record facts: they go before leadership, the backlog and the claim,
 * whatever the role, older slot first. */
Test(plan, marks_come_before_everything_but_the_connection)
{
    struct plan_state s = leader();
    s.lock_due = s.wake = true;
    s.backlog_due_ms = 0;
    delivered(load(1, 11, 10, PHASE_DELIVERED));
    delivered(load(0, 1, 10, PHASE_DELIVERED));
    struct plan_step p = plan_next(&s);
    cr_assert(p.act == PLAN_MARK && p.slot == 0, "slot 0 first, got %s %d", plan_act_name(p.act),
              p.slot);
    s.role = STATS_ROLE_STANDBY;
    cr_assert_eq(plan_next(&s).act, PLAN_MARK, "a standby marks what it delivered as leader");
    s.session_checked = false;
    assert_act(&s, PLAN_CHECK_SESSION);
    s.session_checked = true;
    s.pg_ready = false;
    assert_act(&s, PLAN_WAIT);
}

/* A failed statement backs off: nothing new is sent until the tick, not
 * even a mark (the tick clears the back-off). */
Test(plan, back_off_sends_nothing_until_the_tick)
{
    struct plan_state s = leader();
    s.backoff = s.wake = true;
    delivered(load(0, 1, 10, PHASE_DELIVERED));
    assert_act(&s, PLAN_WAIT);
    s.session_checked = false;
    assert_act(&s, PLAN_WAIT);
    s.backoff = false;
    assert_act(&s, PLAN_CHECK_SESSION);
    s.session_checked = true;
    batch_clear(&slots[0]);
    s.backoff = true;
    s.lock_due = true;
    assert_act(&s, PLAN_WAIT); /* no lock statement and no claim either */
}

/* Refused: the batches in flight are marked first, then the lock is given
 * back and the connection closed; at the deadline, even with marks pending. */
Test(plan, a_refused_relay_marks_then_winds_down)
{
    struct plan_state s = leader();
    s.refused = true;
    s.wake = true;
    s.refuse_deadline_ms = s.now_ms + 1000;
    struct batch *a = load(0, 1, 5, PHASE_PRODUCING);
    producing(a);
    assert_act(&s, PLAN_WAIT);
    delivered(a);
    assert_act(&s, PLAN_MARK);
    s.now_ms = s.refuse_deadline_ms;
    assert_act(&s, PLAN_WIND_DOWN);
    s.now_ms = 100000;
    s.prepared = 1;
    assert_act(&s, PLAN_WIND_DOWN); /* nothing can be marked without the prepared mark */
    s.prepared = 2;
    batch_clear(a);
    assert_act(&s, PLAN_WIND_DOWN);
}

/* The tick makes the lock due: a leader checks it is still its own, a
 * standby asks for it again; a standby asks who holds it, counts the backlog,
 * and never claims. */
Test(plan, leadership_steps)
{
    struct plan_state s = leader();
    s.lock_due = true;
    assert_act(&s, PLAN_VERIFY_LOCK);
    s.role = STATS_ROLE_STANDBY;
    assert_act(&s, PLAN_TAKE_LOCK);
    s.lock_due = false;
    s.holder_due = true;
    assert_act(&s, PLAN_ASK_HOLDER);
    s.holder_due = false;
    s.wake = true;
    s.backlog_due_ms = 0;
    assert_act(&s, PLAN_COUNT_BACKLOG);
    s.backlog_due_ms = s.now_ms + 1;
    assert_act(&s, PLAN_WAIT);
}

/* A new leader claims before it counts (a count takes a while on a large
 * backlog), for a while; under row-level security it never counts. */
Test(plan, the_backlog_count_waits_for_a_new_leaders_first_claim)
{
    struct plan_state s = leader();
    s.wake = s.claim_first = true;
    s.backlog_due_ms = 0;
    s.claim_first_until = s.now_ms + 2000;
    assert_act(&s, PLAN_CLAIM);
    s.now_ms = s.claim_first_until;
    assert_act(&s, PLAN_COUNT_BACKLOG);
    s.claim_first = false;
    s.row_security = true;
    assert_act(&s, PLAN_CLAIM);
}

/* Retention runs when nothing is in flight and no claim is due. */
Test(plan, retention_runs_when_nothing_is_in_flight)
{
    struct plan_state s = leader();
    s.retention_due = true;
    s.wake = true;
    assert_act(&s, PLAN_CLAIM);
    s.wake = false;
    assert_act(&s, PLAN_RETENTION);
    producing(load(0, 1, 5, PHASE_PRODUCING));
    assert_act(&s, PLAN_WAIT);
    cr_assert(plan_retention_due(3600, 160000, 100000));
    cr_assert(!plan_retention_due(3600, 159999, 100000));
    cr_assert(!plan_retention_due(0, 1000000, 0), "retention off (on_sent=delete)");
}

/* ---- two batches in flight ------------------------------------------------ */

/* While a batch is with Kafka the other slot claims, skipping its id range;
 * once it is marked, a claim covers that range again (rows that committed
 * late inside it are found then). */
Test(plan, the_skip_range_of_two_batches_and_the_rescan_after_marks)
{
    struct plan_state s = leader();
    s.wake = true;
    producing(load(0, 10, 10, PHASE_PRODUCING)); /* ids 10..19 */
    struct plan_step p = plan_next(&s);
    cr_assert_eq(p.act, PLAN_CLAIM);
    cr_assert(p.slot == 1 && p.skip.lo == 10 && p.skip.hi == 19, "skips 10..%lld", (long long)p.skip.hi);
    cr_assert_eq(p.rescan, 1u << 0, "slot 0's range is rescanned after its marks");

    /* Both in flight: no third claim. */
    producing(load(1, 25, 10, PHASE_PRODUCING));
    assert_act(&s, PLAN_WAIT);
    /* Slot 0 delivered: its marks, and no claim while it is not marked. */
    delivered(&slots[0]);
    p = plan_next(&s);
    cr_assert(p.act == PLAN_MARK && p.slot == 0);
    slots[0].phase = PHASE_MARKING;
    s.pg_ready = false; /* the mark statement runs */
    assert_act(&s, PLAN_WAIT);
    s.pg_ready = true;
    slots[0].phase = PHASE_RECORDING;
    s.wake = false;
    assert_act(&s, PLAN_WAIT);
    /* Marked and done: the daemon wakes for the rescan; the claim now skips only slot 1. */
    batch_clear(&slots[0]);
    s.wake = true;
    p = plan_next(&s);
    cr_assert(p.act == PLAN_CLAIM && p.slot == 0 && p.skip.lo == 25 && p.skip.hi == 34,
              "the rescan sees 10..24 again");
    cr_assert_eq(p.rescan, 1u << 1);
}

/* A full producer queue cut a batch: no claim until reports free room; once
 * nothing is queued the claim goes and says the queue drained. */
Test(plan, a_full_queue_holds_the_claim_until_it_drains)
{
    struct plan_state s = leader();
    s.wake = s.queue_full = true;
    struct batch *b = load(0, 1, 10, PHASE_PRODUCING);
    producing(b);
    batch_cut_at(b, 4);
    assert_act(&s, PLAN_WAIT);
    b->n_outstanding = 0;
    b->phase = PHASE_DELIVERED;
    b->state[0] = ROW_DELIVERED; /* marks first */
    b->n_delivered = 1;
    assert_act(&s, PLAN_MARK);
    batch_clear(b);
    struct plan_step p = plan_next(&s);
    cr_assert(p.act == PLAN_CLAIM && p.queue_drained);
}

/* Suspects go alone: one row per claim, and no claim while anything else
 * is in flight; the isolation ends past the last suspect. */
Test(plan, suspects_are_claimed_one_at_a_time)
{
    struct plan_state s = leader();
    s.wake = s.isolating = true;
    s.isolate_until_id = 40;
    producing(load(0, 30, 1, PHASE_PRODUCING));
    assert_act(&s, PLAN_WAIT);
    batch_clear(&slots[0]);
    struct plan_step p = plan_next(&s);
    cr_assert(p.act == PLAN_CLAIM && p.alone && p.limit == 1);

    struct batch *b = load(0, 0, 0, PHASE_CLAIMING);
    b->alone = true;
    struct claim_verdict v = plan_claimed(&s, b, 1, 35);
    cr_assert(v.use == CLAIM_PRODUCE && !v.isolation_over && v.alone && v.more,
              "a suspect left: the next one follows at once");
    v = plan_claimed(&s, b, 1, 41);
    cr_assert(v.use == CLAIM_PRODUCE && v.isolation_over, "past the last suspect");
    v = plan_claimed(&s, b, 0, 0);
    cr_assert(v.use == CLAIM_DROP && v.isolation_over && !v.alone);
}

/* A claim sent before another batch was cut skipped rows that batch gave
 * back: its result is dropped and claimed again. */
Test(plan, a_claim_older_than_a_cut_is_stale)
{
    struct plan_state s = leader();
    struct batch *b = load(1, 0, 0, PHASE_CLAIMING);
    b->claim_gen = 3;
    s.truncations = 4;
    cr_assert_eq(plan_claimed(&s, b, 10, 50).use, CLAIM_STALE);
    s.truncations = 3;
    struct claim_verdict v = plan_claimed(&s, b, BATCH_SIZE, 50);
    cr_assert(v.use == CLAIM_PRODUCE && v.more, "a full claim: more rows are waiting");
    cr_assert(!plan_claimed(&s, b, 10, 50).more);
}

/* Leaving the quiet lock: 5 ms, doubling, at most 100 ms or the poll interval. */
Test(plan, the_quiet_checks_back_off)
{
    uint64_t w = 0, seen[8];
    for (int i = 0; i < 8; i++)
        seen[i] = w = plan_quiet_check_wait(w, 1000);
    uint64_t want[8] = { 5, 10, 20, 40, 80, 100, 100, 100 };
    for (int i = 0; i < 8; i++)
        cr_assert_eq(seen[i], want[i], "wait %d: %llu ms", i, (unsigned long long)seen[i]);
    cr_assert_eq(plan_quiet_check_wait(40, 50), 50, "never longer than the poll interval");
    cr_assert_eq(plan_quiet_check_wait(0, 1), 1);
}

/* The ids of a skipped span that no batch in flight holds: the only ones a
 * row committed after their claims can have, passed to the claim. */
Test(plan, the_gaps_of_a_skipped_span)
{
    int64_t g[8];
    struct batch *a = load(0, 10, 4, PHASE_PRODUCING);  /* 10..13 */
    struct batch *b = load(1, 20, 3, PHASE_PRODUCING);  /* 20..22 */
    b->ids[2] = 24;                                     /* 20, 21, 24 */
    struct id_span both = id_span_union(a->span, (struct id_span){ .lo = 20, .hi = 24 });
    cr_assert_eq(batch_gaps_within(slots, 2, 3u, both, g, 8), 8, "14..19, 22, 23");
    cr_assert_eq(g[0], 14);
    cr_assert_eq(g[5], 19);
    cr_assert_eq(g[6], 22);
    cr_assert_eq(g[7], 23);
    cr_assert_eq(batch_gaps_within(slots, 2, 3u, both, g, 7), -1, "more than the room: unknown");
    cr_assert_eq(batch_gaps_within(slots, 2, 1u, (struct id_span){ .lo = 10, .hi = 13 }, g, 8), 0,
                 "a batch of consecutive ids leaves none");
    cr_assert_eq(batch_gaps_within(slots, 2, 2u, (struct id_span){ .lo = 20, .hi = 24 }, g, 8), 2,
                 "only the batches of the mask");
    cr_assert_eq(g[0], 22);
    cr_assert_eq(batch_gaps_within(slots, 2, 3u, id_span_empty(), g, 8), 0);
    b->ids[2] = 20; /* not ascending: which ids are free is not known */
    cr_assert_eq(batch_gaps_within(slots, 2, 2u, (struct id_span){ .lo = 20, .hi = 24 }, g, 8),
                 -1);
}

/* The quiet lock: taken when a claim found rows and a NOTIFY came while it
 * ran; then every claim that finds rows is followed by another; released
 * when one finds nothing, and the last claim waits for the check that no
 * writer that sent no NOTIFY is still open. Only a leader holds it. */
Test(plan, the_quiet_lock_follows_the_claims)
{
    struct plan_state s = leader();
    struct batch *b = load(0, 0, 0, PHASE_CLAIMING);

    /* Rows, but few NOTIFYs while the claim ran: writers are not quicker. */
    struct claim_verdict v = plan_claimed(&s, b, 10, 50);
    cr_assert(!v.quiet_wanted && !v.quiet_idle && !v.more);
    s.notifies = PLAN_QUIET_NOTIFIES - 1;
    cr_assert(!plan_claimed(&s, b, 10, 50).quiet_wanted, "a writer or two: NOTIFY is cheap");
    s.notifies = PLAN_QUIET_NOTIFIES;
    v = plan_claimed(&s, b, 10, 50);
    cr_assert(v.quiet_wanted && !v.more, "writers notify faster than claims return");
    cr_assert(!plan_claimed(&s, b, 0, 0).quiet_wanted, "nothing found: nothing to be quiet for");
    batch_clear(b);

    s.wake = false;
    s.notifies = 0;
    s.quiet_wanted = true;
    assert_act(&s, PLAN_TAKE_QUIET);
    s.quiet_wanted = false;
    s.quiet = PLAN_QUIET_ON;
    s.wake = true;
    assert_act(&s, PLAN_CLAIM);
    /* Quiet, no NOTIFY will come: a claim that found rows asks for the next. */
    b = load(0, 0, 0, PHASE_CLAIMING);
    s.wake = false;
    cr_assert(plan_claimed(&s, b, 3, 50).more, "a quiet relay claims again after rows");
    cr_assert(!plan_claimed(&s, b, 0, 0).more);
    cr_assert(plan_claimed(&s, b, 0, 0).quiet_idle);
    batch_clear(b);

    /* Nothing found: released, then checked before the last claim. */
    s.quiet_idle = true;
    assert_act(&s, PLAN_RELEASE_QUIET);
    s.quiet = PLAN_QUIET_LEAVING;
    s.quiet_check_at_ms = s.now_ms;
    assert_act(&s, PLAN_CHECK_QUIET);
    /* A writer that sent none is open: the claim goes on, the check waits. */
    s.quiet_check_at_ms = s.now_ms + 10;
    s.wake = true;
    assert_act(&s, PLAN_CLAIM);
    s.wake = false;
    assert_act(&s, PLAN_WAIT);
    s.now_ms += 10;
    assert_act(&s, PLAN_CHECK_QUIET);
    /* A claim that finds rows while leaving comes before the check. */
    s.quiet_idle = false;
    s.wake = true;
    assert_act(&s, PLAN_CLAIM);

    /* A standby, or a relay shutting down, never holds it. */
    s = leader();
    s.quiet_wanted = true;
    s.role = STATS_ROLE_STANDBY;
    cr_assert_neq(plan_next(&s).act, PLAN_TAKE_QUIET);
    s.quiet = PLAN_QUIET_ON;
    assert_act(&s, PLAN_RELEASE_QUIET);
    s = leader();
    s.quiet = PLAN_QUIET_ON;
    s.refused = true;
    s.refuse_deadline_ms = s.now_ms + 1000;
    cr_assert_neq(plan_next(&s).act, PLAN_CLAIM);
}

/* ---- poison policies at work ---------------------------------------------- */

/* A row that cannot be produced (its topic is invalid) holds the later rows
 * of its aggregate in the other batch, unless the policy is dead_letter;
 * held rows end claimable, the failed one charged; what follows its record
 * depends on the policy. */
static void poisoned_aggregate(enum poison_policy pol, bool want_held)
{
    const struct poison_rules *rules = poison_rules_of(pol);
    struct batch *a = load(0, 1, 3, PHASE_PRODUCING), *b = load(1, 4, 3, PHASE_PRODUCING);
    a->state[0] = a->state[2] = ROW_DELIVERED;
    a->n_delivered = 2;
    cr_assert(batch_row_failed(a, 1, LIMIT_ONE, "invalid topic name"));
    if (rules->hold_in_flight)
        a->agg[1] = strdup("order\x1f" "7");
    /* The second batch's rows, produced after: row 0 is of order 7. */
    bool held = rules->hold_in_flight && batch_holds(slots, 2, "order\x1f" "7");
    cr_assert_eq(held, want_held, "%s", poison_policy_names[pol]);
    for (int i = 0; i < 3; i++)
        b->state[i] = i == 0 && held ? ROW_SKIPPED : ROW_DELIVERED;
    b->n_delivered = held ? 2 : 3;
    cr_assert_eq(batch_row_end(b, 0), held ? ROW_END_CLAIMABLE : ROW_END_SENT);
    cr_assert_eq(batch_row_end(a, 1), ROW_END_CHARGED);
    a->phase = PHASE_DELIVERED;
    cr_assert(batch_marks_due(a));
    a->marked = true;
    cr_assert_eq(batch_after_marks(a), BATCH_RECORD);
}

Test(plan, hold_aggregate_holds_the_aggregate_across_batches_and_dead_letters)
{
    poisoned_aggregate(POISON_HOLD_AGGREGATE, true);
    const struct poison_rules *rules = poison_rules_of(POISON_HOLD_AGGREGATE);
    cr_assert(rules->hold_claim, "the claim skips the aggregates of dead rows");
    cr_assert_eq(poison_outcome_of(rules, true, true, false), OUTCOME_DEAD_LETTERED);
    cr_assert_eq(poison_outcome_of(rules, false, false, false), OUTCOME_RETRY);
    /* The record was written and the batch is done: relaying goes on. */
    batch_clear(&slots[0]);
    struct plan_state s = leader();
    s.wake = true;
    cr_assert_eq(plan_next(&s).act, PLAN_CLAIM);
}

Test(plan, dead_letter_lets_the_aggregate_go_on)
{
    poisoned_aggregate(POISON_DEAD_LETTER, false);
    const struct poison_rules *rules = poison_rules_of(POISON_DEAD_LETTER);
    cr_assert(!rules->hold_claim);
    cr_assert_eq(poison_outcome_of(rules, true, true, false), OUTCOME_DEAD_LETTERED);
    cr_assert_eq(poison_outcome_of(rules, false, true, false), OUTCOME_RETRY,
                 "dead_letter never halts");
}

/* halt: a row that will exhaust its attempts stops the claims at once (its
 * batch and the other are still marked); its record halts the relay, once;
 * claimed rows are then given back. */
Test(plan, halt_stops_claiming_but_still_marks)
{
    poisoned_aggregate(POISON_HALT, true);
    const struct poison_rules *rules = poison_rules_of(POISON_HALT);
    struct plan_state s = leader();
    s.wake = true;
    s.halt_pending = true; /* produce_rows saw a permanent failure under halt */
    slots[1].phase = PHASE_DELIVERED;
    slots[1].n_outstanding = 0;
    cr_assert_eq(plan_next(&s).act, PLAN_MARK);
    batch_clear(&slots[0]);
    batch_clear(&slots[1]);
    s.backlog_due_ms = 0;
    assert_act(&s, PLAN_COUNT_BACKLOG); /* the backlog is still counted */
    s.backlog_due_ms = s.now_ms + 1;
    assert_act(&s, PLAN_WAIT);
    cr_assert_eq(poison_outcome_of(rules, false, true, false), OUTCOME_HALT);
    cr_assert_eq(poison_outcome_of(rules, false, true, true), OUTCOME_RETRY, "halted once");
    cr_assert_eq(poison_outcome_of(rules, false, false, false), OUTCOME_RETRY);
    s.halt_pending = false;
    s.halted = true;
    assert_act(&s, PLAN_WAIT);
    struct batch *b = load(0, 0, 0, PHASE_CLAIMING);
    cr_assert_eq(plan_claimed(&s, b, 5, 10).use, CLAIM_DROP, "claimed rows stay unsent");
}

/* Handing a row to the producer: a row that can never be produced is
 * charged; a full queue or an unusable producer is not the row's fault and
 * ends the batch before it, unless the queue is empty: then the row alone is
 * too large for it, for ever. */
Test(plan, what_a_refused_hand_over_means_for_the_row)
{
    cr_assert_eq(engine_send_verdict(0, false), SEND_QUEUED);
    cr_assert_eq(engine_send_verdict(-EINVAL, false), SEND_REFUSED);
    cr_assert_eq(engine_send_verdict(-ENOBUFS, false), SEND_CUT);
    cr_assert_eq(engine_send_verdict(-ENOBUFS, true), SEND_TOO_LARGE);
    cr_assert_eq(engine_send_verdict(-EIO, false), SEND_CUT);
    cr_assert_eq(engine_send_verdict(-EIO, true), SEND_CUT, "an unusable producer: nobody's fault");
    /* A cut batch: the rows from the cut on stay unsent, claimable again. */
    struct batch *b = load(0, 1, 6, PHASE_PRODUCING);
    for (int i = 0; i < 3; i++)
        b->state[i] = ROW_PENDING;
    batch_cut_at(b, 3);
    cr_assert(b->span.lo == 1 && b->span.hi == 3);
    for (int i = 3; i < 6; i++)
        cr_assert_eq(batch_row_end(b, i), ROW_END_CLAIMABLE);
}

/* ---- a fatal producer ----------------------------------------------------- */

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

    /* A claim held for the next, empty transaction is released, oldest first. */
    batch_clear(a);
    s.txn_empty = true;
    struct batch *h1 = load(0, 20, 5, PHASE_PRODUCING), *h0 = load(1, 10, 5, PHASE_PRODUCING);
    int dummy;
    h1->held = h0->held = &dummy;
    h1->start_ms = 200;
    h0->start_ms = 100;
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

/* Slots 0 and 1 hold @p n rows each, one after the other, being produced
 * into transaction @p gen. */
static void two_producing(int n, unsigned gen)
{
    for (int k = 0; k < 2; k++) {
        producing(load(k, 1 + k * n, n, PHASE_PRODUCING));
        slots[k].txn_gen = gen;
        slots[k].committed = false;
    }
}

/* With transactions and a backlog, a third slot claims while the two batches
 * of the open transaction are with Kafka, skipping both; its rows wait for the
 * next transaction, so that Kafka works on them while the two are marked.
 * Under a trickle (batches not full) or without transactions there is no
 * third claim: its rows would wait for that transaction instead of joining. */
Test(plan, a_third_batch_is_claimed_for_the_next_transaction_of_a_backlog)
{
    struct plan_state s = leader();
    s.n_batches = SLOTS;
    s.txn = PRODUCER_TXN_OPEN;
    s.txn_gen = 4;
    s.wake = true;
    struct batch *a = &slots[0], *b = &slots[1];
    two_producing(BATCH_SIZE, 4);
    struct plan_step p = plan_next(&s);
    cr_assert(p.act == PLAN_CLAIM && p.slot == 2, "got %s slot %d", plan_act_name(p.act), p.slot);
    cr_assert(p.skip.lo == 1 && p.skip.hi == 2 * BATCH_SIZE && p.rescan == 3u, "both are skipped");
    struct batch *c = load(2, 1 + 2 * BATCH_SIZE, BATCH_SIZE, PHASE_PRODUCING);
    cr_assert(plan_txn_holds(&s, c), "the open transaction carries two batches: the next takes it");
    a->phase = PHASE_EMPTY;
    cr_assert(!plan_txn_holds(&s, c), "with one batch in it, it joins");
    a->phase = PHASE_PRODUCING;

    /* The two committed: the held claim is produced into the next
     * transaction, and the two are marked meanwhile, by one statement. */
    int dummy;
    c->held = &dummy;
    delivered(a);
    delivered(b);
    a->committed = b->committed = true;
    s.txn_gen = 5;
    s.txn_empty = true;
    struct fence_plan f = plan_fence(&s);
    cr_assert(f.release == 2 && !f.release_stale && !f.commit);
    c->held = NULL;
    c->txn_gen = 5;
    producing(c);
    s.txn_empty = false;
    p = plan_next(&s);
    cr_assert(p.act == PLAN_MARK && p.slot == 0 && p.with == 2u, "got %s", plan_act_name(p.act));

    /* A trickle: two batches that are not full leave the third slot alone. */
    load(2, 0, 0, PHASE_EMPTY);
    two_producing(5, 5);
    assert_act(&s, PLAN_WAIT);
    two_producing(BATCH_SIZE, 5);
    assert_act(&s, PLAN_CLAIM);
    /* A batch cut short (a full producer queue) gave its later rows back:
     * they lie between the two spans, and a third claim skipping both would
     * publish the rows above them first. */
    batch_cut_at(b, BATCH_SIZE / 2);
    assert_act(&s, PLAN_WAIT);
    two_producing(BATCH_SIZE, 5);
    assert_act(&s, PLAN_CLAIM);
    /* Without transactions nothing would hold it: two batches at most. */
    s.txn = PRODUCER_TXN_OFF;
    assert_act(&s, PLAN_WAIT);
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
