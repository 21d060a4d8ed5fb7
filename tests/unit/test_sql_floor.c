/* Unit tests of relay/core/sql_floor.c: the statements that find the unsent
 * rows of the relay's own table from its floor, and the snapshot it keeps.
 * What they find is shown against PostgreSQL by the e2e tests (late
 * commits below the floor, requeues and drops of dead rows). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/sql.h"
#include "core/sql_floor.h"

Test(sql_floor, snapshot_parses_into_the_next_claims_parameters)
{
    struct sql_floor_snap s;
    cr_assert_eq(sql_floor_parse("100:105:100,102,104", &s), 0);
    cr_assert_str_eq(s.xmin, "100");
    cr_assert_str_eq(s.xmax, "105");
    cr_assert_str_eq(s.xip, "{100,102,104}");
    cr_assert_eq(sql_floor_parse("7:7:", &s), 0);
    cr_assert_str_eq(s.xip, "{}");
}

Test(sql_floor, snapshot_that_cannot_be_passed_is_refused)
{
    struct sql_floor_snap s;
    cr_assert_eq(sql_floor_parse(NULL, &s), -EINVAL);
    cr_assert_eq(sql_floor_parse("", &s), -EINVAL);
    cr_assert_eq(sql_floor_parse("100", &s), -EINVAL);
    cr_assert_eq(sql_floor_parse("1:2:3;DROP", &s), -ENOSPC);
    /* More open transactions than fit: the caller keeps its older floor. */
    size_t n = sizeof s.xip + 64;
    char *big = malloc(n + 16);
    strcpy(big, "1:99999999:");
    for (size_t k = strlen(big); k < n; k += 2)
        strcat(big, "9,");
    strcat(big, "9");
    cr_assert_eq(sql_floor_parse(big, &s), -ENOSPC);
    free(big);
}

Test(sql_floor, claim_reads_from_the_floor_and_the_transactions_since)
{
    struct sql_statements s;
    cr_assert_eq(sql_statements_init(&s, "app", "events", "c", SQL_FLOOR | SQL_HOLD_AGGREGATE), 0);
    /* Rows at or above the floor in id order: the primary key. */
    cr_assert_not_null(strstr(s.claim, "o.\"id\" >= COALESCE($5::bigint, (SELECT f.\"floor_id\" "
                                       "FROM \"app\".\"events_floor\" AS f), 0)"),
                       "%s", s.claim);
    /* Below it, only the rows of transactions the floor's snapshot did not
     * see as done, through the xid index alone. */
    cr_assert_not_null(strstr(s.claim, "WHERE x.\"xid\" = ANY($7::xid8[]) AND x.\"id\" < "),
                       "%s", s.claim);
    cr_assert_not_null(strstr(s.claim, "UNION ALL SELECT x.* FROM \"app\".\"events\" AS x WHERE "
                                       "x.\"xid\" >= COALESCE($6::xid8,"),
                       "%s", s.claim);
    cr_assert_not_null(strstr(s.claim, "AND x.\"id\" < COALESCE($5::bigint,"), "%s", s.claim);
    /* Both halves keep the hold and the batches in flight out. */
    const char *hold = "NOT EXISTS (SELECT 1 FROM \"app\".\"events\" AS d";
    const char *first = strstr(s.claim, hold);
    cr_assert_not_null(first);
    cr_assert_not_null(strstr(first + 1, hold), "the rows below the floor skip the hold");
    cr_assert_not_null(strstr(s.claim, "s.snapshot FROM ("));
    cr_assert_not_null(strstr(s.claim, "pg_current_snapshot()::text AS snapshot"));
    /* Never an index of unsent rows. */
    cr_assert_null(strstr(s.claim, "pending"));
    sql_statements_free(&s);
}

Test(sql_floor, session_reads_the_claim_by_the_primary_key)
{
    struct sql_session q;
    cr_assert_eq(sql_session_init(&q, "app", "events", "events", SQL_FLOOR), 0);
    cr_assert_not_null(strstr(q.check, "set_config('enable_bitmapscan', 'off', false)"), "%s",
                       q.check);
    cr_assert_not_null(strstr(q.check, "set_config('enable_sort', 'off', false)"), "%s", q.check);
    sql_session_free(&q);
    cr_assert_eq(sql_session_init(&q, "app", "events_relay", "events", 0), 0);
    cr_assert_null(strstr(q.check, "enable_sort"), "%s", q.check);
    sql_session_free(&q);
}

Test(sql_floor, backlog_saves_the_floor_and_retention_uses_creation_order)
{
    struct sql_statements s;
    cr_assert_eq(sql_statements_init(&s, "app", "events", "c", SQL_FLOOR), 0);
    cr_assert_not_null(strstr(s.backlog, "UPDATE \"app\".\"events_floor\" SET \"floor_id\" = "
                                         "$1::bigint, \"floor_xmin\" = $4::xid8"),
                       "%s", s.backlog);
    cr_assert_not_null(strstr(s.retention, "ORDER BY \"created_at\" LIMIT $2::int"), "%s",
                       s.retention);
    cr_assert_not_null(strstr(s.retention, "\"sent_at\" < clock_timestamp()"));
    sql_statements_free(&s);
}

Test(sql_floor, dead_commands_release_the_rows_their_aggregate_held)
{
    struct sql_dead q;
    cr_assert_eq(sql_dead_init(&q, "app", "events", SQL_FLOOR), 0);
    cr_assert_not_null(strstr(q.requeue, "\"xid\" = pg_current_xact_id()"), "%s", q.requeue);
    cr_assert_not_null(strstr(q.requeue, "held AS (UPDATE \"app\".\"events\" AS l SET \"xid\""),
                       "%s", q.requeue);
    cr_assert_not_null(strstr(q.drop, "held AS (UPDATE \"app\".\"events\" AS l SET \"xid\""),
                       "%s", q.drop);
    sql_dead_free(&q);
    /* The view over Debezium's table has no xid: its commands are plain. */
    cr_assert_eq(sql_dead_init(&q, "app", "events_relay", 0), 0);
    cr_assert_null(strstr(q.requeue, "xid"));
    cr_assert_null(strstr(q.drop, "xid"));
    sql_dead_free(&q);
}

/* One statement sets how full the table's pages are kept, polled or not. */
Test(sql_floor, fill_pages_leaves_room_only_for_marks)
{
    char *marked = sql_floor_fill_pages("app", "Events", true);
    char *full = sql_floor_fill_pages("app", "Events", false);
    char *drop = sql_floor_drop_claim_index("app", "Events");
    cr_assert_str_eq(marked, "ALTER TABLE \"app\".\"Events\" SET (fillfactor = 45)");
    cr_assert_str_eq(full, "ALTER TABLE \"app\".\"Events\" SET (fillfactor = 100)");
    cr_assert_str_eq(drop, "DROP INDEX IF EXISTS \"app\".\"Events_xid_idx\"; "
                           "ALTER TABLE \"app\".\"Events\" SET (fillfactor = 100)");
    cr_assert_null(sql_floor_fill_pages("app", "x\"; DROP TABLE y; --", true));
    cr_assert_null(sql_floor_drop_claim_index("", "Events"));
    free(marked);
    free(full);
    free(drop);
}
