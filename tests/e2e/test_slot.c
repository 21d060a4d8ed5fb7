/* test_slot.c — log-based capture's part of `migrate` and the `slot` command,
 * on the stack's PostgreSQL (wal_level = logical): migrate creates the
 * publication and the pgoutput slot once, --print-sql shows them, `slot
 * status` reports the slot and fails when it is missing, `slot drop` needs
 * --yes, refuses a slot in use and does nothing when there is none; a role
 * without REPLICATION is told the grant it needs.
 *
 * A slot keeps WAL for the whole cluster the lanes share: every test drops
 * the slot, publication and role it made, whatever happened. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include "testlib.h"

static struct e2e_ctx T;
static char slot[80], pub[80], role[80];

static void fini(void)
{
    if (T.conn) {
        PQclear(PQexec(T.conn, "SET client_min_messages = warning"));
        char sql[400];
        snprintf(sql, sizeof sql,
                 "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                 "WHERE slot_name = '%s' AND NOT active", slot);
        PQclear(PQexec(T.conn, sql));
        snprintf(sql, sizeof sql, "DROP PUBLICATION IF EXISTS \"%s\"", pub);
        PQclear(PQexec(T.conn, sql));
        snprintf(sql, sizeof sql, "DROP ROLE IF EXISTS \"%s\"", role);
        PQclear(PQexec(T.conn, sql));
    }
    e2e_teardown(&T);
}

static void setup(const char *name)
{
    e2e_setup(&T, name);
    snprintf(slot, sizeof slot, "%s_slot", T.table);
    snprintf(pub, sizeof pub, "%s_pub", T.table);
    snprintf(role, sizeof role, "%s_role", T.table);
}

/* `outbox-relay WORDS... <base args> -X relay.capture=wal ...` for the test's
 * table, slot and publication; @p conninfo replaces the stack's when not NULL. */
static int relay_wal(const char *const *words, const char *conninfo, char **out, char **err)
{
    const char *args[E2E_MAX_ARGS];
    static char xslot[128], xpub[128], xconn[1024];
    int n = 0;
    for (int i = 0; words[i]; i++)
        args[n++] = words[i];
    e2e_base_args(&T, args, &n);
    snprintf(xslot, sizeof xslot, "relay.slot=%s", slot);
    snprintf(xpub, sizeof xpub, "relay.publication=%s", pub);
    const char *extra[] = {"relay.capture=wal", xslot, xpub, NULL, NULL};
    if (conninfo) {
        snprintf(xconn, sizeof xconn, "postgres.conninfo=%s", conninfo);
        extra[3] = xconn;
    }
    for (int i = 0; extra[i]; i++) {
        args[n++] = "-X";
        args[n++] = extra[i];
    }
    args[n] = NULL;
    return e2e_run_relay(args, 60000, out, err);
}

/* Runs it, asserts @p want, frees what was printed unless asked for. */
static void expect(int want, const char *const *words, char **out, char **err)
{
    char *o = NULL, *e = NULL;
    int rc = relay_wal(words, NULL, &o, &e);
    cr_assert_eq(rc, want, "outbox-relay %s %s exited %d, expected %d\nstdout: %s\nstderr: %s",
                 words[0], words[1] ? words[1] : "", rc, want, o ? o : "", e ? e : "");
    if (out)
        *out = o;
    else
        free(o);
    if (err)
        *err = e;
    else
        free(e);
}

static long long claim_index(void)
{
    return e2e_query_int(T.conn, "SELECT count(*) FROM pg_indexes WHERE schemaname = 'public' "
                         "AND indexname = '%s_xid_idx'", T.table);
}

static long long slots(void)
{
    return e2e_query_int(T.conn, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '%s'",
                         slot);
}

static void migrate_wal(char **err)
{
    const char *words[] = {"migrate", NULL};
    expect(0, words, NULL, err);
}

