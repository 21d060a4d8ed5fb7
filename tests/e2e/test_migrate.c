/* test_migrate.c — `outbox-relay migrate` is idempotent and safe to run
 * concurrently, and what it creates matches the documented schema. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>

#include <criterion/criterion.h>

#include "testlib.h"

static struct e2e_ctx T;

static void fini(void)
{
    e2e_teardown(&T);
}

/* migrate for an arbitrary table name in schema public. */
static struct e2e_relay *spawn_migrate(const char *table)
{
    static char conninfo[1024], tbl[128], chan[128];
    snprintf(conninfo, sizeof(conninfo), "postgres.conninfo=%s", T.env->pg);
    snprintf(tbl, sizeof(tbl), "relay.table=%s", table);
    snprintf(chan, sizeof(chan), "relay.notify_channel=%s", table);
    const char *args[] = {"migrate", "-c", T.empty_conf, "-X", conninfo, "-X", tbl, "-X", chan, NULL};
    return e2e_spawn(&T, args);
}

static void drop_table(const char *table)
{
    e2e_exec(T.conn, "DROP TABLE IF EXISTS \"public\".\"%s\" CASCADE", table);
    e2e_exec(T.conn, "DROP FUNCTION IF EXISTS \"public\".\"%s_enqueue\" CASCADE", table);
}

struct col {
    const char *name, *type, *nullable, *default_like, *identity;
};

/* Everything the contract says about the table, function, trigger and the
 * migrations ledger, checked in the catalogs; then the function and the
 * trigger are exercised. */
