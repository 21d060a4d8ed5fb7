/* test_capture_plan.c — relay.capture = wal decided event by event, without
 * PostgreSQL or a broker: what may be confirmed and when, when the Kafka
 * transaction is committed, when the stream restarts, reads on, ends. The
 * daemon is a capture_env here; each test feeds the plan the events the
 * daemon (relay/daemon/relay_capture.c) hands it and reads its answers. */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#include "core/capture_ahead.h"
#include "core/capture_plan.h"
#include "core/capture_slot.h"
#include "core/plan.h"

static struct capture_env leader_env(enum producer_txn_state txn)
{
    return (struct capture_env){ .now_ms = 1000000, .leader = true, .txn = txn };
}

/* A plan streaming from a fresh start, as the daemon brings it there. */
static struct capture_plan streaming(const struct capture_env *e)
{
    struct capture_plan p;
    capture_plan_init(&p);
    struct capture_acts a = capture_plan_step(&p, e);
    cr_assert(a.what & CAP_DO_START);
    capture_plan_started(&p, e, true);
    a = capture_plan_streaming(&p);
    cr_assert_eq(p.state, CAPTURE_STREAMING);
    return p;
}

/* One message of the transaction being read, handed to the producer. */
static uint64_t send_one(struct capture_plan *p, const struct capture_env *e)
{
    struct capture_acts a = { 0 };
    bool too_large;
    uint64_t opaque = capture_plan_opaque(p);
    cr_assert_eq(capture_plan_sent(p, e, 0, &too_large, &a), CAPTURE_SENT);
    return opaque;
}

/* ---- confirming ------------------------------------------------------------ */

Test(capture_plan, a_transaction_without_events_is_confirmed_at_its_commit)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    cr_assert(capture_plan_begin(&p, 1));
    struct capture_acts a = capture_plan_commit_seen(&p, &e, 0x100);
    cr_assert_eq(p.confirmed, 0x100);
    cr_assert(a.what & CAP_DO_STATUS && a.what & CAP_DO_CONFIRMED);
    capture_plan_free(&p);
}

Test(capture_plan, a_transaction_is_confirmed_only_once_kafka_acknowledged_all_of_it)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    uint64_t m1 = send_one(&p, &e), m2 = send_one(&p, &e);
    capture_plan_commit_seen(&p, &e, 0x200);
    cr_assert_eq(p.confirmed, 0);
    capture_plan_report(&p, &e, m1, true);
    cr_assert_eq(p.confirmed, 0, "one message of two is not the transaction");
    struct capture_acts a = capture_plan_report(&p, &e, m2, true);
    cr_assert_eq(p.confirmed, 0x200);
    cr_assert_eq(a.published, 1);
    capture_plan_free(&p);
}

Test(capture_plan, a_later_transaction_acknowledged_first_waits_for_the_earlier_one)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    uint64_t m1 = send_one(&p, &e);
    capture_plan_commit_seen(&p, &e, 0x100);
    capture_plan_begin(&p, 2);
    uint64_t m2 = send_one(&p, &e);
    capture_plan_commit_seen(&p, &e, 0x200);
    capture_plan_report(&p, &e, m2, true);
    cr_assert_eq(p.confirmed, 0);
    capture_plan_report(&p, &e, m1, true);
    cr_assert_eq(p.confirmed, 0x200);
    capture_plan_free(&p);
}

Test(capture_plan, a_keepalive_confirms_the_servers_position_when_nothing_waits)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    struct capture_acts a = capture_plan_keepalive(&p, 0x500, false);
    cr_assert_eq(p.confirmed, 0x500);
    cr_assert_eq(p.received, 0x500);
    cr_assert(a.what & CAP_DO_STATUS);
    capture_plan_free(&p);
}