Test(e2e, slot_migrate_creates_publication_and_slot_once, .fini = fini, .timeout = 180)
{
    setup("slotmig");
    char *err = NULL;
    migrate_wal(&err);
    cr_expect(strstr(err, "publication created") && strstr(err, "replication slot created"),
              "first migrate did not say it created both: %s", err);
    free(err);
    cr_assert_eq(e2e_query_int(T.conn,
                     "SELECT count(*) FROM pg_publication_tables t JOIN pg_publication p USING (pubname) "
                     "WHERE t.pubname = '%s' AND t.schemaname = 'public' AND t.tablename = '%s' "
                     "AND p.pubinsert AND NOT p.pubupdate AND NOT p.pubdelete",
                     pub, T.table), 1, "the publication does not publish inserts of the table only");
    cr_assert_eq(e2e_query_int(T.conn,
                     "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '%s' "
                     "AND plugin = 'pgoutput' AND slot_type = 'logical' AND database = current_database()",
                     slot), 1, "no pgoutput slot %s in this database", slot);

    /* The claim index serves polling only: inserts do not write it. */
    cr_assert_eq(claim_index(), 0, "the xid index is still there with capture = wal");

    migrate_wal(&err);
    cr_expect(strstr(err, "publication up to date") && strstr(err, "replication slot exists"),
              "second migrate did not say nothing was needed: %s", err);
    cr_expect(!strstr(err, "missing"), "the dropped claim index counts as missing: %s", err);
    free(err);
    cr_assert_eq(slots(), 1);

    /* Polling again: migrate brings the index back; wal drops it again. */
    e2e_migrate(&T);
    cr_assert_eq(claim_index(), 1, "migrate in polling mode did not create the claim index again");
    migrate_wal(&err);
    free(err);
    cr_assert_eq(claim_index(), 0);

    /* A publication that lacks the table gets it added. */
    e2e_exec(T.conn, "ALTER PUBLICATION \"%s\" DROP TABLE %s", pub, T.qtable);
    migrate_wal(&err);
    cr_expect(strstr(err, "table added to the publication"), "migrate: %s", err);
    free(err);
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM pg_publication_tables WHERE pubname = '%s'",
                               pub), 1);

    const char *print[] = {"migrate", "--print-sql", NULL};
    char *out = NULL;
    expect(0, print, &out, NULL);
    char want[300];
    snprintf(want, sizeof want, "CREATE PUBLICATION \"%s\" FOR TABLE %s WITH (publish = 'insert')",
             pub, T.qtable);
    cr_expect(strstr(out, want), "--print-sql lacks %s", want);
    snprintf(want, sizeof want, "pg_create_logical_replication_slot('%s', 'pgoutput')", slot);
    cr_expect(strstr(out, want), "--print-sql lacks %s", want);
    snprintf(want, sizeof want, "DROP INDEX IF EXISTS \"public\".\"%s_xid_idx\"", T.table);
    cr_expect(strstr(out, want), "--print-sql lacks %s", want);
    free(out);
}

static void check_status_json(const char *out)
{
    cJSON *o = cJSON_Parse(out);
    cr_assert(o, "slot status --json printed no JSON: %s", out);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(o, "exists")), "%s", out);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(o, "usable")), "%s", out);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(o, "publication_ok")), "%s", out);
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(o, "active")), "%s", out);
    cJSON *plugin = cJSON_GetObjectItem(o, "plugin");
    cr_expect(cJSON_IsString(plugin) && !strcmp(plugin->valuestring, "pgoutput"), "%s", out);
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(o, "retained_bytes")), "%s", out);
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(o, "lag_bytes")), "%s", out);
    cr_expect(cJSON_IsString(cJSON_GetObjectItem(o, "confirmed_flush_lsn")), "%s", out);
    cJSON_Delete(o);
}

