/* test_plan.c — the relay's decisions event by event, without PostgreSQL or
 * a broker: which step comes next and in what order, the id range a claim
 * skips while batches are in flight, and the poison policies at work (what a
 * failure or the end does: test_plan_faults.c). The relay is a plan_state
 * here; each test changes it the way the daemon (relay/daemon/relay_*.c)
 * does when an event arrives. */
#include "plan_fixture.h"

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

/* A right refused on the topic: nothing is claimed until the back-off has
 * passed, then the rows are claimed again. */
Test(plan, a_refused_topic_right_holds_the_claim_until_its_back_off)
{
    struct plan_state s = leader();
    s.wake = true;
    s.now_ms = 10000;
    s.producer_retry_at_ms = 40000;
    assert_act(&s, PLAN_WAIT);
    s.now_ms = 39999;
    assert_act(&s, PLAN_WAIT);
    s.now_ms = 40000;
    assert_act(&s, PLAN_CLAIM);
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
    /* Writers notify again as fast as before: quiet again, not left. */
    s.quiet_wanted = true;
    assert_act(&s, PLAN_TAKE_QUIET);
    s.quiet_wanted = false;

    /* An empty claim beside a batch in flight is no pause: that batch's
     * mark brings the next claim (its range was skipped). */
    s.quiet = PLAN_QUIET_ON;
    struct batch *other = load(1, 7, 100, PHASE_PRODUCING);
    b = load(0, 0, 0, PHASE_CLAIMING);
    cr_assert(!plan_claimed(&s, b, 0, 0).quiet_idle, "another batch is in flight");
    batch_clear(other);
    cr_assert(plan_claimed(&s, b, 0, 0).quiet_idle, "nothing in flight: idle");
    batch_clear(b);

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
    /* a topic the principal may not write: nobody's row, the relay backs off */
    cr_assert_eq(engine_send_verdict(-EACCES, false), SEND_DENIED);
    cr_assert_eq(engine_send_verdict(-EACCES, true), SEND_DENIED);
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