Test(capture_plan, a_keepalive_confirms_nothing_past_an_unacknowledged_event)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    send_one(&p, &e);
    capture_plan_commit_seen(&p, &e, 0x100);
    struct capture_acts a = capture_plan_keepalive(&p, 0x500, false);
    cr_assert_eq(p.confirmed, 0);
    cr_assert_eq(a.what & CAP_DO_STATUS, 0u, "nothing to say unless asked");
    a = capture_plan_keepalive(&p, 0x600, true);
    cr_assert_eq(p.confirmed, 0);
    cr_assert(a.what & CAP_DO_STATUS, "the server asked for a reply");
    capture_plan_free(&p);
}

Test(capture_plan, a_keepalive_inside_a_transaction_confirms_nothing)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    capture_plan_keepalive(&p, 0x80, false);
    cr_assert_eq(p.confirmed, 0);
    capture_plan_free(&p);
}

Test(capture_plan, a_report_of_an_older_stream_confirms_nothing_of_the_new_one)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    uint64_t old = send_one(&p, &e);
    capture_plan_lost(&p, &e, false);
    struct capture_acts a = capture_plan_report(&p, &e, old, false);
    cr_assert(a.what & CAP_DO_STEP, "a restart waited for it");
    e.now_ms = p.restart_at_ms;
    cr_assert(capture_plan_step(&p, &e).what & CAP_DO_START);
    capture_plan_started(&p, &e, true);
    capture_plan_streaming(&p);
    /* the new stream numbers its transactions from the start again */
    capture_plan_begin(&p, 1);
    send_one(&p, &e);
    capture_plan_commit_seen(&p, &e, 0x100);
    capture_plan_report(&p, &e, old, true); /* a duplicate report of the old message */
    cr_assert_eq(p.confirmed, 0);
    cr_assert_eq(p.unacked, 1);
    capture_plan_free(&p);
}

Test(capture_plan, an_event_kept_as_a_dead_row_is_confirmed_once_recorded)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    unsigned gen;
    uint64_t seq;
    capture_plan_dead_queued(&p, &gen, &seq);
    capture_plan_commit_seen(&p, &e, 0x100);
    cr_assert_eq(p.confirmed, 0);
    capture_plan_dead_recorded(&p, &e, gen + 1, seq);
    cr_assert_eq(p.confirmed, 0, "a record of another stream confirms nothing of this one");
    capture_plan_dead_recorded(&p, &e, gen, seq);
    cr_assert_eq(p.confirmed, 0x100);
    capture_plan_free(&p);
}

/* ---- the Kafka transaction -------------------------------------------------- */

Test(capture_plan, with_transactions_acknowledgements_confirm_nothing_until_the_commit)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    uint64_t m = send_one(&p, &e);
    capture_plan_commit_seen(&p, &e, 0x100);
    capture_plan_report(&p, &e, m, true);
    cr_assert_eq(p.confirmed, 0);
    struct capture_acts a = capture_plan_idle(&p, &e);
    cr_assert(a.what & CAP_DO_COMMIT);
    cr_assert(p.committing && p.txn_msgs == 0);
    a = capture_plan_committed(&p, &e, true);
    cr_assert_eq(p.confirmed, 0x100);
    cr_assert_eq(a.published, 1);
    cr_assert(a.what & CAP_DO_DRAIN_KICK, "what was read ahead meanwhile goes now");
    capture_plan_free(&p);
}

Test(capture_plan, half_a_source_transaction_is_not_committed_when_idle)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    send_one(&p, &e);
    cr_assert_eq(capture_plan_idle(&p, &e).what & CAP_DO_COMMIT, 0u);
    capture_plan_commit_seen(&p, &e, 0x100);
    cr_assert(capture_plan_idle(&p, &e).what & CAP_DO_COMMIT);
    capture_plan_free(&p);
}

Test(capture_plan, an_aborted_transaction_confirms_nothing_and_restarts_after_a_back_off)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    send_one(&p, &e);
    capture_plan_commit_seen(&p, &e, 0x100);
    capture_plan_idle(&p, &e);
    struct capture_acts a = capture_plan_committed(&p, &e, false);
    cr_assert_eq(p.confirmed, 0);
    cr_assert(a.what & CAP_DO_CLOSE && a.what & CAP_DO_STEP);
    cr_assert_eq(p.state, CAPTURE_OFF);
    cr_assert_gt(p.restart_at_ms, e.now_ms);
    capture_plan_free(&p);
}