Test(e2e, slot_status_and_drop, .fini = fini, .timeout = 180)
{
    setup("slotcmd");
    migrate_wal(NULL);

    const char *status[] = {"slot", "status", NULL}, *json[] = {"slot", "status", "--json", NULL};
    char *out = NULL, *err = NULL;
    expect(0, status, &out, NULL);
    static const char *const fields[] = {"slot", "exists", "plugin", "active", "active_pid",
                                         "wal_status", "confirmed_flush_lsn", "restart_lsn",
                                         "retained_wal", "lag", "publication", "pgoutput"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        cr_expect(strstr(out, fields[i]), "slot status does not show %s:\n%s", fields[i], out);
    cr_expect(strstr(out, slot), "slot status does not name the slot:\n%s", out);
    free(out);
    expect(0, json, &out, NULL);
    check_status_json(out);
    free(out);

    const char *drop_unconfirmed[] = {"slot", "drop", NULL}, *drop[] = {"slot", "drop", "--yes", NULL};
    expect(64, drop_unconfirmed, NULL, &err);
    cr_expect(strstr(err, "--yes"), "drop without --yes does not ask for it: %s", err);
    free(err);
    cr_assert_eq(slots(), 1, "drop without --yes dropped the slot");

    expect(0, drop, &out, NULL);
    cr_expect(strstr(out, "dropped"), "%s", out);
    free(out);
    cr_assert_eq(slots(), 0, "slot drop --yes left the slot");
    expect(0, drop, &out, NULL);
    cr_expect(strstr(out, "does not exist"), "drop of a missing slot: %s", out);
    free(out);

    expect(1, status, NULL, &err);
    cr_expect(strstr(err, "does not exist") && strstr(err, "outbox-relay migrate"),
              "slot status of a missing slot does not say what to do: %s", err);
    free(err);
}

Test(e2e, slot_drop_refuses_a_slot_in_use, .fini = fini, .timeout = 180)
{
    setup("slotbusy");
    migrate_wal(NULL);
    /* A logical replication connection streaming from the slot, as the relay's. */
    char conninfo[1200];
    snprintf(conninfo, sizeof conninfo, "%s replication=database", T.env->pg);
    PGconn *repl = PQconnectdb(conninfo);
    cr_assert(PQstatus(repl) == CONNECTION_OK, "%s", PQerrorMessage(repl));
    char start[300];
    snprintf(start, sizeof start,
             "START_REPLICATION SLOT \"%s\" LOGICAL 0/0 (proto_version '1', publication_names '\"%s\"')",
             slot, pub);
    PGresult *res = PQexec(repl, start);
    cr_assert(PQresultStatus(res) == PGRES_COPY_BOTH, "%s", PQerrorMessage(repl));
    PQclear(res);
    cr_assert(e2e_wait_sql(&T, 10000, "SELECT active FROM pg_replication_slots WHERE slot_name = '%s'",
                           slot));

    const char *drop[] = {"slot", "drop", "--yes", NULL};
    char *err = NULL;
    expect(1, drop, NULL, &err);
    cr_expect(strstr(err, "is active"), "drop of an active slot: %s", err);
    free(err);
    cr_assert_eq(slots(), 1);

    PQfinish(repl);
    cr_assert(e2e_wait_sql(&T, 10000,
                           "SELECT NOT active FROM pg_replication_slots WHERE slot_name = '%s'", slot));
    expect(0, drop, NULL, NULL);
    cr_assert_eq(slots(), 0);
}

Test(e2e, slot_migrate_names_the_replication_grant, .fini = fini, .timeout = 120)
{
    setup("slotrole");
    e2e_exec(T.conn, "CREATE ROLE \"%s\" LOGIN NOREPLICATION", role);
    char conninfo[1200];
    snprintf(conninfo, sizeof conninfo, "%s user=%s", T.env->pg, role);
    const char *words[] = {"migrate", NULL};
    char *out = NULL, *err = NULL;
    int rc = relay_wal(words, conninfo, &out, &err);
    cr_expect_eq(rc, 70, "migrate by a role without REPLICATION exited %d: %s", rc, err);
    char grant[200];
    snprintf(grant, sizeof grant, "ALTER ROLE \\\"%s\\\" REPLICATION", role);
    cr_expect(strstr(err, "lacks the REPLICATION attribute") && strstr(err, grant),
              "migrate does not name the grant (%s): %s", grant, err);
    free(out);
    free(err);
    cr_assert_eq(slots(), 0);
    cr_assert_eq(e2e_query_int(T.conn, "SELECT count(*) FROM pg_class WHERE oid = to_regclass('%s')",
                               T.qtable), 0, "migrate changed something before refusing");
}
