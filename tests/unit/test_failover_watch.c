/* test_failover_watch.c — core/failover_watch.c: a new timeline with no slot,
 * with a slot past the relay's position, with one that followed. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/failover_watch.h"

Test(failover_watch, nothing_known_or_the_same_timeline_is_no_failover)
{
    struct failover_watch none = {0}, w = {.timeline = 1, .confirmed = 0x3000000};
    cr_assert_eq(failover_judge(&none, 2, false, 0), FAILOVER_NONE);
    cr_assert_eq(failover_judge(&w, 1, false, 0), FAILOVER_NONE);
    cr_assert_eq(failover_judge(&w, 0, false, 0), FAILOVER_NONE, "in recovery: not known");
}

Test(failover_watch, another_timeline_judges_the_slot)
{
    struct failover_watch w = {.timeline = 1, .confirmed = 0x3000000};
    cr_assert_eq(failover_judge(&w, 2, false, 0), FAILOVER_SLOT_MISSING);
    cr_assert_eq(failover_judge(&w, 2, true, 0x3000001), FAILOVER_GAP);
    cr_assert_eq(failover_judge(&w, 2, true, 0x3000000), FAILOVER_FOLLOWED);
    cr_assert_eq(failover_judge(&w, 2, true, 0x2000000), FAILOVER_FOLLOWED);
}

Test(failover_watch, timeline_of_a_wal_file_name)
{
    cr_assert_eq(failover_timeline_of("000000020000000000000003"), 2);
    cr_assert_eq(failover_timeline_of("0000001A0000000000000003"), 26);
    cr_assert_eq(failover_timeline_of("00000002"), 0);
    cr_assert_eq(failover_timeline_of(NULL), 0);
    cr_assert_eq(failover_timeline_of("zz0000020000000000000003"), 0);
}

Test(failover_watch, the_text_names_the_gap)
{
    struct failover_watch w = {.timeline = 1, .confirmed = 0x3000060};
    char out[512];
    failover_describe(FAILOVER_GAP, &w, 2, "s1", 0x4000000, out, sizeof out);
    cr_assert(strstr(out, "timeline 2") && strstr(out, "0/3000060") && strstr(out, "0/4000000") &&
              strstr(out, "\"s1\"") && strstr(out, "never relayed"), "%s", out);
    failover_describe(FAILOVER_SLOT_MISSING, &w, 2, "s1", 0, out, sizeof out);
    cr_assert(strstr(out, "is not on it") && strstr(out, "after 0/3000060"), "%s", out);
    failover_describe(FAILOVER_NONE, &w, 1, "s1", 0, out, sizeof out);
    cr_assert_str_empty(out);
}

Test(failover_watch, a_new_session_waits_for_its_first_slot_query_a_while)
{
    struct failover_watch w = {0};
    failover_watch_connected(&w, 1000);
    cr_assert(failover_watch_blocks(&w, 1000), "a stream could start before the timeline was read");
    cr_assert_not(failover_watch_blocks(&w, 1000 + FAILOVER_FIRST_QUERY_WAIT_MS),
                  "a failing slot query stops capture for good");
    struct failover_news n = failover_watch_seen(&w, "000000010000000000000003", true, 0x100, 0x200, "s1");
    cr_assert_eq(n.verdict, FAILOVER_NONE);
    cr_assert_null(n.say);
    cr_assert_not(failover_watch_blocks(&w, 1001));
    cr_assert_eq(w.timeline, 1u);
    cr_assert_eq(w.confirmed, 0x200u, "the position is the relay's, the slot being behind it");
}

Test(failover_watch, a_gap_blocks_until_a_restart_and_is_said_once)
{
    struct failover_watch w = {0};
    failover_watch_seen(&w, "000000010000000000000003", true, 0x3000000, 0x3000060, "s1");
    failover_watch_connected(&w, 5000); /* the session came back on the promoted server */
    struct failover_news n = failover_watch_seen(&w, "000000020000000000000004", false, 0, 0x3000060, "s1");
    cr_assert_eq(n.verdict, FAILOVER_SLOT_MISSING);
    cr_assert(n.gap && n.say && strstr(n.text, "is not on it"), "%s", n.text);
    cr_assert(failover_watch_blocks(&w, 1u << 30));
    n = failover_watch_seen(&w, "000000020000000000000004", false, 0, 0x3000060, "s1");
    cr_assert(n.gap, "the gap is forgotten on the next query");
    cr_assert_null(n.say, "the same gap is logged at every slot query");
    /* migrate made a slot on the new server: it starts after the position */
    n = failover_watch_seen(&w, "000000020000000000000004", true, 0x5000000, 0x3000060, "s1");
    cr_assert_eq(n.verdict, FAILOVER_GAP);
    cr_assert(n.gap && n.say, "a different gap is not said");
    cr_assert(failover_watch_blocks(&w, 1u << 30));
}

