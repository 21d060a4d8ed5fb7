/* test_schema_repair.c — `outbox-relay migrate` checks the objects its
 * migrations create, not only its ledger: what was dropped by hand comes
 * back, what cannot come back is reported, and a relay then works on the
 * repaired table. `run` checks the schema version before relaying: it waits,
 * saying so once, for a table that is missing or older, and refuses one that
 * is newer than it knows. */
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

/* Runs migrate for the test table. @return its exit status; *log its stderr (caller frees). */
static int migrate(char **log)
{
    const char *args[E2E_MAX_ARGS] = {"migrate"};
    int n = 1;
    e2e_base_args(&T, args, &n);
    args[n] = NULL;
    return e2e_run_relay(args, 60000, NULL, log);
}

static long long ledger_rows(void)
{
    return e2e_query_int(T.conn, "SELECT count(*) FROM \"public\".\"outbox_relay_migrations\" "
                         "WHERE table_name = 'public.%s'", T.table);
}

/* Everything the migrations leave, counted in the catalogs. */
static void check_whole(struct e2e_report *rep, const char *after)
{
    e2e_check(rep, e2e_query_int(T.conn, "SELECT count(*) FROM pg_class WHERE oid = to_regclass('%s')",
                                 T.qtable) == 1, "%s: no table", after);
    e2e_check(rep, e2e_query_int(T.conn, "SELECT count(*) FROM pg_indexes WHERE schemaname = 'public' "
                                 "AND indexname IN ('%s_xid_idx', '%s_created_idx', '%s_dead_hash_idx', "
                                 "'%s_failed_idx')",
                                 T.table, T.table, T.table, T.table) == 4, "%s: an index is missing", after);
    /* Without the indexes that name sent_at, a mark is a HOT update. */
    e2e_check(rep, e2e_query_int(T.conn, "SELECT count(*) FROM pg_indexes WHERE schemaname = 'public' "
                                 "AND indexname IN ('%s_pending_idx', '%s_sent_idx', '%s_dead_key_idx')",
                                 T.table, T.table, T.table) == 0, "%s: an index naming sent_at is back", after);
    e2e_check(rep, e2e_query_int(T.conn, "SELECT count(*) FROM pg_class WHERE oid = "
                                 "to_regclass('public.%s_floor')", T.table) == 1,
              "%s: no floor table", after);
    e2e_check(rep, e2e_query_int(T.conn, "SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass('%s') "
                                 "AND tgname = '%s_notify_trg'", T.qtable, T.table) == 1,
              "%s: no notify trigger", after);
    e2e_check(rep, e2e_query_int(T.conn, "SELECT count(*) FROM pg_constraint WHERE conrelid = to_regclass('%s') "
                                 "AND conname LIKE '%%_bytes'", T.qtable) == 4, "%s: a limit is missing", after);
    e2e_check(rep, e2e_query_int(T.conn, "SELECT count(*) FROM pg_proc WHERE oid = "
                                 "to_regprocedure('%s(text,text,text,jsonb,jsonb,text)')", T.qenqueue) == 1,
              "%s: no enqueue function", after);
}

/* Each object dropped by hand (the table itself first: its ledger rows stay)
 * is back after migrate, which says it repaired the schema; the ledger is
 * unchanged; a relay then relays from the repaired table. */