static void check_schema(const char *table, struct e2e_report *rep)
{
    static const struct col cols[] = {
        {"id", "bigint", "NO", NULL, "ALWAYS"},
        {"event_id", "uuid", "NO", "gen_random_uuid()", NULL},
        {"aggregate_type", "text", "NO", NULL, NULL},
        {"aggregate_id", "text", "NO", NULL, NULL},
        {"event_type", "text", "NO", NULL, NULL},
        {"topic", "text", "YES", NULL, NULL},
        {"payload", "jsonb", "YES", NULL, NULL},
        {"headers", "jsonb", "YES", NULL, NULL},
        {"created_at", "timestamp with time zone", "NO", "clock_timestamp()", NULL},
        {"sent_at", "timestamp with time zone", "YES", NULL, NULL},
        {"attempts", "integer", "NO", "0", NULL},
        {"last_error", "text", "YES", NULL, NULL},
        {"dead_at", "timestamp with time zone", "YES", NULL, NULL},
    };
    char reg[200];
    snprintf(reg, sizeof(reg), "\"public\".\"%s\"", table);

    if (!e2e_check(rep, e2e_query_int(T.conn, "SELECT count(*) FROM pg_class WHERE oid = to_regclass('%s')", reg) == 1,
                   "table %s does not exist", reg))
        return;

    for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) {
        const struct col *c = &cols[i];
        PGresult *res = e2e_query(T.conn,
            "SELECT data_type, is_nullable, coalesce(column_default, ''), coalesce(identity_generation, '')"
            "  FROM information_schema.columns"
            " WHERE table_schema = 'public' AND table_name = '%s' AND column_name = '%s'",
            table, c->name);
        if (e2e_check(rep, PQntuples(res) == 1, "%s: column %s missing", table, c->name)) {
            e2e_check(rep, !strcmp(PQgetvalue(res, 0, 0), c->type), "%s.%s is %s, expected %s", table, c->name,
                      PQgetvalue(res, 0, 0), c->type);
            e2e_check(rep, !strcmp(PQgetvalue(res, 0, 1), c->nullable), "%s.%s nullable=%s, expected %s", table,
                      c->name, PQgetvalue(res, 0, 1), c->nullable);
            if (c->default_like)
                e2e_check(rep, strstr(PQgetvalue(res, 0, 2), c->default_like) != NULL,
                          "%s.%s default '%s', expected %s", table, c->name, PQgetvalue(res, 0, 2), c->default_like);
            if (c->identity)
                e2e_check(rep, !strcmp(PQgetvalue(res, 0, 3), c->identity),
                          "%s.%s identity '%s', expected GENERATED %s AS IDENTITY", table, c->name,
                          PQgetvalue(res, 0, 3), c->identity);
        }
        PQclear(res);
    }

    e2e_check(rep, e2e_query_int(T.conn,
        "SELECT count(*) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]"
        " WHERE i.indrelid = '%s'::regclass AND i.indisprimary AND i.indnatts = 1 AND a.attname = 'id'", reg) == 1,
        "%s: id is not the primary key", table);
    e2e_check(rep, e2e_query_int(T.conn,
        "SELECT count(*) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]"
        " WHERE i.indrelid = '%s'::regclass AND i.indisunique AND i.indnatts = 1 AND a.attname = 'event_id'",
        reg) >= 1, "%s: event_id is not UNIQUE", table);

    /* The enqueue function: signature, defaults, return type. */
    char sig[300];
    snprintf(sig, sizeof(sig), "\"public\".\"%s_enqueue\"(text,text,text,jsonb,jsonb,text)", table);
    PGresult *res = e2e_query(T.conn,
        "SELECT prorettype::regtype::text, pronargdefaults, array_to_string(proargnames, ',')"
        "  FROM pg_proc WHERE oid = to_regprocedure('%s')", sig);
    if (e2e_check(rep, PQntuples(res) == 1, "function %s does not exist", sig)) {
        e2e_check(rep, !strcmp(PQgetvalue(res, 0, 0), "uuid"), "%s returns %s, expected uuid", sig,
                  PQgetvalue(res, 0, 0));
        e2e_check(rep, !strcmp(PQgetvalue(res, 0, 1), "2"), "%s has %s defaulted arguments, expected 2", sig,
                  PQgetvalue(res, 0, 1));
        e2e_check(rep, !strcmp(PQgetvalue(res, 0, 2),
                               "p_aggregate_type,p_aggregate_id,p_event_type,p_payload,p_headers,p_topic"),
                  "%s argument names are %s", sig, PQgetvalue(res, 0, 2));
    }
    PQclear(res);

    /* An AFTER INSERT … FOR EACH STATEMENT trigger (tgtype bits: 1 row, 2 before, 4 insert). */
    e2e_check(rep, e2e_query_int(T.conn,
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = '%s'::regclass AND NOT tgisinternal"
        "   AND tgenabled <> 'D' AND (tgtype & 1) = 0 AND (tgtype & 2) = 0 AND (tgtype & 4) = 4", reg) >= 1,
        "%s has no enabled AFTER INSERT statement-level trigger", table);

    /* Each migration recorded once, versions 1..n. */
    res = e2e_query(T.conn,
        "SELECT count(*), count(DISTINCT version), coalesce(min(version), 0), coalesce(max(version), 0),"
        "       count(*) FILTER (WHERE applied_at IS NULL OR name IS NULL)"
        "  FROM \"public\".\"outbox_relay_migrations\" WHERE table_name = 'public.%s'", table);
    long long n = atoll(PQgetvalue(res, 0, 0)), distinct = atoll(PQgetvalue(res, 0, 1));
    long long vmin = atoll(PQgetvalue(res, 0, 2)), vmax = atoll(PQgetvalue(res, 0, 3));
    e2e_check(rep, n >= 1 && n == distinct && vmin == 1 && vmax == n,
              "outbox_relay_migrations for public.%s: %lld rows, %lld distinct versions, %lld..%lld "
              "(expected each version 1..n exactly once)", table, n, distinct, vmin, vmax);
    e2e_check(rep, atoll(PQgetvalue(res, 0, 4)) == 0, "outbox_relay_migrations rows without name/applied_at");
    PQclear(res);

    /* Use it: LISTEN, enqueue, the row is there and a notification comes. */
    PGconn *l = e2e_pg_connect();
    e2e_exec(l, "LISTEN \"%s\"", table);
    res = e2e_query(T.conn, "SELECT \"public\".\"%s_enqueue\"('order', 'o-1', 'created', '{\"a\": 1}')", table);
    char event_id[64];
    snprintf(event_id, sizeof(event_id), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    e2e_check(rep, e2e_query_int(T.conn,
        "SELECT count(*) FROM %s WHERE event_id = '%s' AND aggregate_type = 'order' AND aggregate_id = 'o-1'"
        "   AND event_type = 'created' AND payload = '{\"a\": 1}' AND headers IS NULL AND topic IS NULL"
        "   AND sent_at IS NULL AND attempts = 0 AND created_at IS NOT NULL AND dead_at IS NULL", reg, event_id) == 1,
        "enqueue did not insert the row it returned the event_id of (%s)", event_id);
    res = e2e_query(T.conn,
        "SELECT \"public\".\"%s_enqueue\"('order', 'o-2', 'deleted', NULL, '{\"h\": \"v\"}', 'custom.topic')",
        table);
    PQclear(res);
    e2e_check(rep, e2e_query_int(T.conn,
        "SELECT count(*) FROM %s WHERE aggregate_id = 'o-2' AND payload IS NULL AND headers = '{\"h\": \"v\"}'"
        "   AND topic = 'custom.topic'", reg) == 1, "enqueue with headers and topic did not store them");

    bool notified = false;
    int64_t deadline = e2e_now_ms() + 3000;
    while (!notified && e2e_now_ms() < deadline) {
        fd_set rfds;
        FD_ZERO(&rfds);
        FD_SET(PQsocket(l), &rfds);
        struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
        select(PQsocket(l) + 1, &rfds, NULL, NULL, &tv);
        PQconsumeInput(l);
        PGnotify *nf;
        while ((nf = PQnotifies(l))) {
            if (!strcmp(nf->relname, table))
                notified = true;
            PQfreemem(nf);
        }
    }
    e2e_check(rep, notified, "no NOTIFY on channel %s after an insert", table);
    PQfinish(l);
}