Test(capture_plan, a_full_kafka_transaction_is_committed_before_the_next_message)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    struct capture_acts a = { 0 };
    cr_assert(capture_plan_admit(&p, &e, &a));
    p.txn_msgs = CAPTURE_TXN_MAX_MSGS;
    p.n_open = 0;
    cr_assert_not(capture_plan_admit(&p, &e, &a), "the message waits for the commit");
    cr_assert(a.what & CAP_DO_COMMIT);
    cr_assert_not(capture_plan_admit(&p, &e, &a), "nothing goes into a committing transaction");
    capture_plan_free(&p);
}

Test(capture_plan, a_failed_delivery_dooms_the_transaction_which_is_committed_to_abort)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    uint64_t m = send_one(&p, &e);
    struct capture_acts a = capture_plan_report(&p, &e, m, false);
    cr_assert(a.what & CAP_DO_COMMIT);
    cr_assert_eq(a.what & CAP_DO_CLOSE, 0u, "the abort ends the stream, not the report");
    capture_plan_free(&p);
}

/* A stream lost in the middle of a source transaction: the next one waits
 * for what the open Kafka transaction holds of it, which is committed. */
Test(capture_plan, a_stream_lost_with_messages_in_the_kafka_transaction_commits_them)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    send_one(&p, &e);
    capture_plan_lost(&p, &e, false);
    e.now_ms = p.restart_at_ms;
    struct capture_acts a = capture_plan_step(&p, &e);
    cr_assert(a.what & CAP_DO_COMMIT);
    cr_assert_eq(a.what & CAP_DO_START, 0u, "the commit first");
    e.txn = PRODUCER_TXN_BUSY;
    capture_plan_committed(&p, &e, true);
    cr_assert_eq(p.confirmed, 0, "half a source transaction confirms nothing");
    e.txn = PRODUCER_TXN_OPEN;
    cr_assert(capture_plan_step(&p, &e).what & CAP_DO_START);
    capture_plan_free(&p);
}

/* Messages whose Kafka transaction ended without the plan (or died with its
 * producer) are in none: committing the producer's empty one would confirm
 * them. */
Test(capture_plan, messages_no_kafka_transaction_holds_are_forgotten_not_committed)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    send_one(&p, &e);
    capture_plan_commit_seen(&p, &e, 0x100);
    capture_plan_fail(&p, &e, "the kafka producer failed");
    e.txn_empty = true; /* a new producer */
    e.now_ms = p.restart_at_ms;
    struct capture_acts a = capture_plan_step(&p, &e);
    cr_assert_eq(a.what & CAP_DO_COMMIT, 0u);
    cr_assert(a.what & CAP_DO_START, "the next stream sends them again");
    cr_assert_eq(p.confirmed, 0);
    capture_plan_free(&p);
}

/* ---- handing messages to the producer --------------------------------------- */

Test(capture_plan, a_failed_delivery_without_transactions_restarts_the_stream)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    uint64_t m = send_one(&p, &e);
    struct capture_acts a = capture_plan_report(&p, &e, m, false);
    cr_assert(a.what & CAP_DO_CLOSE && a.what & CAP_DO_STEP);
    cr_assert_str_eq(a.why, "a delivery failed");
    cr_assert_eq(p.confirmed, 0);
    capture_plan_free(&p);
}

Test(capture_plan, a_full_queue_waits_for_a_report_and_then_reads_on)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    uint64_t m = send_one(&p, &e);
    struct capture_acts a = { 0 };
    bool too_large;
    cr_assert_eq(capture_plan_sent(&p, &e, -ENOBUFS, &too_large, &a), CAPTURE_SEND_LATER);
    cr_assert_not(too_large);
    cr_assert(p.queue_full);
    a = capture_plan_report(&p, &e, m, true);
    cr_assert(a.what & CAP_DO_RESUME);
    cr_assert_not(p.queue_full);
    capture_plan_free(&p);
}