Test(e2e, migrate_recreates_dropped_objects, .fini = fini, .timeout = 180)
{
    e2e_setup(&T, "repair");
    e2e_migrate(&T);
    long long versions = ledger_rows();
    cr_assert_geq(versions, 3);

    static const struct {
        const char *what;
        const char *sql; /* @ stands for the table name */
    } drops[] = {
        {"the table", "DROP TABLE \"public\".\"@\""},
        {"the xid index", "DROP INDEX \"public\".\"@_xid_idx\""},
        {"the dead-row index", "DROP INDEX \"public\".\"@_dead_hash_idx\""},
        {"the floor table", "DROP TABLE \"public\".\"@_floor\""},
        {"the trigger", "DROP TRIGGER \"@_notify_trg\" ON \"public\".\"@\""},
        {"the trigger function", "DROP FUNCTION \"public\".\"@_notify\"() CASCADE"},
        {"the enqueue function", "DROP FUNCTION \"public\".\"@_enqueue\""},
        {"a limit", "ALTER TABLE \"public\".\"@\" DROP CONSTRAINT aggregate_id_bytes"},
        {"the table and the functions",
         "DROP TABLE \"public\".\"@\"; DROP FUNCTION \"public\".\"@_enqueue\"; "
         "DROP FUNCTION \"public\".\"@_notify\"()"},
    };
    struct e2e_report rep = {0};
    for (size_t i = 0; i < sizeof(drops) / sizeof(drops[0]); i++) {
        char sql[512];
        size_t o = 0;
        for (const char *p = drops[i].sql; *p && o + sizeof(T.table) < sizeof(sql); p++) {
            if (*p == '@')
                o += (size_t)snprintf(sql + o, sizeof(sql) - o, "%s", T.table);
            else
                sql[o++] = *p;
        }
        sql[o] = '\0';
        e2e_exec(T.conn, "%s", sql);
        char *log = NULL;
        int rc = migrate(&log);
        e2e_check(&rep, rc == 0, "after dropping %s: migrate exited %d: %.600s", drops[i].what, rc, log);
        e2e_check(&rep, log && strstr(log, "schema repaired"), "after dropping %s: migrate did not say it "
                  "repaired the schema: %.600s", drops[i].what, log ? log : "");
        free(log);
        check_whole(&rep, drops[i].what);
        e2e_check(&rep, ledger_rows() == versions, "after dropping %s: the ledger changed", drops[i].what);
        /* Whole again: the next run has nothing to repair. */
        rc = migrate(&log);
        e2e_check(&rep, rc == 0 && log && !strstr(log, "repaired") && strstr(log, "schema up to date"),
                  "after repairing %s: a second migrate exited %d: %.600s", drops[i].what, rc, log ? log : "");
        free(log);
    }
    e2e_report_assert(&rep, "repairs");

    /* The repaired table works: enqueue, NOTIFY wakes the relay, rows arrive. */
    struct e2e_relay *relay = e2e_relay_start(&T, NULL);
    e2e_exec(T.conn, "SELECT count(%s('order', 'o-' || (i %% 3), 'created', jsonb_build_object('n', i))) "
             "FROM generate_series(1, 30) AS i", T.qenqueue);
    e2e_wait_all_sent(&T, 30000);
    cr_assert_eq(e2e_relay_stop(relay, 30000), 0, "relay did not exit 0 on SIGTERM");
    struct e2e_rows rows;
    struct e2e_msgs msgs;
    struct e2e_report rep2 = {0};
    e2e_read_back(&T, 60000, &rows, &msgs, &rep2);
    for (size_t i = 0; i < rows.n; i++)
        e2e_check(&rep2, rows.v[i].deliveries == 1, "row %lld delivered %d times", (long long)rows.v[i].id,
                  rows.v[i].deliveries);
    e2e_check(&rep2, rows.n == 30 && msgs.n == 30, "%zu rows, %zu messages, expected 30", rows.n, msgs.n);
    e2e_report_assert(&rep2, "relaying from the repaired table");
    e2e_msgs_free(&msgs);
    e2e_rows_free(&rows);
}

/* Repairing applies every migration again, so none of them may fail on
 * rows a later one allows: here a dead row with a 4 KB key (from before the
 * limits), which the first dead-row index could not hold. The limit comes
 * back with that row exempt. */
Test(e2e, migrate_repairs_a_table_with_long_keys, .fini = fini, .timeout = 60)
{
    e2e_setup(&T, "repairlong");
    e2e_migrate(&T);
    e2e_exec(T.conn, "ALTER TABLE %s DROP CONSTRAINT aggregate_id_bytes", T.qtable);
    long long id = e2e_query_int(T.conn,
        "INSERT INTO %s (aggregate_type, aggregate_id, event_type, dead_at, attempts, last_error) "
        "SELECT 'order', string_agg(md5(g::text), ''), 'created', now(), 1, 'poison' "
        "FROM generate_series(1, 128) AS g RETURNING id", T.qtable);
    e2e_exec(T.conn, "DROP TRIGGER \"%s_notify_trg\" ON %s", T.table, T.qtable);
    char *log = NULL;
    int rc = migrate(&log);
    struct e2e_report rep = {0};
    e2e_check(&rep, rc == 0 && log && strstr(log, "schema repaired"), "migrate exited %d: %.800s", rc,
              log ? log : "");
    free(log);
    check_whole(&rep, "repair with a 4 KB key");
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM pg_constraint WHERE conrelid = '%s'::regclass "
                                  "AND conname = 'aggregate_id_bytes' "
                                  "AND pg_get_constraintdef(oid) LIKE '%%id <= %lld)%%'", T.qtable, id) == 1,
              "the dead 4 KB row is not exempt from the restored limit");
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE id = %lld AND dead_at IS NOT NULL",
                                  T.qtable, id) == 1, "the dead row changed");
    e2e_report_assert(&rep, "repair with long keys");
}

