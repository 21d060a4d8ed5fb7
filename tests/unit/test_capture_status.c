/* test_capture_status.c — what the capture plan tells the rest of the relay
 * and asks of the main connection, without PostgreSQL or a broker: the
 * planner's view of the stream, when the slot's row is read, how long a
 * taken-over slot is left to its old reader. */
#include <criterion/criterion.h>

#include "core/capture_plan.h"
#include "core/plan.h"

static struct capture_env leader_env(void)
{
    return (struct capture_env){ .now_ms = 1000000, .leader = true, .txn = PRODUCER_TXN_OFF };
}

static struct capture_plan streaming(const struct capture_env *e)
{
    struct capture_plan p;
    capture_plan_init(&p);
    cr_assert(capture_plan_step(&p, e).what & CAP_DO_START);
    capture_plan_started(&p, e, true);
    capture_plan_streaming(&p);
    cr_assert_eq(p.state, CAPTURE_STREAMING);
    return p;
}

Test(capture_status, the_planner_is_told_what_the_stream_needs)
{
    struct capture_env e = leader_env();
    struct capture_plan p;
    capture_plan_init(&p);
    struct plan_state s = { .n_hot = 3 };
    capture_plan_status(&p, &e, 0, false, &s);
    cr_assert(s.capture_wal);
    cr_assert_eq(s.n_hot, 0, "nothing is claimed or marked");
    cr_assert_not(s.capture_streaming);
    cr_assert_not(s.capture_unsettled, "a stream never started waits for nothing");
    cr_assert_not(s.heartbeat_due);
    cr_assert_not(s.dead_due);
    capture_plan_free(&p);

    p = streaming(&e);
    capture_plan_heartbeat_sent(&p, e.now_ms);
    capture_plan_status(&p, &e, 1000, true, &s);
    cr_assert(s.capture_streaming);
    cr_assert(s.capture_unsettled, "a shutdown waits for a running stream to end");
    cr_assert(s.dead_due);
    cr_assert_not(s.heartbeat_due);
    e.now_ms += 1000;
    capture_plan_status(&p, &e, 1000, false, &s);
    cr_assert(s.heartbeat_due);
    capture_plan_status(&p, &e, 0, false, &s);
    cr_assert_not(s.heartbeat_due, "0: no heartbeat");
    capture_plan_free(&p);
}

Test(capture_status, the_slot_is_read_every_few_seconds_and_at_once_on_a_new_session)
{
    struct capture_env e = leader_env();
    struct capture_plan p;
    capture_plan_init(&p);
    struct plan_state s = { 0 };
    capture_plan_status(&p, &e, 0, false, &s);
    cr_assert(s.slot_query_due, "read before anything streams");
    capture_plan_slot_queried(&p, e.now_ms);
    e.now_ms += CAPTURE_SLOT_QUERY_EVERY_MS - 1;
    capture_plan_status(&p, &e, 0, false, &s);
    cr_assert_not(s.slot_query_due);
    e.now_ms++;
    capture_plan_status(&p, &e, 0, false, &s);
    cr_assert(s.slot_query_due);
    capture_plan_slot_queried(&p, e.now_ms);
    capture_plan_connected(&p);
    capture_plan_status(&p, &e, 0, false, &s);
    cr_assert(s.slot_query_due, "a new session may be on another server: its timeline first");
    capture_plan_free(&p);
}

Test(capture_status, a_slot_taken_over_is_streamed_from_once_its_reader_had_a_moment_to_exit)
{
    struct capture_env e = leader_env();
    struct capture_plan p = streaming(&e);
    capture_plan_lost(&p, &e, true);
    struct plan_state s = { 0 };
    capture_plan_status(&p, &e, 0, false, &s);
    cr_assert(s.slot_busy);
    capture_plan_taking_over(&p);
    capture_plan_status(&p, &e, 0, false, &s);
    cr_assert_not(s.slot_busy);
    capture_plan_taken_over(&p, e.now_ms);
    e.now_ms += CAPTURE_TAKE_OVER_WAIT_MS - 1;
    cr_assert_not(capture_plan_step(&p, &e).what & CAP_DO_START);
    e.now_ms++;
    cr_assert(capture_plan_step(&p, &e).what & CAP_DO_START,
              "the walsender's moment replaces the failure's back-off");
    capture_plan_free(&p);
}
