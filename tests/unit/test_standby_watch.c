/* test_standby_watch.c — when a standby says the leader makes no progress. */
#include <criterion/criterion.h>

#include "core/standby_watch.h"

Test(standby_watch, rows_waiting_with_no_marks_trip_after_the_limit)
{
    struct standby_watch w;
    standby_watch_reset(&w);
    standby_watch_feed(&w, 100, 5, 42);
    cr_assert_not(standby_watch_stalled(&w, 100, 60));
    standby_watch_feed(&w, 130, 35, 42);
    cr_assert_not(standby_watch_stalled(&w, 130, 60));
    cr_assert_float_eq(standby_watch_stalled_for(&w, 130), 30, 1e-9);
    standby_watch_feed(&w, 160, 65, 42);
    cr_assert(standby_watch_stalled(&w, 160, 60));
}

Test(standby_watch, marks_by_the_leader_restart_the_clock)
{
    struct standby_watch w;
    standby_watch_reset(&w);
    standby_watch_feed(&w, 0, 100, 10);
    standby_watch_feed(&w, 59, 100, 11); /* a backlog draining: the oldest row is old */
    standby_watch_feed(&w, 100, 100, 11);
    cr_assert_not(standby_watch_stalled(&w, 100, 60));
    cr_assert(standby_watch_stalled(&w, 119, 60));
}

Test(standby_watch, no_rows_waiting_is_no_stall)
{
    struct standby_watch w;
    standby_watch_reset(&w);
    standby_watch_feed(&w, 0, 10, 7);
    standby_watch_feed(&w, 100, -1, 7);
    cr_assert_not(standby_watch_stalled(&w, 100, 60));
    cr_assert_float_eq(standby_watch_stalled_for(&w, 100), 0, 1e-9);
    /* Rows wait again: the clock starts from then, not from the first sight. */
    standby_watch_feed(&w, 200, 1, 7);
    cr_assert_not(standby_watch_stalled(&w, 250, 60));
    cr_assert(standby_watch_stalled(&w, 260, 60));
}

Test(standby_watch, an_unknown_count_or_no_limit_never_trips)
{
    struct standby_watch w;
    standby_watch_reset(&w);
    standby_watch_feed(&w, 0, 10, -1);
    cr_assert_not(standby_watch_stalled(&w, 1000, 60));
    standby_watch_feed(&w, 0, 10, 3);
    cr_assert_not(standby_watch_stalled(&w, 1000, 0));
    cr_assert(standby_watch_stalled(&w, 1000, 60));
}