/* A column dropped by hand cannot come back by applying the migrations:
 * migrate fails (70), names what is missing and leaves the table as it was. */
Test(e2e, migrate_reports_what_it_cannot_repair, .fini = fini, .timeout = 60)
{
    e2e_setup(&T, "norepair");
    e2e_migrate(&T);
    e2e_exec(T.conn, "SELECT %s('order', 'k', 'created', NULL)", T.qenqueue);
    e2e_exec(T.conn, "ALTER TABLE %s DROP COLUMN headers", T.qtable);
    char *log = NULL;
    int rc = migrate(&log);
    struct e2e_report rep = {0};
    e2e_check(&rep, rc == 70, "migrate exited %d, expected 70", rc);
    e2e_check(&rep, log && strstr(log, "must be repaired by hand") && strstr(log, "column \\\"headers\\\""),
              "migrate did not name the missing column: %.800s", log ? log : "");
    e2e_check(&rep, log && !strstr(log, "schema up to date"), "migrate said the schema is up to date");
    free(log);
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM %s", T.qtable) == 1, "the row is gone");
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM information_schema.columns WHERE table_schema = "
                                  "'public' AND table_name = '%s' AND column_name = 'headers'", T.table) == 0,
              "migrate invented a column");
    e2e_report_assert(&rep, "unrepairable schema");
}

/* A ledger with a version this binary does not know: a newer relay migrated
 * the table, and this one does not judge (or undo) what that one changed. */
Test(e2e, migrate_leaves_a_newer_schema_alone, .fini = fini, .timeout = 60)
{
    e2e_setup(&T, "newer");
    e2e_migrate(&T);
    e2e_exec(T.conn, "INSERT INTO \"public\".\"outbox_relay_migrations\" (table_name, version, name) "
             "VALUES ('public.%s', 999, '999_from_the_future')", T.table);
    e2e_exec(T.conn, "DROP INDEX \"public\".\"%s_created_idx\"", T.table);
    char *log = NULL;
    int rc = migrate(&log);
    struct e2e_report rep = {0};
    e2e_check(&rep, rc == 0, "migrate exited %d: %.600s", rc, log ? log : "");
    e2e_check(&rep, log && strstr(log, "schema is newer than this outbox-relay"), "no warning: %.600s",
              log ? log : "");
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM pg_indexes WHERE indexname = '%s_created_idx'",
                                  T.table) == 0, "migrate recreated an index of a newer schema");
    free(log);
    e2e_exec(T.conn, "DELETE FROM \"public\".\"outbox_relay_migrations\" WHERE table_name = 'public.%s'",
             T.table);
    e2e_report_assert(&rep, "newer schema");
}

/* How many times @p needle occurs in the relay's log. */
/* Forgetting migrate: one clear error naming it (not one per poll), readiness
 * saying the same; migrate run later is picked up without a restart; and a
 * relay stopped while it waits stops at once, with nothing to abandon. */