/* A topic right refused (librdkafka fails the produce at once with -EACCES)
 * refuses every event of the topic: none is poison. The stream stops, with
 * nothing of the event confirmed, and starts again from the confirmed
 * position once the producer to be replaced (the back-off) is, at once:
 * the producer's back-off paces the retries, not a second one of the stream. */
Test(capture_plan, a_refused_topic_right_stops_the_stream_without_poison)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    struct capture_acts a = { 0 };
    bool too_large;
    cr_assert_eq(capture_plan_sent(&p, &e, -EACCES, &too_large, &a), CAPTURE_SEND_DENIED);
    cr_assert(a.what & CAP_DO_CLOSE);
    cr_assert_eq(p.state, CAPTURE_OFF);
    cr_assert_eq(p.confirmed, 0);
    e.producer_fatal = true; /* the daemon renews the producer after the back-off */
    cr_assert_not(capture_plan_step(&p, &e).what & CAP_DO_START);
    e.producer_fatal = false;
    cr_assert(capture_plan_step(&p, &e).what & CAP_DO_START,
              "the stream waits on a back-off of its own after the producer's");
    capture_plan_free(&p);
}

/* The rule polling has: a message a queue with nothing in it cannot take
 * never will be taken; waiting for a report that never comes would stall. */
Test(capture_plan, a_message_too_large_for_an_empty_queue_is_poison)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    struct capture_acts a = { 0 };
    bool too_large;
    cr_assert_eq(capture_plan_sent(&p, &e, -ENOBUFS, &too_large, &a), CAPTURE_SEND_POISON);
    cr_assert(too_large);
    cr_assert_eq(capture_plan_sent(&p, &e, -EINVAL, &too_large, &a), CAPTURE_SEND_POISON);
    cr_assert_not(too_large);
    cr_assert_eq(capture_plan_sent(&p, &e, -EIO, &too_large, &a), CAPTURE_SEND_LATER,
                 "an unusable producer is nobody's fault");
    capture_plan_free(&p);
}

Test(capture_plan, poison_halts_under_halt_or_without_dead_row_columns)
{
    cr_assert(capture_plan_poison_halts(true, true));
    cr_assert(capture_plan_poison_halts(false, false));
    cr_assert_not(capture_plan_poison_halts(false, true));
}

Test(capture_plan, a_halt_commits_what_came_before_the_event_at_fault)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    send_one(&p, &e);
    struct capture_acts a = capture_plan_halt(&p, &e);
    cr_assert(a.what & CAP_DO_COMMIT);
    e.halted = true;
    cr_assert_eq(capture_plan_step(&p, &e).what, 0u, "halted, the stream stays where it is");
    cr_assert_not(capture_plan_settled(&p, &e), "the commit is awaited");
    capture_plan_committed(&p, &e, true);
    cr_assert(capture_plan_settled(&p, &e), "halted, the half-read transaction is not awaited");
    capture_plan_free(&p);
}

/* ---- producing ----------------------------------------------------------------- */

Test(capture_plan, only_a_leader_with_a_usable_transaction_produces)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    cr_assert(capture_plan_may_produce(&p, &e));
    e.leader = false;
    cr_assert_not(capture_plan_may_produce(&p, &e));
    e = leader_env(PRODUCER_TXN_OPEN);
    e.txn_doomed = true;
    cr_assert_not(capture_plan_may_produce(&p, &e));
    e = leader_env(PRODUCER_TXN_BUSY);
    cr_assert_not(capture_plan_may_produce(&p, &e));
    e = leader_env(PRODUCER_TXN_OPEN);
    p.committing = true;
    cr_assert_not(capture_plan_may_produce(&p, &e));
    capture_plan_free(&p);
}

Test(capture_plan, stopping_finishes_the_source_transaction_being_read)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    e.stopping = true;
    cr_assert_not(capture_plan_may_produce(&p, &e), "between transactions: nothing new");
    capture_plan_begin(&p, 1);
    cr_assert(capture_plan_may_produce(&p, &e), "inside one: its rest");
    struct capture_acts a = capture_plan_step(&p, &e);
    cr_assert(a.what & CAP_DO_RESUME);
    cr_assert_eq(a.what & (CAP_DO_END | CAP_DO_CLOSE), 0u);
    capture_plan_free(&p);
}