Test(e2e, migrate_twice_in_a_row, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "migtwice");
    for (int i = 0; i < 2; i++) {
        struct e2e_relay *m = spawn_migrate(T.table);
        int rc = e2e_wait_exit(m, 60000);
        cr_assert_eq(rc, 0, "migrate #%d exited %d (log %s)", i + 1, rc, m->log_path);
    }
    struct e2e_report rep = {0};
    check_schema(T.table, &rep);
    e2e_report_assert(&rep, "schema after migrate twice");
}

Test(e2e, migrate_concurrently, .fini = fini, .timeout = 200)
{
    e2e_setup(&T, "migpar");
    struct e2e_report rep = {0};
    /* A few rounds on fresh tables, with 2 and 3 processes racing. */
    for (int round = 0; round < 3; round++) {
        char table[80];
        snprintf(table, sizeof(table), "%s_%d", T.table, round);
        drop_table(table);
        int procs = round == 0 ? 2 : 3;
        struct e2e_relay *m[3];
        for (int i = 0; i < procs; i++)
            m[i] = spawn_migrate(table);
        for (int i = 0; i < procs; i++) {
            int rc = e2e_wait_exit(m[i], 60000);
            char *log = e2e_relay_log(m[i]);
            e2e_check(&rep, rc == 0, "round %d: concurrent migrate %d of %d exited %d: %.600s", round, i + 1,
                      procs, rc, log);
            free(log);
        }
        T.n_relays = 0; /* all reaped; reuse the slots */
        check_schema(table, &rep);
    }
    e2e_report_assert(&rep, "concurrent migrate");
}

/* A command names its session after itself in pg_stat_activity, so that an
 * operator can tell a waiting `migrate` or `dead` from the relay. Both are
 * seen there waiting behind a lock the test holds on the table. */
Test(e2e, commands_name_their_sessions, .fini = fini, .timeout = 120)
{
    e2e_setup(&T, "migname");
    e2e_migrate(&T);
    PGconn *locker = PQconnectdb(T.env->pg);
    cr_assert(PQstatus(locker) == CONNECTION_OK, "connect: %s", PQerrorMessage(locker));
    e2e_exec(locker, "BEGIN");
    e2e_exec(locker, "LOCK TABLE %s IN ACCESS EXCLUSIVE MODE", T.qtable);
    struct e2e_relay *migrate = spawn_migrate(T.table);
    const char *args[E2E_MAX_ARGS];
    int n = 0;
    args[n++] = "dead";
    args[n++] = "list";
    e2e_base_args(&T, args, &n);
    args[n] = NULL;
    struct e2e_relay *dead = e2e_spawn(&T, args);
    bool seen = e2e_wait_sql(&T, 30000,
                             "SELECT count(DISTINCT application_name) = 2 FROM pg_stat_activity "
                             "WHERE application_name IN ('outbox-relay migrate', "
                             "'outbox-relay dead') AND wait_event_type = 'Lock'");
    e2e_exec(locker, "ROLLBACK");
    PQfinish(locker);
    int mrc = e2e_wait_exit(migrate, 60000), drc = e2e_wait_exit(dead, 60000);
    cr_assert(seen, "no session named 'outbox-relay migrate' and 'outbox-relay dead' waited "
                    "for the table (logs %s, %s)", migrate->log_path, dead->log_path);
    cr_assert_eq(mrc, 0, "migrate exited %d (log %s)", mrc, migrate->log_path);
    cr_assert_eq(drc, 0, "dead list exited %d (log %s)", drc, dead->log_path);
}