Test(e2e, run_waits_for_migrate, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "nomigrate");
    const char *fast[] = {"relay.poll_interval_ms=100", NULL};
    struct e2e_relay *r = e2e_relay_start(&T, fast);
    cr_assert(e2e_relay_wait_log(r, "waiting for the outbox table's schema", 20000),
              "no error about the missing table (log %s)", r->log_path);
    e2e_assert_readyz(r, 503, "[-]schema the outbox table");
    e2e_assert_readyz(r, 503, "run `outbox-relay migrate`");
    e2e_sleep_ms(2000); /* twenty polls */
    struct e2e_report rep = {0};
    e2e_check(&rep, e2e_relay_log_count(r, "waiting for the outbox table's schema") == 1,
              "the missing table was logged %d times in 2 s", e2e_relay_log_count(r, "waiting for the outbox table's schema"));
    e2e_check(&rep, !e2e_relay_log_contains(r, "does not exist\\nLINE"), "a raw SQL error reached the log");
    e2e_check(&rep, !e2e_relay_log_contains(r, "preparing a statement failed"), "statements were prepared");

    e2e_migrate(&T);
    e2e_enqueue_series(&T, "order", "a", 5, "changed", 1, 50, 0);
    e2e_wait_all_sent(&T, 30000);
    e2e_check(&rep, e2e_relay_log_contains(r, "schema is fit; relaying"), "no line saying relaying began");
    e2e_assert_readyz(r, 200, "[+]schema ok");
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);

    /* Stopped while waiting: quick and quiet. */
    e2e_exec(T.conn, "DROP TABLE %s CASCADE", T.qtable);
    e2e_exec(T.conn, "DELETE FROM \"public\".\"outbox_relay_migrations\" WHERE table_name = 'public.%s'",
             T.table);
    r = e2e_relay_start(&T, fast);
    cr_assert(e2e_relay_wait_log(r, "waiting for the outbox table's schema", 20000));
    int64_t t0 = e2e_now_ms();
    int rc = e2e_relay_stop(r, 30000);
    int64_t took = e2e_now_ms() - t0;
    e2e_check(&rep, rc == 0, "exit %d", rc);
    e2e_check(&rep, took < 2000, "stopping a relay that waits for its table took %lld ms", (long long)took);
    e2e_check(&rep, !e2e_relay_log_contains(r, "pending marks"), "shutdown spoke of marks with nothing in flight");
    e2e_report_assert(&rep, "waiting for migrate");
}

/* A table recorded at an older version (a new binary before its migrate)
 * waits the same way, naming both versions. */
Test(e2e, run_waits_for_an_older_schema, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "older");
    e2e_migrate(&T);
    long long newest = e2e_query_int(T.conn, "SELECT max(version) FROM \"public\".\"outbox_relay_migrations\" "
                                     "WHERE table_name = 'public.%s'", T.table);
    e2e_exec(T.conn, "DELETE FROM \"public\".\"outbox_relay_migrations\" WHERE table_name = 'public.%s' "
             "AND version = %lld", T.table, newest);
    e2e_enqueue_series(&T, "order", "a", 5, "changed", 1, 10, 0);
    struct e2e_relay *r = e2e_relay_start(&T, NULL);
    char want[160];
    snprintf(want, sizeof want, "is at schema version %lld and this outbox-relay needs %lld", newest - 1, newest);
    e2e_assert_readyz(r, 503, want);
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE sent_at IS NOT NULL", T.qtable), 0,
                 "rows were relayed from a table at an older schema");
    e2e_migrate(&T);
    e2e_wait_all_sent(&T, 30000);
    cr_assert_eq(e2e_relay_stop(r, 30000), 0);
}

/* A schema newer than this binary knows: refused, said in the log and by
 * readiness; nothing relayed; the process stays up (a sidecar never loops). */
Test(e2e, run_refuses_a_newer_schema, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "runnewer");
    e2e_migrate(&T);
    e2e_exec(T.conn, "INSERT INTO \"public\".\"outbox_relay_migrations\" (table_name, version, name) "
             "VALUES ('public.%s', 999, '999_from_the_future')", T.table);
    e2e_enqueue_series(&T, "order", "a", 5, "changed", 1, 10, 0);
    struct e2e_relay *r = e2e_relay_start(&T, NULL);
    cr_assert(e2e_relay_wait_log(r, "refusing to relay", 20000), "no refusal (log %s)", r->log_path);
    e2e_assert_readyz(r, 503, "is at schema version 999, newer than this outbox-relay knows");
    e2e_sleep_ms(1500);
    struct e2e_report rep = {0};
    e2e_check(&rep, e2e_relay_alive(r), "the relay exited");
    e2e_check(&rep, e2e_query_int(T.conn, "SELECT count(*) FROM %s WHERE sent_at IS NOT NULL", T.qtable) == 0,
              "rows were relayed from a newer schema");
    e2e_check(&rep, e2e_relay_stop(r, 30000) == 0, "exit status");
    e2e_exec(T.conn, "DELETE FROM \"public\".\"outbox_relay_migrations\" WHERE table_name = 'public.%s'",
             T.table);
    e2e_report_assert(&rep, "newer schema at run");
}