/* ---- the stream's life ------------------------------------------------------------ */

Test(capture_plan, stopping_ends_the_stream_once_kafka_holds_everything)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    uint64_t m = send_one(&p, &e);
    capture_plan_commit_seen(&p, &e, 0x100);
    e.stopping = true;
    cr_assert_eq(capture_plan_step(&p, &e).what & CAP_DO_END, 0u, "a report is awaited");
    capture_plan_report(&p, &e, m, true);
    cr_assert(capture_plan_step(&p, &e).what & CAP_DO_END);
    capture_plan_ended(&p, &e, true);
    cr_assert_eq(p.state, CAPTURE_ENDING);
    cr_assert_not(capture_plan_settled(&p, &e), "the server has not closed it yet");
    struct capture_acts a = capture_plan_lost(&p, &e, false);
    cr_assert_eq(p.state, CAPTURE_OFF);
    cr_assert_eq(p.failures, 0u, "ended as asked: no failure");
    cr_assert(a.what & CAP_DO_STEP);
    cr_assert(capture_plan_settled(&p, &e));
    cr_assert_eq(p.confirmed, 0x100);
    capture_plan_free(&p);
}

Test(capture_plan, a_lost_leadership_lets_the_slot_go_at_once)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    send_one(&p, &e);
    e.leader = false;
    struct capture_acts a = capture_plan_step(&p, &e);
    cr_assert(a.what & CAP_DO_CLOSE && a.what & CAP_DO_COMMIT);
    cr_assert_str_eq(a.why, "no longer the leader");
    cr_assert_eq(p.restart_at_ms, e.now_ms, "no back-off: only the lock is waited for");
    capture_plan_free(&p);
}

Test(capture_plan, a_restart_waits_for_what_the_last_stream_sent)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_begin(&p, 1);
    uint64_t m = send_one(&p, &e);
    capture_plan_fail(&p, &e, "unreadable replication message");
    e.now_ms = p.restart_at_ms;
    cr_assert_eq(capture_plan_step(&p, &e).what & CAP_DO_START, 0u);
    capture_plan_report(&p, &e, m, true);
    unsigned gen = p.gen;
    cr_assert(capture_plan_step(&p, &e).what & CAP_DO_START);
    cr_assert_eq(p.gen, gen + 1, "reports of the old stream are told apart");
    cr_assert_not(p.in_txn);
    capture_plan_free(&p);
}

/* A failover whose promoted server has no slot, or one that starts past what
 * was confirmed: no stream starts there until the gap is dealt with. */
Test(capture_plan, no_stream_starts_on_a_server_that_left_a_gap)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_fail(&p, &e, "replication stream lost");
    e.now_ms = p.restart_at_ms;
    e.server_gap = true;
    for (int i = 0; i < 3; i++, e.now_ms += CAPTURE_RETRY_MAX_MS)
        cr_assert_eq(capture_plan_step(&p, &e).what & CAP_DO_START, 0u, "a stream started past the gap");
    cr_assert_eq(p.state, CAPTURE_OFF);
    e.server_gap = false;
    cr_assert(capture_plan_step(&p, &e).what & CAP_DO_START, "the stream does not start once the gap is gone");
    capture_plan_free(&p);
}

/* Reconciled after a failover: the stream starts from the new slot's own
 * position (0/0 asks for it), not from one confirmed on the old timeline. */
Test(capture_plan, a_reconciled_gap_starts_from_the_new_slot)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_keepalive(&p, 0x3000060, false);
    cr_assert_eq(p.confirmed, 0x3000060);
    capture_plan_fail(&p, &e, "replication stream lost");
    capture_plan_new_slot(&p);
    cr_assert_eq(p.confirmed, 0);
    e.now_ms = p.restart_at_ms;
    cr_assert(capture_plan_step(&p, &e).what & CAP_DO_START);
    capture_plan_free(&p);
}

