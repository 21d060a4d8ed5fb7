/* test_capture_status.c — what the capture tells the rest of the relay, the
 * server and the main connection, without PostgreSQL or a broker: the
 * planner's view of the stream, its status update, when its lag is shown,
 * when the slot's row is read and what readiness makes of it, how long a
 * taken-over slot is left to its old reader, what a lost stream is said to be. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/capture_plan.h"
#include "core/capture_slot.h"
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

Test(capture_status, a_lost_stream_is_said_and_a_refusal_explained_unless_it_ended_as_asked)
{
    char problem[384] = "kept";
    struct capture_loss l = capture_lost(CAPTURE_ENDING, "server closed the connection", "",
                                         problem, sizeof problem);
    cr_assert_null(l.say);
    cr_assert_not(l.busy);
    cr_assert_str_eq(problem, "kept");

    l = capture_lost(CAPTURE_STREAMING, "server closed the connection", "", problem, sizeof problem);
    cr_assert_str_eq(l.say, "replication stream lost");
    cr_assert_str_eq(problem, "kept", "a stream that ran and broke off is no refusal");

    l = capture_lost(CAPTURE_STREAMING, "slot is active", "55006", problem, sizeof problem);
    cr_assert_str_eq(l.say, "replication stream lost");
    cr_assert(l.busy);
    cr_assert(strstr(problem, "another client reads the slot"), "%s", problem);

    l = capture_lost(CAPTURE_STARTING, "could not connect", "", problem, sizeof problem);
    cr_assert_str_eq(l.say, "cannot stream from the replication slot");
    cr_assert_str_eq(problem, "could not connect", "a stream that never started says why");

    l = capture_lost(CAPTURE_STARTING, "slot does not exist", "42704", problem, sizeof problem);
    cr_assert_not(l.busy);
    cr_assert(strstr(problem, "outbox-relay migrate"), "%s", problem);
}

Test(capture_status, the_lag_is_shown_only_for_a_leader_relaying_from_an_open_stream)
{
    struct capture_env e = leader_env();
    struct capture_plan p;
    capture_plan_init(&p);
    cr_assert_not(capture_plan_lag_shown(&p, &e), "no stream");
    capture_plan_free(&p);
    p = streaming(&e);
    cr_assert(capture_plan_lag_shown(&p, &e));
    struct capture_env not_leading[] = { e, e, e, e, e };
    not_leading[0].leader = false;
    not_leading[1].stopping = true;
    not_leading[2].refused = true;
    not_leading[3].halted = true;
    not_leading[4].finished = true;
    for (size_t k = 0; k < sizeof not_leading / sizeof not_leading[0]; k++)
        cr_assert_not(capture_plan_lag_shown(&p, &not_leading[k]), "case %zu", k);
    capture_plan_free(&p);
}

/* The slot's row of a healthy slot on timeline @p walfile's. */
static void healthy_row(const char *v[SLOT_NCOLS], const char *walfile)
{
    for (int k = 0; k < SLOT_NCOLS; k++)
        v[k] = NULL;
    v[SLOT_EXISTS] = v[SLOT_DATABASE_OK] = v[SLOT_PUBLICATION_OK] = "t";
    v[SLOT_CONFIRMED_LSN] = "0/3000060";
    v[SLOT_WALFILE] = walfile;
}

Test(capture_status, a_slot_query_keeps_the_stream_s_problem_only_for_a_leader_not_streaming)
{
    struct capture_env e = leader_env();
    struct capture_names n = { "outbox_relay", "outbox_pub", "public", "outbox" };
    struct stats_slot s = { .problem = "replication stream lost" };
    struct failover_watch w = { 0 };
    struct capture_plan p;
    capture_plan_init(&p);
    const char *v[SLOT_NCOLS];
    healthy_row(v, "000000010000000000000003");
    struct failover_news news = capture_slot_seen(&s, v, &n, 5.0, &p, true, &w, false);
    cr_assert_eq(news.verdict, FAILOVER_NONE);
    cr_assert_str_eq(s.problem, "replication stream lost", "the leader's stream says why");
    cr_assert_eq(s.query_time, 5.0);
    capture_slot_seen(&s, v, &n, 6.0, &p, false, &w, false);
    cr_assert_str_empty(s.problem, "a relay that does not lead has no stream to speak of");
    snprintf(s.problem, sizeof s.problem, "replication stream lost");
    capture_plan_free(&p);
    p = streaming(&e);
    capture_slot_seen(&s, v, &n, 7.0, &p, true, &w, false);
    cr_assert_str_empty(s.problem, "streaming again");
    capture_plan_free(&p);
}

Test(capture_status, a_failover_gap_is_named_unless_a_reconcile_says_so_itself)
{
    struct capture_names n = { "outbox_relay", "outbox_pub", "public", "outbox" };
    struct stats_slot s = { 0 };
    struct failover_watch w = { .timeline = 1, .confirmed = 0x3000060, .checked = true };
    struct capture_plan p;
    capture_plan_init(&p);
    p.confirmed = 0x3000060;
    const char *v[SLOT_NCOLS];
    healthy_row(v, "000000020000000000000005");
    v[SLOT_EXISTS] = "f"; /* the slot did not follow the failover */
    struct failover_news news = capture_slot_seen(&s, v, &n, 5.0, &p, true, &w, true);
    cr_assert(news.gap);
    cr_assert(strstr(s.problem, "does not exist"), "%s", s.problem);
    news = capture_slot_seen(&s, v, &n, 6.0, &p, true, &w, false);
    cr_assert(news.gap);
    cr_assert_str_eq(s.problem, news.text);
    capture_plan_free(&p);
}

static uint64_t get_u64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return v;
}

Test(capture_status, a_status_update_reports_what_was_read_as_written_and_what_kafka_holds_as_flushed)
{
    struct capture_plan p;
    capture_plan_init(&p);
    p.received = 0x3000200;
    p.confirmed = 0x3000060;
    uint8_t msg[PGO_STATUS_UPDATE_LEN];
    /* 2000-01-01 (PostgreSQL's epoch) plus 1.5 s */
    cr_assert_eq(capture_plan_status_update(&p, 946684801.5, msg), PGO_STATUS_UPDATE_LEN);
    cr_assert_eq(msg[0], 'r');
    cr_assert_eq(get_u64(msg + 1), 0x3000200, "written: a stopping server waits for it");
    cr_assert_eq(get_u64(msg + 9), 0x3000060, "flushed: only what Kafka holds");
    cr_assert_eq(get_u64(msg + 17), 0x3000060, "applied");
    cr_assert_eq(get_u64(msg + 25), 1500000);
    cr_assert_eq(msg[33], 0, "no reply asked for");
    capture_plan_free(&p);
}
