/* test_floor.c — the relay's own table has no index of unsent rows, so that a
 * mark is a HOT update (schema/005): claims start from a floor. Rows the floor
 * has passed are still relayed, in order: a row whose transaction commits
 * late (commit_order's late_commit_of_low_id), rows held behind a dead row
 * once `outbox-relay dead` requeues or drops it, and after a restart, which
 * starts from the saved floor. What a user checks: every row in Kafka once,
 * per aggregate in id order, the marks, and marks that wrote no index. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

static struct e2e_ctx T;

static void fini(void)
{
    e2e_teardown(&T);
}

static long long insert_row(const char *aggregate_id, int n, const char *topic)
{
    return e2e_query_int(T.conn,
                         "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload, topic) "
                         "VALUES ('order', '%s', 'created', jsonb_build_object('n', %d), %s) "
                         "RETURNING id",
                         T.qtable, aggregate_id, n, topic ? topic : "NULL");
}

/* @p n rows of ten other aggregates, each committed alone. */
static void insert_others(int from, int n)
{
    for (int i = from; i < from + n; i++) {
        char agg[32];
        snprintf(agg, sizeof agg, "other-%d", i % 10);
        insert_row(agg, i, NULL);
    }
}

static void dead(const char *const *words, const char *want_out)
{
    char *out = NULL, *err = NULL;
    int rc = e2e_dead(&T, words, NULL, &out, &err);
    cr_assert_eq(rc, 0, "dead %s exited %d\nstdout: %s\nstderr: %s", words[0], rc, out ? out : "",
                 err ? err : "");
    cr_assert(out && strstr(out, want_out), "dead %s: stdout lacks \"%s\": %s", words[0], want_out,
              out ? out : "");
    free(out);
    free(err);
}

/* The floor passes rows held behind a dead row; `dead requeue` and `dead
 * drop` release them, and they reach Kafka before the rows their aggregate
 * gets afterwards. */
Test(e2e, floor_passes_held_rows_and_dead_commands_release_them, .fini = fini, .timeout = 150)
{
    e2e_setup(&T, "floorhold");
    e2e_migrate(&T);
    long long a1 = insert_row("agg-a", 1, "'not a topic!'"); /* dead, holds a2 */
    long long a2 = insert_row("agg-a", 2, NULL);
    long long b1 = insert_row("agg-b", 1, "'not a topic!'"); /* dead, holds b2 */
    long long b2 = insert_row("agg-b", 2, NULL);
    insert_others(0, 40);
    const char *extra[] = {"relay.poll_interval_ms=50", "relay.batch_size=5",
                           "relay.on_poison=hold_aggregate", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_wait_sql(&T, 30000,
                           "SELECT (SELECT count(*) FROM %s WHERE dead_at IS NOT NULL) = 2 AND NOT "
                           "EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL AND dead_at IS NULL "
                           "AND aggregate_id LIKE 'other-%%')",
                           T.qtable, T.qtable),
              "the other aggregates did not flow past the dead rows (log %s)", relay->log_path);
    /* More rows, so that claims return rows and the floor passes the held
     * ones; the relay saves its floor with the backlog count (every 5 s). */
    insert_others(40, 40);
    cr_assert(e2e_wait_sql(&T, 30000,
                           "SELECT NOT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL AND dead_at "
                           "IS NULL AND aggregate_id LIKE 'other-%%')",
                           T.qtable),
              "the later rows were not relayed");
    cr_assert(e2e_wait_sql(&T, 15000, "SELECT floor_id > %lld FROM public.%s_floor", b2, T.table),
              "the saved floor did not pass the held rows (floor %lld, held %lld and %lld)",
              e2e_query_int(T.conn, "SELECT floor_id FROM public.%s_floor", T.table), a2, b2);
    cr_assert_eq(e2e_count_where(&T, "sent_at IS NULL AND dead_at IS NULL"), 2,
                 "the held rows must still wait");

    /* Fix a1 and requeue it; drop b1. Then each aggregate gets a new row,
     * above the floor: it must not overtake the rows released below it. */
    e2e_exec(T.conn, "UPDATE %s SET topic = NULL WHERE id = %lld", T.qtable, a1);
    char sa1[24], sb1[24];
    snprintf(sa1, sizeof sa1, "%lld", a1);
    snprintf(sb1, sizeof sb1, "%lld", b1);
    const char *requeue[] = {"requeue", sa1, NULL};
    const char *drop[] = {"drop", sb1, "--yes", NULL};
    dead(requeue, "requeued 1 row");
    dead(drop, "dropped 1 row");
    long long a3 = insert_row("agg-a", 3, NULL);
    long long b3 = insert_row("agg-b", 3, NULL);
    e2e_wait_all_sent(&T, 30000);
    cr_assert_eq(e2e_count_where(&T, "sent_at IS NULL"), 0);
    cr_assert(a3 > a2 && b3 > b2);
    /* Kafka: a1, a2, a3 and b2, b3, each once, in id order. */
    e2e_verify_sent_once(&T, "rows released below the floor");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}

/* A relay that starts again claims from the saved floor, and a row whose
 * transaction was open across the restart is relayed all the same. Every
 * mark was a HOT update: no index entry, no new page. */
Test(e2e, floor_survives_a_restart_and_marks_are_hot, .fini = fini, .timeout = 150)
{
    e2e_setup(&T, "floorrestart");
    e2e_migrate(&T);
    insert_others(0, 200);
    const char *extra[] = {"relay.poll_interval_ms=50", "relay.batch_size=20", NULL};
    struct e2e_relay *relay = e2e_relay_start(&T, extra);
    e2e_wait_all_sent(&T, 30000);

    PGconn *slow = e2e_pg_connect();
    e2e_exec(slow, "BEGIN");
    long long low = e2e_query_int(slow,
                                  "INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload) "
                                  "VALUES ('order', 'slow', 'created', '{}') RETURNING id",
                                  T.qtable);
    insert_others(200, 100);
    e2e_wait_all_sent(&T, 30000); /* the slow row is not visible yet */
    cr_assert(e2e_wait_sql(&T, 15000, "SELECT floor_id > %lld FROM public.%s_floor", low, T.table),
              "the saved floor did not pass the open transaction's row %lld", low);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");

    relay = e2e_relay_start(&T, extra);
    cr_assert(e2e_relay_wait_log(relay, "msg=\"became leader\"", 30000), "no leader after restart");
    insert_others(300, 20);
    e2e_exec(slow, "COMMIT");
    PQfinish(slow);
    cr_assert(e2e_wait_sql(&T, 30000, "SELECT sent_at IS NOT NULL FROM %s WHERE id = %lld",
                           T.qtable, low),
              "row %lld, committed below the saved floor after a restart, was never sent", low);
    e2e_wait_all_sent(&T, 30000);
    e2e_verify_sent_once(&T, "a restart from the saved floor");
    /* The statistics reach the view within a second or so. */
    cr_assert(e2e_wait_sql(&T, 15000,
                           "SELECT n_tup_upd >= 321 FROM pg_stat_user_tables WHERE relid = "
                           "'%s'::regclass",
                           T.qtable),
              "the marks never showed in pg_stat_user_tables");
    cr_assert_eq(e2e_query_int(T.conn,
                               "SELECT n_tup_upd - n_tup_hot_upd FROM pg_stat_user_tables "
                               "WHERE relid = '%s'::regclass",
                               T.qtable),
                 0, "marks that were not HOT updates (each wrote index entries and a new page)");
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
}