/* The wal stream and polling's connection back off alike: plan_reconnect_delay. */
Test(capture_plan, failures_in_a_row_back_off_as_polling_reconnects)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    for (unsigned k = 0; k < 8; k++) {
        e.random = 12345 + k;
        capture_plan_fail(&p, &e, "x");
        cr_assert_eq(p.restart_at_ms - e.now_ms,
                     plan_reconnect_delay(k, CAPTURE_RETRY_MS, CAPTURE_RETRY_MAX_MS, e.random));
        capture_plan_started(&p, &e, true);
    }
    cr_assert_leq(p.restart_at_ms - e.now_ms, CAPTURE_RETRY_MAX_MS);
    capture_plan_streaming(&p);
    cr_assert_eq(p.failures, 0u, "a stream that starts ends the series");
    capture_plan_free(&p);
}

Test(capture_plan, a_fatal_producer_restarts_the_stream)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    e.txn = PRODUCER_TXN_DEAD;
    e.producer_fatal = true;
    struct capture_acts a = capture_plan_step(&p, &e);
    cr_assert(a.what & CAP_DO_CLOSE);
    cr_assert_str_eq(a.why, "the kafka producer failed");
    cr_assert_eq(p.failures, 1u);
    capture_plan_free(&p);
}

Test(capture_plan, a_busy_slot_is_noted_only_for_the_leader)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_lost(&p, &e, true);
    cr_assert(p.slot_busy);
    capture_plan_taking_over(&p);
    cr_assert_not(p.slot_busy);
    e.leader = false;
    capture_plan_lost(&p, &e, true);
    cr_assert_not(p.slot_busy);
    capture_plan_free(&p);
}

Test(capture_plan, status_updates_and_heartbeats_come_on_time)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    capture_plan_status_sent(&p, e.now_ms);
    capture_plan_heartbeat_sent(&p, e.now_ms);
    cr_assert_not(capture_plan_status_due(&p, e.now_ms + CAPTURE_STATUS_EVERY_MS - 1));
    cr_assert(capture_plan_status_due(&p, e.now_ms + CAPTURE_STATUS_EVERY_MS));
    cr_assert_not(capture_plan_heartbeat_due(&p, e.now_ms + 999, 1000));
    cr_assert(capture_plan_heartbeat_due(&p, e.now_ms + 1000, 1000));
    cr_assert_not(capture_plan_heartbeat_due(&p, e.now_ms + 1000, 0), "0: no heartbeat");
    capture_plan_free(&p);
}

Test(capture_plan, a_refusal_of_the_server_says_what_to_do)
{
    char out[512];
    capture_explain("slot does not exist", "42704", out, sizeof out);
    cr_assert(strstr(out, "outbox-relay migrate"));
    capture_explain("busy", "55006", out, sizeof out);
    cr_assert(strstr(out, "another client reads the slot"));
    capture_explain("other", "", out, sizeof out);
    cr_assert_str_eq(out, "other");
}

Test(capture_plan, the_lag_is_the_age_of_the_oldest_transaction_not_confirmed)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OFF);
    struct capture_plan p = streaming(&e);
    cr_assert_eq(capture_plan_lag(&p, 1000.0, 0), 0.0, "nothing waits");
    capture_plan_begin(&p, 400 * 1000000LL);
    send_one(&p, &e);
    cr_assert_float_eq(capture_plan_lag(&p, 1000.0, 0), 600.0, 1e-6);
    cr_assert_eq(capture_plan_lag(&p, 100.0, 0), 0.0, "a clock behind is no lag");
    capture_plan_free(&p);
}

/* ---- what the server answers (capture_slot.c) and frames read ahead (capture_ahead.c) ---- */

Test(capture_plan, a_dead_row_refused_for_good_halts_and_a_passing_failure_does_not)
{
    char reason[256];
    cr_assert_not(capture_dead_refused("08006", "id", "bad topic", reason, sizeof reason));
    cr_assert_not(capture_dead_refused("40001", "id", "bad topic", reason, sizeof reason));
    cr_assert(capture_dead_refused("42501", "id", "bad topic", reason, sizeof reason));
    cr_assert(strstr(reason, "the role needs INSERT and UPDATE"), "%s", reason);
    cr_assert(capture_dead_refused("42703", "id", "bad topic", reason, sizeof reason));
}

