/* test_capture_recover.c — core/capture_recover.c: whether a relay can close
 * a failover's gap from its table, when the leader starts a reconcile and
 * tries a failed one again, what it reads and says meanwhile, and what its
 * end changes. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/capture_recover.h"

/* A watch a failover left blocked: the slot is missing on timeline 2. */
static struct failover_watch blocked(void)
{
    struct failover_watch w = {.timeline = 1, .confirmed = 0x3000060, .checked = true};
    struct failover_news n = failover_watch_seen(&w, "000000020000000000000005", false, 0,
                                                 0x3000060, "s1");
    cr_assert(n.gap);
    return w;
}

Test(capture_recover, reconcile_needs_a_table_that_keeps_every_event_and_says_so_at_start)
{
    struct capture_recover c = {0};
    cr_assert_not(capture_recover_setup(&c, true, false, false, false));
    cr_assert(c.reconcile);
    cr_assert_str_empty(c.no_reconcile);
    cr_assert_str_eq(capture_recover_mode(&c), "reconcile");

    cr_assert(capture_recover_setup(&c, true, true, false, false), "asked for and impossible");
    cr_assert_not(c.reconcile);
    cr_assert(strstr(c.no_reconcile, "on_sent = delete"), "%s", c.no_reconcile);
    cr_assert_str_eq(capture_recover_mode(&c), "stop");

    cr_assert_not(capture_recover_setup(&c, false, false, true, false), "stop: nothing to say");
    cr_assert_not(c.reconcile);
    cr_assert_str_empty(c.no_reconcile, "stop was asked for: no reason why reconcile is not");
}

Test(capture_recover, only_a_leader_reconciles_a_gap_one_at_a_time)
{
    struct capture_recover c = {0};
    capture_recover_setup(&c, true, false, false, false);
    struct failover_watch w = {.timeline = 1, .checked = true};
    cr_assert_not(capture_recover_due(&c, &w, true, false, 0), "no gap");
    w = blocked();
    cr_assert(capture_recover_due(&c, &w, true, false, 0));
    cr_assert_not(capture_recover_due(&c, &w, false, false, 0), "not leading, or stopping");
    cr_assert_not(capture_recover_due(&c, &w, true, true, 0), "one is running");
    capture_recover_setup(&c, false, false, false, false);
    cr_assert_not(capture_recover_due(&c, &w, true, false, 0), "slot_recovery = stop");
    capture_recover_setup(&c, true, false, false, true);
    cr_assert_not(capture_recover_due(&c, &w, true, false, 0), "the table cannot prove it");
}

Test(capture_recover, a_failed_reconcile_is_tried_again_after_a_while)
{
    struct capture_recover c = {0};
    capture_recover_setup(&c, true, false, false, false);
    struct failover_watch w = blocked();
    capture_recover_failed(&c, 50000);
    cr_assert_not(capture_recover_due(&c, &w, true, false, 50000 + CAPTURE_RECOVER_RETRY_MS - 1));
    cr_assert(capture_recover_due(&c, &w, true, false, 50000 + CAPTURE_RECOVER_RETRY_MS));
}

Test(capture_recover, it_reads_from_before_the_last_confirmed_commit_and_says_so)
{
    char since[40], problem[384];
    /* 2026-01-02T03:04:05Z, and the margin before it */
    capture_recover_since(1767323045.0 + FAILOVER_RECOVERY_MARGIN_S, 100.0, since, sizeof since);
    cr_assert_str_eq(since, "2026-01-02T03:04:05Z");
    capture_recover_since(0, 1767323045.0 + FAILOVER_RECOVERY_MARGIN_S, since, sizeof since);
    cr_assert_str_eq(since, "2026-01-02T03:04:05Z", "nothing confirmed: from the start");
    capture_recover_problem(since, problem, sizeof problem);
    cr_assert(strstr(problem, "reconciling"), "%s", problem);
    cr_assert(strstr(problem, "since 2026-01-02T03:04:05Z"), "%s", problem);
}

Test(capture_recover, a_closed_gap_is_counted_and_streams_from_the_new_slot)
{
    struct stats_slot s = {.recoveries_total = 1, .recovered_events_total = 5};
    struct failover_watch w = blocked();
    struct capture_plan p;
    capture_plan_init(&p);
    p.confirmed = p.received = p.acks.confirmed = 0x3000060;
    capture_recover_done(&s, &w, &p, 7, 1767323045.0);
    cr_assert_eq(s.recoveries_total, 2);
    cr_assert_eq(s.recovered_events_total, 12);
    cr_assert_eq(s.last_recovery_events, 7);
    cr_assert_eq(s.last_recovery_time, 1767323045.0);
    cr_assert_not(failover_watch_blocks(&w, 0));
    cr_assert_eq(p.confirmed, 0, "a position of the old timeline means nothing on the new one");
    cr_assert_eq(p.received, 0);
    capture_plan_free(&p);
}

Test(capture_recover, the_table_is_read_in_the_slots_snapshot_only_when_it_was_exported)
{
    cr_assert_eq(capture_recover_slot_made(true, "00000003-00000002-1", NULL),
                 RECOVER_SLOT_SNAPSHOT);
    cr_assert_eq(capture_recover_slot_made(true, "", NULL), RECOVER_SLOT_MADE);
    cr_assert_eq(capture_recover_slot_made(true, NULL, NULL), RECOVER_SLOT_MADE);
    /* duplicate_object: there already, no snapshot to share, nothing to make */
    cr_assert_eq(capture_recover_slot_made(false, NULL, "42710"), RECOVER_SLOT_EXISTED);
    /* anything else, or no answer at all: made by the SQL function, as before */
    cr_assert_eq(capture_recover_slot_made(false, NULL, "42601"), RECOVER_SLOT_BY_SQL);
    cr_assert_eq(capture_recover_slot_made(false, NULL, NULL), RECOVER_SLOT_BY_SQL);

    cr_assert_str_eq(capture_recover_table_read(RECOVER_SLOT_SNAPSHOT, true), "slot_snapshot");
    cr_assert_str_eq(capture_recover_table_read(RECOVER_SLOT_SNAPSHOT, false), "own_snapshot",
                     "the reading session refused it");
    cr_assert_str_eq(capture_recover_table_read(RECOVER_SLOT_EXISTED, false), "own_snapshot");
    cr_assert_str_eq(capture_recover_table_read(RECOVER_SLOT_BY_SQL, false), "own_snapshot");
}
