/* test_server_watch.c — which server a session is on: a failover counted, a
 * stale primary refused, the time without a session and the connects tried. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/server_watch.h"

#define SYS "7312345678901234567"
#define TL1 "000000010000000000000003"
#define TL2 "000000020000000000000003"

static struct server_watch w;
static struct stats_server s;

static struct server_news on(const char *host, const char *sys, const char *walfile, double now)
{
    server_watch_connected(&w, &s, host, "5432", now);
    return server_watch_identified(&w, &s, sys, walfile, now);
}

Test(server_watch, down_from_the_start_until_connected)
{
    server_watch_init(&w, &s, 100);
    cr_assert_float_eq(server_watch_down_for(&s, 130), 30, 1e-9);
    server_watch_attempt(&w, &s);
    server_watch_attempt(&w, &s);
    cr_assert_eq(s.reconnect_attempts_total, 2);
    struct server_news n = on("db-a", SYS, TL1, 131);
    cr_assert_eq(n.change, SERVER_FIRST);
    cr_assert_not(n.refuse);
    cr_assert_float_eq(server_watch_down_for(&s, 200), 0, 1e-9);
    cr_assert_str_eq(s.host, "db-a");
    cr_assert_str_eq(s.system_id, SYS);
    cr_assert_eq(s.timeline, 1);
    /* Connected, a connect is no reconnect (a second session, e.g.). */
    server_watch_attempt(&w, &s);
    cr_assert_eq(s.reconnect_attempts_total, 2);
}

Test(server_watch, a_later_timeline_is_one_failover)
{
    server_watch_init(&w, &s, 0);
    on("db-a", SYS, TL1, 1);
    server_watch_lost(&w, &s, 10);
    server_watch_lost(&w, &s, 12); /* lost again while down: still down since 10 */
    cr_assert_float_eq(server_watch_down_for(&s, 15), 5, 1e-9);
    server_watch_attempt(&w, &s);
    struct server_news n = on("db-b", SYS, TL2, 16);
    cr_assert_eq(n.change, SERVER_FAILOVER);
    cr_assert_not_null(n.say);
    cr_assert_eq(s.failovers_total, 1);
    cr_assert_float_eq(s.last_failover_time, 16, 1e-9);
    cr_assert_str_eq(s.host, "db-b");
    /* Back on the same server: no second failover. */
    server_watch_lost(&w, &s, 20);
    n = on("db-b", SYS, TL2, 21);
    cr_assert_eq(n.change, SERVER_SAME);
    cr_assert_null(n.say);
    cr_assert_eq(s.failovers_total, 1);
}

Test(server_watch, an_old_primary_on_an_earlier_timeline_is_refused_and_said_once)
{
    server_watch_init(&w, &s, 0);
    on("db-a", SYS, TL1, 1);
    server_watch_lost(&w, &s, 2);
    on("db-b", SYS, TL2, 3);
    server_watch_lost(&w, &s, 4);
    struct server_news n = on("db-a", SYS, TL1, 5);
    cr_assert_eq(n.change, SERVER_STALE);
    cr_assert(n.refuse);
    cr_assert_not_null(n.say);
    cr_assert(strstr(s.problem, "host=db-a port=5432 is on timeline 1"), "%s", s.problem);
    cr_assert(strstr(s.problem, "split brain"), "%s", s.problem);
    /* Checked again on the same session: refused, not said again. */
    n = server_watch_identified(&w, &s, SYS, TL1, 6);
    cr_assert(n.refuse);
    cr_assert_null(n.say);
    cr_assert_eq(s.failovers_total, 1);
    /* The promoted server again: accepted, the problem gone. */
    server_watch_lost(&w, &s, 7);
    n = on("db-b", SYS, TL2, 8);
    cr_assert_eq(n.change, SERVER_SAME);
    cr_assert_not(n.refuse);
    cr_assert_str_eq(s.problem, "");
}

Test(server_watch, another_cluster_is_said_not_counted)
{
    server_watch_init(&w, &s, 0);
    on("db-a", SYS, TL2, 1);
    struct server_news n = on("db-x", "42", TL1, 2);
    cr_assert_eq(n.change, SERVER_OTHER_SYSTEM);
    cr_assert_not(n.refuse);
    cr_assert_not_null(n.say);
    cr_assert_eq(s.failovers_total, 0);
    /* Its timeline is now the one compared with. */
    n = on("db-x", "42", TL2, 3);
    cr_assert_eq(n.change, SERVER_FAILOVER);
}

Test(server_watch, a_server_that_does_not_say_changes_nothing)
{
    server_watch_init(&w, &s, 0);
    on("db-a", SYS, TL2, 1);
    struct server_news n = on("db-s", SYS, NULL, 2); /* in recovery: no timeline */
    cr_assert_eq(n.change, SERVER_UNKNOWN);
    cr_assert_not(n.refuse);
    cr_assert_eq(s.timeline, 0);
    n = on("db-a", NULL, TL2, 3); /* pg_control_system() not allowed */
    cr_assert_eq(n.change, SERVER_UNKNOWN);
    n = on("db-a", SYS, TL1, 4);
    cr_assert_eq(n.change, SERVER_STALE);
}