Test(capture_plan, the_slot_row_is_read_with_what_is_wrong)
{
    struct stats_slot s = { 0 };
    const char *v[SLOT_NCOLS] = { 0 };
    struct capture_names n = { "outbox_relay", "outbox_pub", "public", "outbox" };
    v[SLOT_EXISTS] = "f";
    capture_slot_read(&s, v, &n, 5.0, true);
    cr_assert_not(s.known);
    cr_assert(strstr(s.problem, "does not exist"));
    v[SLOT_EXISTS] = v[SLOT_DATABASE_OK] = v[SLOT_PUBLICATION_OK] = "t";
    v[SLOT_CONFIRMED_LSN] = "0/16B3748";
    v[SLOT_LAG_BYTES] = "42";
    capture_slot_read(&s, v, &n, 6.0, false);
    cr_assert(strstr(s.problem, "does not exist"), "a leader not streaming keeps its problem");
    capture_slot_read(&s, v, &n, 7.0, true);
    cr_assert_str_eq(s.problem, "");
    cr_assert_eq(s.confirmed_lsn, 0x16B3748);
    cr_assert_eq(s.lag_bytes, 42);
    v[SLOT_WAL_STATUS] = "lost";
    capture_slot_read(&s, v, &n, 8.0, true);
    cr_assert(strstr(s.problem, "invalidated"));
}

Test(capture_plan, retention_is_bounded_by_the_last_confirmed_commit_or_the_retention)
{
    char bound[64];
    cr_assert_not(capture_retention_bound(true, 0, 1000.0, 0, bound, sizeof bound),
                  "nothing confirmed yet: nothing deleted");
    cr_assert(capture_retention_bound(true, 86400.5, 1e9, 0, bound, sizeof bound));
    cr_assert_str_eq(bound, "1970-01-02 00:00:00.500000+00");
    cr_assert(capture_retention_bound(false, 0, 86400.0 * 2, 86400000L, bound, sizeof bound));
    cr_assert_str_eq(bound, "1970-01-02 00:00:00.000000+00");
}

Test(capture_plan, frames_read_ahead_come_back_in_order_within_their_budget)
{
    struct capture_ahead q = { 0 };
    const uint8_t a[] = "first", b[] = "second";
    cr_assert(capture_ahead_push(&q, a, sizeof a));
    cr_assert(capture_ahead_push(&q, b, sizeof b));
    const uint8_t *buf;
    size_t len;
    cr_assert(capture_ahead_peek(&q, &buf, &len));
    cr_assert(len == sizeof a && memcmp(buf, a, len) == 0);
    capture_ahead_pop(&q);
    cr_assert(capture_ahead_peek(&q, &buf, &len));
    cr_assert(len == sizeof b && memcmp(buf, b, len) == 0);
    capture_ahead_pop(&q);
    cr_assert_not(capture_ahead_left(&q));
    static uint8_t big[CAPTURE_AHEAD_BYTES];
    cr_assert(capture_ahead_push(&q, big, sizeof big));
    cr_assert_not(capture_ahead_push(&q, a, 1), "over the budget: reading stops");
    capture_ahead_clear(&q);
    cr_assert_not(capture_ahead_left(&q));
    capture_ahead_free(&q);
}

/* A Kafka transaction of @p n messages of one source transaction, committing. */
static void committing(struct capture_plan *p, const struct capture_env *e, long n, uint64_t end)
{
    capture_plan_begin(p, 1);
    for (long i = 0; i < n; i++)
        send_one(p, e);
    capture_plan_commit_seen(p, e, end);
    cr_assert(capture_plan_idle(p, e).what & CAP_DO_COMMIT);
}