Test(failover_watch, a_slot_that_followed_streams_on)
{
    struct failover_watch w = {0};
    failover_watch_seen(&w, "000000010000000000000003", true, 0x3000000, 0x3000060, "s1");
    struct failover_news n = failover_watch_seen(&w, "000000020000000000000004", true, 0x3000060, 0, "s1");
    cr_assert_eq(n.verdict, FAILOVER_FOLLOWED);
    cr_assert(!n.gap && n.say);
    cr_assert_eq(w.timeline, 2u);
    cr_assert_not(failover_watch_blocks(&w, 1u << 30));
}

/* The slot query before the failover saw an older position than the relay
 * confirmed last; the standby synchronised the slot up to the later one. */
Test(failover_watch, a_position_confirmed_after_the_last_query_is_no_gap)
{
    struct failover_watch w = {0};
    failover_watch_seen(&w, "000000010000000000000003", true, 0x3000000, 0x3000060, "s1");
    struct failover_news n = failover_watch_seen(&w, "000000020000000000000004", true, 0x3000168,
                                                 0x3000168, "s1");
    cr_assert_eq(n.verdict, FAILOVER_FOLLOWED, "%s", n.text);
    cr_assert_not(failover_watch_blocks(&w, 1u << 30));
    /* A slot past even that is still a gap. */
    failover_watch_connected(&w, 0);
    n = failover_watch_seen(&w, "000000030000000000000005", true, 0x3000200, 0x3000168, "s1");
    cr_assert_eq(n.verdict, FAILOVER_GAP, "%s", n.text);
}

Test(failover_watch, a_gap_is_provable_only_from_a_table_that_keeps_every_event)
{
    char why[256];
    cr_assert(failover_gap_provable(false, false, false, why, sizeof why));
    cr_assert_str_empty(why);
    cr_assert_not(failover_gap_provable(true, false, false, why, sizeof why));
    cr_assert(strstr(why, "on_sent = delete"), "%s", why);
    cr_assert_not(failover_gap_provable(false, true, false, why, sizeof why));
    cr_assert(strstr(why, "message_prefix"), "%s", why);
    cr_assert_not(failover_gap_provable(false, false, true, why, sizeof why));
    cr_assert(strstr(why, "debezium"), "%s", why);
}

Test(failover_watch, a_reconcile_reads_from_before_the_last_confirmed_position)
{
    cr_assert_eq(failover_recovery_since(10000.0, 500.0), 10000.0 - FAILOVER_RECOVERY_MARGIN_S);
    cr_assert_eq(failover_recovery_since(0, 5000.0), 5000.0 - FAILOVER_RECOVERY_MARGIN_S,
                 "nothing confirmed yet: from the start");
}

Test(failover_watch, a_recovered_gap_streams_from_the_new_slot)
{
    struct failover_watch w = {.timeline = 1, .confirmed = 0x3000060, .checked = true};
    struct failover_news n = failover_watch_seen(&w, "000000020000000000000005", false, 0,
                                                 0x3000060, "s1");
    cr_assert(n.gap);
    cr_assert(failover_watch_blocks(&w, 0));
    failover_watch_recovered(&w);
    cr_assert_not(failover_watch_blocks(&w, 0));
    n = failover_watch_seen(&w, "000000020000000000000005", true, 0x5000000, 0x3000060, "s1");
    cr_assert_eq(n.verdict, FAILOVER_NONE);
    cr_assert_not(n.gap);
    cr_assert_eq(w.timeline, 2);
    cr_assert_eq(w.confirmed, 0x5000000);
}