Test(capture_plan, a_frame_is_taken_in_order_behind_the_frames_read_ahead)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    cr_assert_eq(capture_plan_route(&p, false, e.now_ms), CAPTURE_TAKE);
    cr_assert_eq(capture_plan_route(&p, true, e.now_ms), CAPTURE_OFFER_LATER,
                 "frames read ahead and not yet taken go first");
    capture_plan_free(&p);
}

Test(capture_plan, during_a_backlogs_commit_the_socket_is_read_ahead)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    committing(&p, &e, CAPTURE_TRICKLE_MSGS, 0x100);
    cr_assert_eq(capture_plan_route(&p, false, e.now_ms), CAPTURE_READ_AHEAD,
                 "the walsender is not held back by the commit's round trips");
    cr_assert_eq(capture_plan_route(&p, true, e.now_ms), CAPTURE_READ_AHEAD, "behind the others");
    capture_plan_committed(&p, &e, true);
    cr_assert_eq(capture_plan_route(&p, false, e.now_ms), CAPTURE_TAKE);
    capture_plan_free(&p);
}

Test(capture_plan, during_a_trickles_commit_the_socket_is_left_unread_until_it_ends)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    committing(&p, &e, CAPTURE_TRICKLE_MSGS - 1, 0x100);
    cr_assert_eq(capture_plan_route(&p, false, e.now_ms), CAPTURE_OFFER_LATER,
                 "a frame per wake-up would cost more than the commit");
    e.now_ms += CAPTURE_COMMIT_EVERY_MS;
    struct capture_acts a = capture_plan_committed(&p, &e, true);
    cr_assert(a.what & CAP_DO_DRAIN_KICK, "the socket is read again once the commit ended");
    cr_assert_eq(capture_plan_route(&p, false, e.now_ms), CAPTURE_TAKE);
    capture_plan_free(&p);
}

Test(capture_plan, a_trickles_next_commit_waits_until_its_time_has_come)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    committing(&p, &e, 3, 0x100);
    uint64_t began = e.now_ms;
    e.now_ms += 1;
    cr_assert(capture_plan_committed(&p, &e, true).what & CAP_DO_CONFIRMED);
    cr_assert_eq(capture_plan_route(&p, false, e.now_ms), CAPTURE_REST,
                 "the next events wait in the socket for the next commit's time");
    cr_assert_eq(capture_plan_rest_ms(&p, e.now_ms), CAPTURE_COMMIT_EVERY_MS - 1,
                 "counted from when the last commit began");
    cr_assert_eq(capture_plan_route(&p, true, e.now_ms), CAPTURE_OFFER_LATER,
                 "frames read ahead go first");
    e.now_ms = began + CAPTURE_COMMIT_EVERY_MS;
    cr_assert_eq(capture_plan_rest_ms(&p, e.now_ms), 0);
    cr_assert_eq(capture_plan_route(&p, false, e.now_ms), CAPTURE_TAKE);
    capture_plan_free(&p);
}

Test(capture_plan, a_backlogs_next_commit_and_a_restarted_streams_first_do_not_wait)
{
    struct capture_env e = leader_env(PRODUCER_TXN_OPEN);
    struct capture_plan p = streaming(&e);
    committing(&p, &e, CAPTURE_TRICKLE_MSGS, 0x100);
    e.now_ms += 1;
    capture_plan_committed(&p, &e, true);
    cr_assert_eq(capture_plan_route(&p, false, e.now_ms), CAPTURE_TAKE,
                 "under a backlog transactions are as large as they come");
    committing(&p, &e, 3, 0x200);
    capture_plan_committed(&p, &e, true);
    cr_assert_eq(capture_plan_route(&p, false, e.now_ms), CAPTURE_REST);
    e.leader = false; /* the lock lost and taken again within the same millisecond */
    cr_assert(capture_plan_step(&p, &e).what & CAP_DO_CLOSE);
    e.leader = true;
    cr_assert(capture_plan_step(&p, &e).what & CAP_DO_START);
    capture_plan_started(&p, &e, true);
    capture_plan_streaming(&p);
    cr_assert_eq(capture_plan_route(&p, false, e.now_ms), CAPTURE_TAKE,
                 "a new stream reads at once");
    capture_plan_free(&p);
}
