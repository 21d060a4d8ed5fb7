/* Unit tests of relay/core/sql.c: identifier checks, quoting, migration templates
 * and the relay's statements; and of sql_capture.c, log-based capture's. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/migrate.h"
#include "core/sql.h"
#include "core/sql_capture.h"
#include "core/sql_debezium.h"

Test(sql, ident_valid_accepts_plain_identifiers)
{
    cr_assert(sql_ident_valid("outbox"));
    cr_assert(sql_ident_valid("_x1"));
    cr_assert(sql_ident_valid("Outbox_Events_2"));
    cr_assert(sql_ident_valid("abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuv")); /* 48 */
}

Test(sql, ident_valid_rejects_everything_else)
{
    cr_assert_not(sql_ident_valid(NULL));
    cr_assert_not(sql_ident_valid(""));
    cr_assert_not(sql_ident_valid("1outbox"));
    cr_assert_not(sql_ident_valid("out-box"));
    cr_assert_not(sql_ident_valid("out box"));
    cr_assert_not(sql_ident_valid("a.b"));
    cr_assert_not(sql_ident_valid("a\"b"));
    cr_assert_not(sql_ident_valid("outbox\"; DROP TABLE x; --"));
    cr_assert_not(sql_ident_valid("tabl\xc3\xa9"));
    cr_assert_not(sql_ident_valid("abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvw")); /* 49 */
}

Test(sql, quote_ident_doubles_embedded_quotes)
{
    char buf[64];
    cr_assert_eq(sql_quote_ident("outbox", buf, sizeof buf), 8);
    cr_assert_str_eq(buf, "\"outbox\"");
    cr_assert_eq(sql_quote_ident("a\"b", buf, sizeof buf), 6);
    cr_assert_str_eq(buf, "\"a\"\"b\"");
    cr_assert_eq(sql_quote_ident("x\"; DROP TABLE t; --", buf, sizeof buf), 23);
    cr_assert_str_eq(buf, "\"x\"\"; DROP TABLE t; --\"");
}

Test(sql, quote_ident_reports_short_buffer)
{
    char buf[8];
    cr_assert_eq(sql_quote_ident("abcde", buf, sizeof buf), 7); /* exactly fits */
    cr_assert_str_eq(buf, "\"abcde\"");
    cr_assert_eq(sql_quote_ident("abcdef", buf, sizeof buf), -ENOSPC);
    cr_assert_eq(sql_quote_ident("a\"bcd", buf, sizeof buf), -ENOSPC);
}

Test(sql, quote_literal_doubles_single_quotes)
{
    char buf[64];
    cr_assert_eq(sql_quote_literal("it's", buf, sizeof buf), 7);
    cr_assert_str_eq(buf, "'it''s'");
    sql_quote_literal("", buf, sizeof buf);
    cr_assert_str_eq(buf, "''");
    sql_quote_literal("x'); DROP TABLE t; --", buf, sizeof buf);
    cr_assert_str_eq(buf, "'x''); DROP TABLE t; --'");
}

Test(sql, quote_literal_with_backslash_uses_escape_form)
{
    char buf[64];
    sql_quote_literal("a\\b'c", buf, sizeof buf);
    cr_assert_str_eq(buf, "E'a\\\\b''c'");
    /* A trailing backslash must not be able to eat the closing quote. */
    sql_quote_literal("x\\", buf, sizeof buf);
    cr_assert_str_eq(buf, "E'x\\\\'");
}

Test(sql, quote_literal_reports_short_buffer)
{
    char buf[4];
    cr_assert_eq(sql_quote_literal("ab", buf, sizeof buf), -ENOSPC);
    cr_assert_eq(sql_quote_literal("a", buf, sizeof buf), 3);
    cr_assert_str_eq(buf, "'a'");
}

Test(sql, render_template_replaces_placeholders)
{
    char *sql = sql_render_template(
        "CREATE TABLE {{schema}}.{{table}} (id bigint);\n"
        "CREATE INDEX {{table:pending_idx}} ON {{schema}}.{{table}} (id);\n"
        "SELECT pg_notify({{channel}}, '');",
        "app", "events", "ev_chan");
    cr_assert_not_null(sql);
    cr_assert_str_eq(sql,
                     "CREATE TABLE \"app\".\"events\" (id bigint);\n"
                     "CREATE INDEX \"events_pending_idx\" ON \"app\".\"events\" (id);\n"
                     "SELECT pg_notify('ev_chan', '');");
    free(sql);
}

Test(sql, render_template_without_placeholders_is_copied)
{
    char *sql = sql_render_template("SELECT 1 WHERE '{' <> '}'", "public", "outbox", "c");
    cr_assert_str_eq(sql, "SELECT 1 WHERE '{' <> '}'");
    free(sql);
}

Test(sql, render_template_rejects_unknown_placeholders)
{
    cr_assert_null(sql_render_template("SELECT {{tabel}}", "public", "outbox", "c"));
    cr_assert_null(sql_render_template("SELECT {{}}", "public", "outbox", "c"));
    cr_assert_null(sql_render_template("SELECT {{table:}}", "public", "outbox", "c"));
    cr_assert_null(sql_render_template("SELECT {{table:Idx}}", "public", "outbox", "c"));
    cr_assert_null(sql_render_template("SELECT {{table:a\"b}}", "public", "outbox", "c"));
    cr_assert_null(sql_render_template("SELECT {{schema", "public", "outbox", "c"));
}

Test(sql, render_template_rejects_unvalidated_identifiers)
{
    cr_assert_null(sql_render_template("{{table}}", "public", "x\"; DROP TABLE t; --", "c"));
    cr_assert_null(sql_render_template("{{schema}}", "pub lic", "outbox", "c"));
    cr_assert_null(sql_render_template("{{channel}}", "public", "outbox", "c'h"));
}

Test(sql, render_template_rejects_derived_name_longer_than_postgres_allows)
{
    const char *table = "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuv"; /* 48 */
    char *ok = sql_render_template("{{table:fourteen_chars}}", "public", table, "c"); /* 63 */
    cr_assert_not_null(ok);
    free(ok);
    cr_assert_null(sql_render_template("{{table:fifteen_chars_x}}", "public", table, "c"));
}

Test(sql, statements_for_default_table)
{
    struct sql_statements s;
    cr_assert_eq(sql_statements_init(&s, "public", "outbox", "outbox_relay", 0), 0);
    cr_assert_str_eq(s.claim,
                     "SELECT o.\"id\"::bigint, o.\"event_id\", o.\"aggregate_type\"::text, "
                     "o.\"aggregate_id\"::text, o.\"event_type\"::text, o.\"topic\"::text, "
                     "o.\"payload\"::text, o.\"headers\"::text, o.\"created_at\"::timestamptz "
                     "FROM \"public\".\"outbox\" AS o WHERE o.\"sent_at\" IS NULL AND "
                     "o.\"dead_at\" IS NULL AND (o.\"id\" NOT BETWEEN $2::bigint AND $3::bigint "
                     "OR o.\"id\" = ANY($4::bigint[])) "
                     "AND (o.\"id\" < $2::bigint OR $4::bigint[] IS NOT NULL) "
                     "ORDER BY o.\"id\" LIMIT $1");
    cr_assert_str_eq(s.mark_sent,
                     "UPDATE \"public\".\"outbox\" SET \"sent_at\" = clock_timestamp() "
                     "WHERE \"id\" = ANY($1::bigint[]) AND \"sent_at\" IS NULL");
    cr_assert_str_eq(s.listen, "LISTEN \"outbox_relay\"");
    sql_statements_free(&s);
    cr_assert_null(s.claim);
    sql_statements_free(&s); /* twice is harmless */
}

Test(sql, statements_quote_configured_identifiers)
{
    struct sql_statements s;
    cr_assert_eq(sql_statements_init(&s, "App", "Events", "EvChan", 0), 0);
    cr_assert_not_null(strstr(s.claim, "FROM \"App\".\"Events\" AS o WHERE"));
    cr_assert_not_null(strstr(s.mark_sent, "UPDATE \"App\".\"Events\" SET"));
    cr_assert_str_eq(s.listen, "LISTEN \"EvChan\"");
    sql_statements_free(&s);
}

Test(sql, session_statements_name_the_table_and_its_lock)
{
    struct sql_session q;
    cr_assert_eq(sql_session_init(&q, "App", "Events", "Events", 0), 0);
    /* The key of every earlier release: relays of two versions still exclude each other. */
    const char *key = "hashtextextended('outbox-relay:leader:' || 'App.Events', 0)";
    cr_assert_not_null(strstr(q.lock, key), "%s", q.lock);
    cr_assert_not_null(strstr(q.lock, "pg_try_advisory_lock("), "%s", q.lock);
    cr_assert_not_null(strstr(q.lock, "MATERIALIZED"), "%s", q.lock);
    cr_assert_not_null(strstr(q.verify, key), "%s", q.verify);
    cr_assert_not_null(strstr(q.release, "pg_advisory_unlock("), "%s", q.release);
    cr_assert_not_null(strstr(q.holder, "pg_stat_activity"), "%s", q.holder);
    cr_assert_not_null(strstr(q.check, "to_regclass('\"App\".\"Events\"')"), "%s", q.check);
    cr_assert_not_null(strstr(q.check, "row_security_active("), "%s", q.check);
    sql_session_free(&q);
    cr_assert_null(q.lock);
    cr_assert_eq(sql_session_init(&q, "public", "a'b", "a'b", 0), -EINVAL);
}

Test(sql, statements_refuse_invalid_identifiers)
{
    struct sql_statements s;
    cr_assert_eq(sql_statements_init(&s, "public", "outbox\"; DROP TABLE x; --", "c", 0), -EINVAL);
    cr_assert_null(s.claim);
    cr_assert_null(s.listen);
    cr_assert_eq(sql_statements_init(&s, "", "outbox", "c", 0), -EINVAL);
    cr_assert_eq(sql_statements_init(&s, "public", "outbox", "chan-1", 0), -EINVAL);
    cr_assert_eq(sql_statements_init(&s, "public", "outbox", NULL, 0), -EINVAL);
}

/* The highest $N of @p sql. */
static int highest_param(const char *sql)
{
    int max = 0;
    for (const char *p = strchr(sql, '$'); p; p = strchr(p + 1, '$')) {
        int n = atoi(p + 1);
        if (n > max)
            max = n;
    }
    return max;
}

/* The claim is prepared and sent with the count its text was built with. */
Test(sql, claim_parameter_count_matches_its_text)
{
    const unsigned modes[] = {0, SQL_HOLD_AGGREGATE, SQL_FLOOR, SQL_FLOOR | SQL_HOLD_AGGREGATE};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        struct sql_statements s;
        cr_assert_eq(sql_statements_init(&s, "public", "outbox", "c", modes[i]), 0);
        cr_assert_eq(highest_param(s.claim), s.claim_nparams, "flags 0x%x: $%d in the text, %d "
                     "parameters", modes[i], highest_param(s.claim), s.claim_nparams);
        sql_statements_free(&s);
    }
}

Test(sql, claim_columns_are_in_enum_order)
{
    struct sql_statements s;
    cr_assert_eq(sql_statements_init(&s, "public", "outbox", "c", 0), 0);
    const char *cols[CLAIM_NCOLS] = {
        [CLAIM_ID] = "o.\"id\"::bigint",
        [CLAIM_EVENT_ID] = "o.\"event_id\"",
        [CLAIM_AGGREGATE_TYPE] = "o.\"aggregate_type\"::text",
        [CLAIM_AGGREGATE_ID] = "o.\"aggregate_id\"::text",
        [CLAIM_EVENT_TYPE] = "o.\"event_type\"::text",
        [CLAIM_TOPIC] = "o.\"topic\"::text",
        [CLAIM_PAYLOAD] = "o.\"payload\"::text",
        [CLAIM_HEADERS] = "o.\"headers\"::text",
        [CLAIM_CREATED_AT] = "o.\"created_at\"::timestamptz",
    };
    const char *prev = s.claim;
    for (int i = 0; i < CLAIM_NCOLS; i++) {
        const char *at = strstr(prev, cols[i]);
        cr_assert_not_null(at, "column %d (%s) out of order", i, cols[i]);
        prev = at + strlen(cols[i]);
    }
    sql_statements_free(&s);
}

Test(sql, migrate_statements_quote_the_schema)
{
    struct sql_migrate q;
    cr_assert_eq(sql_migrate_init(&q, "App"), 0);
    cr_assert_str_eq(q.lock,
                     "SELECT pg_advisory_xact_lock(hashtextextended('outbox-relay:migrate', 0))");
    cr_assert_str_eq(q.create_schema, "CREATE SCHEMA IF NOT EXISTS \"App\"");
    cr_assert_not_null(
        strstr(q.create_table, "CREATE TABLE IF NOT EXISTS \"App\".\"outbox_relay_migrations\""));
    cr_assert_not_null(strstr(q.applied, "FROM \"App\".\"outbox_relay_migrations\""));
    cr_assert_not_null(strstr(q.applied, "$2"));
    cr_assert_null(strstr(q.applied, "$3"), "applied takes two parameters");
    cr_assert_not_null(strstr(q.record, "INSERT INTO \"App\".\"outbox_relay_migrations\""));
    cr_assert_not_null(strstr(q.record, "$3"));
    sql_migrate_free(&q);
    cr_assert_null(q.lock);
}

Test(sql, migrate_statements_refuse_invalid_schema)
{
    struct sql_migrate q;
    cr_assert_eq(sql_migrate_init(&q, "app\"; DROP SCHEMA public; --"), -EINVAL);
    cr_assert_null(q.create_schema);
}

Test(sql, every_shipped_migration_renders)
{
    cr_assert_gt(n_migrations, 0);
    for (unsigned i = 0; i < n_migrations; i++) {
        char *sql = sql_render_template(migrations[i].sql, "app", "events", "ev_chan");
        cr_assert_not_null(sql, "migration %d (%s) does not render", migrations[i].version,
                           migrations[i].name);
        cr_assert_null(strstr(sql, "{{"), "migration %s keeps a placeholder", migrations[i].name);
        /* The table, or one of its objects ("events_notify"). */
        cr_assert_not_null(strstr(sql, "\"app\".\"events"), "%s", migrations[i].name);
        free(sql);
    }
}

Test(sql, the_trigger_and_the_relay_name_the_same_quiet_locks)
{
    const char *tmpl = "{{lock:quiet}} {{lock:skip}}";
    char *sql = sql_render_template(tmpl, "app", "events", "ev_chan");
    cr_assert_str_eq(sql, "hashtextextended('outbox-relay:quiet:' || 'app.events', 0) "
                          "hashtextextended('outbox-relay:skip:' || 'app.events', 0)");
    free(sql);
    cr_assert_null(sql_render_template("{{lock:other}}", "app", "events", "ev_chan"));

    struct sql_session q;
    cr_assert_eq(sql_session_init(&q, "app", "events", "events", 0), 0);
    cr_assert_str_eq(q.quiet_on,
                     "SELECT pg_try_advisory_lock(hashtextextended('outbox-relay:quiet:' || "
                     "'app.events', 0))");
    cr_assert_not_null(strstr(q.quiet_off, "pg_advisory_unlock(hashtextextended('outbox-relay:quiet:"));
    cr_assert_not_null(strstr(q.quiet_check, "pg_try_advisory_lock(hashtextextended('outbox-relay:skip:"));
    /* The leader lock keeps its key: relays of two versions elect one leader. */
    cr_assert_not_null(strstr(q.lock, "hashtextextended('outbox-relay:leader:' || 'app.events', 0)"));
    sql_session_free(&q);
}

Test(sql, objects_check_renders)
{
    char *sql = sql_render_template(migration_objects_check, "app", "events", "ev_chan");
    cr_assert_not_null(sql, "schema/objects.sql does not render");
    cr_assert_null(strstr(sql, "{{"));
    cr_assert_not_null(strstr(sql, "to_regclass('\"app\".\"events\"')"), "%s", sql);
    cr_assert_not_null(strstr(sql, "'\"events_dead_hash_idx\"'"), "%s", sql);
    cr_assert_not_null(strstr(sql, "'\"events_xid_idx\"'"), "%s", sql);
    cr_assert_not_null(strstr(sql, "table \"app\".\"events_floor\""), "%s", sql);
    cr_assert_not_null(strstr(sql, "\"app\".\"events_enqueue\"(text,text,text,jsonb,jsonb,text)"));
    /* Superseded by 003 and 005: the check must not ask for them back (005
     * drops the indexes naming sent_at, so that a mark is a HOT update). */
    cr_assert_null(strstr(sql, "events_dead_idx"));
    cr_assert_null(strstr(sql, "events_dead_key_idx"));
    cr_assert_null(strstr(sql, "events_pending_idx"));
    cr_assert_null(strstr(sql, "events_sent_idx"));
    free(sql);
}

Test(sql, hold_aggregate_claim_skips_rows_behind_dead_ones)
{
    struct sql_statements s;
    cr_assert_eq(sql_statements_init(&s, "public", "outbox", "c", SQL_HOLD_AGGREGATE), 0);
    cr_assert_not_null(strstr(s.claim, "NOT EXISTS (SELECT 1 FROM \"public\".\"outbox\" AS d "
                                       "WHERE d.\"dead_at\" IS NOT NULL"));
    cr_assert_not_null(strstr(s.claim, "d.\"aggregate_id\" = o.\"aggregate_id\" AND "
                                       "d.\"id\" < o.\"id\")"));
    /* The dead-row index holds a hash of the key, not the key (schema/003). */
    cr_assert_not_null(strstr(s.claim, "hashtextextended(d.\"aggregate_id\", 0) = "
                                       "hashtextextended(o.\"aggregate_id\", 0)"));
    sql_statements_free(&s);

    cr_assert_eq(sql_statements_init(&s, "public", "outbox", "c", 0), 0);
    cr_assert_null(strstr(s.claim, "NOT EXISTS"));
    sql_statements_free(&s);
}

Test(sql, delete_sent_is_still_conditional)
{
    struct sql_statements s;
    cr_assert_eq(sql_statements_init(&s, "public", "outbox", "c", SQL_DELETE_SENT), 0);
    cr_assert_str_eq(s.mark_sent, "DELETE FROM \"public\".\"outbox\" WHERE \"id\" = "
                                  "ANY($1::bigint[]) AND \"sent_at\" IS NULL");
    cr_assert_not_null(strstr(s.record_failures, "AND t.\"sent_at\" IS NULL AND "
                                                 "t.\"dead_at\" IS NULL"));
    sql_statements_free(&s);
}

Test(sql, dead_statements_quote_identifiers)
{
    struct sql_dead q;
    cr_assert_eq(sql_dead_init(&q, "App", "Events", 0), 0);
    cr_assert_not_null(strstr(q.list, "FROM \"App\".\"Events\" AS o LEFT JOIN \"App\".\"Events\" AS l"));
    cr_assert_not_null(strstr(q.requeue, "UPDATE \"App\".\"Events\" AS o SET \"dead_at\" = NULL, "
                                         "\"attempts\" = 0 "));
    cr_assert_not_null(strstr(q.drop, "DELETE FROM \"App\".\"Events\" AS o WHERE"));
    /* last_error is history: requeue must not clear it. */
    cr_assert_null(strstr(q.requeue, "last_error"));
    sql_dead_free(&q);
    cr_assert_null(q.list);
    sql_dead_free(&q); /* twice is harmless */
}

Test(sql, dead_statements_touch_only_unsent_rows_needing_an_operator)
{
    struct sql_dead q;
    cr_assert_eq(sql_dead_init(&q, "public", "outbox", 0), 0);
    const char *pred = "((o.\"dead_at\" IS NOT NULL AND o.\"sent_at\" IS NULL) OR "
                       "(o.\"sent_at\" IS NULL AND o.\"dead_at\" IS NULL AND o.\"attempts\" > 0))";
    cr_assert_not_null(strstr(q.list, pred));
    cr_assert_not_null(strstr(q.requeue, pred));
    cr_assert_not_null(strstr(q.drop, pred));
    /* requeue: ids or, with NULL, all; drop: ids only. */
    cr_assert_not_null(strstr(q.requeue, "($1::bigint[] IS NULL OR o.\"id\" = ANY($1::bigint[]))"));
    cr_assert_not_null(strstr(q.drop, "o.\"id\" = ANY($1::bigint[])"));
    cr_assert_null(strstr(q.drop, "IS NULL OR o.\"id\""));
    sql_dead_free(&q);
}

Test(sql, dead_statements_refuse_invalid_identifiers)
{
    struct sql_dead q;
    cr_assert_eq(sql_dead_init(&q, "public", "outbox\"; DROP TABLE x; --", 0), -EINVAL);
    cr_assert_null(q.list);
    cr_assert_eq(sql_dead_init(&q, "pub lic", "outbox", 0), -EINVAL);
    cr_assert_eq(sql_dead_init(&q, NULL, "outbox", 0), -EINVAL);
}

/* ---- sql_capture.c: log-based capture ------------------------------------ */

Test(sql_capture, refuses_identifiers_that_are_not_plain)
{
    struct sql_capture s;
    cr_assert_eq(sql_capture_init(&s, "public", "outbox", "pub\"x"), -EINVAL);
    cr_assert_null(s.slot_status);
    cr_assert_eq(sql_capture_init(&s, "public", "out box", "pub"), -EINVAL);
    cr_assert_eq(sql_capture_init(&s, "", "outbox", "pub"), -EINVAL);
}

Test(sql_capture, slot_names_follow_postgresql)
{
    cr_assert(sql_capture_slot_valid("outbox_relay"));
    cr_assert(sql_capture_slot_valid("0slot"));
    cr_assert(sql_capture_slot_valid("abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk")); /* 63 */
    cr_assert(!sql_capture_slot_valid("abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl"));
    cr_assert(!sql_capture_slot_valid("Outbox"));
    cr_assert(!sql_capture_slot_valid("a-b"));
    cr_assert(!sql_capture_slot_valid("a'b"));
    cr_assert(!sql_capture_slot_valid(""));
    cr_assert(!sql_capture_slot_valid(NULL));
}

Test(sql_capture, statements_quote_names_and_take_values_as_parameters)
{
    struct sql_capture s;
    cr_assert_eq(sql_capture_init(&s, "app", "Outbox", "outbox_pub"), 0);
    cr_assert(strstr(s.slot_status, "FROM (SELECT CASE WHEN pg_catalog.pg_is_in_recovery()"));
    cr_assert(strstr(s.slot_status, "LEFT JOIN pg_catalog.pg_replication_slots AS s ON s.slot_name = $1::name"));
    /* the timeline of the current position, to notice a failover */
    cr_assert(strstr(s.slot_status, "ELSE pg_catalog.pg_walfile_name(w.lsn) END"));
    cr_assert(strstr(s.slot_status, "t.pubname = $2::name AND t.schemaname = 'app' AND t.tablename = 'Outbox'"));
    cr_assert(strstr(s.create_publication,
                     "CREATE PUBLICATION \"outbox_pub\" FOR TABLE \"app\".\"Outbox\" WITH (publish = 'insert');"));
    cr_assert(strstr(s.create_publication, "ALTER PUBLICATION \"outbox_pub\" ADD TABLE \"app\".\"Outbox\";"));
    cr_assert(strstr(s.create_slot, "pg_create_logical_replication_slot($1::name, 'pgoutput')"));
    cr_assert(strstr(s.drop_slot, "pg_drop_replication_slot(s.slot_name) WHERE s.slot_name = $1::name"));
    cr_assert_str_eq(s.heartbeat, "SELECT pg_catalog.pg_logical_emit_message(true, $1::text, ''::text)");
    cr_assert(strstr(s.retention, "DELETE FROM \"app\".\"Outbox\" WHERE ctid = ANY(ARRAY(SELECT ctid FROM "
                                  "\"app\".\"Outbox\" WHERE \"created_at\" < $1::timestamptz"));
    cr_assert(strstr(s.retention, "LIMIT $2::int))"));

    cr_assert(strstr(s.create_failover_slot,
                     "pg_create_logical_replication_slot($1::name, 'pgoutput', failover => true)"));
    cr_assert(strstr(s.failover_state, "current_setting('synchronized_standby_slots', true)"));
    cr_assert(strstr(s.failover_state, "WHERE s.slot_name = $1::name"));

    char *script = sql_capture_script(&s, "outbox_slot", false);
    cr_assert_not_null(script);
    cr_assert(strstr(script, s.create_publication));
    cr_assert(strstr(script, "pg_create_logical_replication_slot('outbox_slot', 'pgoutput')"));
    cr_assert_null(strstr(script, "$1"));
    free(script);
    script = sql_capture_script(&s, "outbox_slot", true);
    cr_assert(strstr(script, "pg_create_logical_replication_slot('outbox_slot', 'pgoutput', failover => true)"));
    free(script);
    cr_assert_null(sql_capture_script(&s, "bad'slot", false));
    sql_capture_free(&s);
    cr_assert_null(s.create_slot);
}

Test(sql_capture, start_replication_quotes_the_slot_and_the_publication)
{
    char *cmd = sql_capture_start_replication("outbox_slot", "Outbox_pub", 0x16B374D848ull);
    cr_assert_not_null(cmd);
    cr_assert_str_eq(cmd, "START_REPLICATION SLOT \"outbox_slot\" LOGICAL 16/B374D848 (proto_version "
                          "'1', publication_names '\"Outbox_pub\"', messages 'true')");
    free(cmd);
    cmd = sql_capture_start_replication("s", "p", 0);
    cr_assert(strstr(cmd, "LOGICAL 0/0 ("));
    free(cmd);
    cr_assert_null(sql_capture_start_replication("bad\"slot", "p", 0));
    cr_assert_null(sql_capture_start_replication("slot", "p'); DROP", 0));
}

/* --- polling Debezium's table through a view ----------------------------- */

static const struct sql_debezium_map dbz_map = {
    .schema = "app", .table = "outbox", .event_id = "id", .aggregate_type = "aggregatetype",
    .aggregate_id = "aggregateid", .event_type = "type", .payload = "payload",
    .created_at = "timestamp", .n_placed = 2, .placed = {"tenant", "part"}};

Test(sql, debezium_view_maps_the_columns_under_the_relay_names)
{
    char *v = sql_debezium_view(&dbz_map);
    cr_assert_not_null(v);
    cr_assert_not_null(strstr(v, "DROP VIEW IF EXISTS \"app\".\"outbox_relay\";\n"
                                 "CREATE VIEW \"app\".\"outbox_relay\" AS SELECT "
                                 "t.\"relay_seq\" AS \"id\", t.\"id\" AS \"event_id\", "
                                 "t.\"aggregatetype\"::text AS \"aggregate_type\", "
                                 "t.\"aggregateid\"::text AS \"aggregate_id\", "
                                 "t.\"type\"::text AS \"event_type\", NULL::text AS \"topic\", "
                                 "t.\"payload\" AS \"payload\", NULL::jsonb AS \"headers\", "
                                 "COALESCE(t.\"timestamp\" AT TIME ZONE 'UTC'"), "%s", v);
    cr_assert_not_null(strstr(v, "t.\"relay_sent_at\" AS \"sent_at\""));
    cr_assert_not_null(strstr(v, "t.\"tenant\" AS \"placed_1\", t.\"part\" AS \"placed_2\" "
                                 "FROM \"app\".\"outbox\" AS t;"));
    char *sig = sql_debezium_signature(&dbz_map);
    cr_assert_not_null(strstr(v, "COMMENT ON VIEW \"app\".\"outbox_relay\" IS '"));
    cr_assert_not_null(strstr(v, sig));
    cr_assert_not_null(strstr(sig, "placed=tenant,part"));
    free(sig);
    free(v);

    struct sql_debezium_map bad = dbz_map;
    bad.placed[1] = "x\"; DROP TABLE y; --";
    cr_assert_null(sql_debezium_view(&bad));
    cr_assert_null(sql_debezium_signature(&bad));
    char name[64];
    cr_assert_eq(sql_debezium_view_name("abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuv", name,
                                        sizeof name), 0);
    cr_assert_str_eq(name, "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuv_relay");
}

Test(sql, claim_and_window_read_the_placed_columns_last)
{
    struct sql_statements s;
    cr_assert_eq(sql_statements_init(&s, "app", "outbox_relay", "c", SQL_PLACED(2)), 0);
    cr_assert_not_null(strstr(s.claim, "o.\"created_at\"::timestamptz, o.\"placed_1\", "
                                       "o.\"placed_2\" FROM \"app\".\"outbox_relay\" AS o"));
    sql_statements_free(&s);
    cr_assert_eq(sql_statements_init(&s, "app", "outbox_relay", "c", SQL_PLACED(9)), -EINVAL);
    struct sql_window w;
    cr_assert_eq(sql_window_init(&w, "app", "outbox_relay", 1), 0);
    cr_assert_not_null(strstr(w.rows, "o.\"dead_at\" IS NOT NULL, o.\"placed_1\" FROM"));
    /* The connector's rows (made before the migration) have no id. */
    cr_assert_not_null(strstr(w.bounds, "o.\"id\" IS NOT NULL AND"));
    sql_window_free(&w);
}

Test(sql, debezium_poll_template_adds_columns_without_rewriting_rows)
{
    char *t = sql_render_template_on(migration_debezium_poll, "app", "outbox_relay", "outbox",
                                     "chan");
    cr_assert_not_null(t);
    cr_assert_not_null(strstr(t, "ALTER TABLE \"app\".\"outbox\"\n"
                                 "    ADD COLUMN IF NOT EXISTS \"relay_seq\"        bigint,"));
    /* The rows already there count as sent; new rows start unsent. */
    cr_assert_not_null(strstr(t, "\"relay_sent_at\"    timestamptz DEFAULT '-infinity'"));
    cr_assert_not_null(strstr(t, "ALTER COLUMN \"relay_sent_at\" DROP DEFAULT"));
    cr_assert_not_null(strstr(t, "CREATE INDEX IF NOT EXISTS \"outbox_relay_pending_idx\"\n"
                                 "    ON \"app\".\"outbox\" (\"relay_seq\")"));
    cr_assert_not_null(strstr(t, "AFTER INSERT ON \"app\".\"outbox\""));
    /* Marks, failures, verify and replay find rows by relay_seq: without an
     * index of its own each would scan the table. */
    cr_assert_not_null(strstr(t, "CREATE UNIQUE INDEX IF NOT EXISTS \"outbox_relay_seq_idx\"\n"
                                 "    ON \"app\".\"outbox\" (\"relay_seq\")"));
    /* The position before which rows are the connector's, from the first run only. */
    cr_assert_not_null(strstr(t, "IF obj_description('\"app\".\"outbox_relay_seq\"'::regclass, "
                                 "'pg_class') IS NULL THEN"));
    cr_assert_not_null(strstr(t, "'outbox-relay: the rows committed before WAL position '"));
    /* The trigger calls schema/004's function rendered for the view: its
     * quiet lock is keyed on what the relay claims from. */
    cr_assert_not_null(strstr(t, "EXECUTE FUNCTION \"app\".\"outbox_relay_notify\"()"));
    free(t);
    const char *fn = NULL;
    for (unsigned i = 0; i < n_migrations; i++)
        if (migrations[i].version == 4)
            fn = migrations[i].sql;
    char *f = sql_render_template(fn, "app", "outbox_relay", "chan");
    cr_assert_not_null(strstr(f, "FUNCTION \"app\".\"outbox_relay_notify\"()"));
    cr_assert_not_null(strstr(f, "'outbox-relay:quiet:' || 'app.outbox_relay'"));
    free(f);
}

Test(sql_capture, slot_with_its_snapshot_in_each_servers_syntax)
{
    char *c = sql_capture_create_slot_export("outbox_slot", 140011, false);
    cr_assert_str_eq(c, "CREATE_REPLICATION_SLOT \"outbox_slot\" LOGICAL pgoutput EXPORT_SNAPSHOT");
    free(c);
    c = sql_capture_create_slot_export("outbox_slot", 150004, false);
    cr_assert_str_eq(c, "CREATE_REPLICATION_SLOT \"outbox_slot\" LOGICAL pgoutput "
                        "(SNAPSHOT 'export')");
    free(c);
    c = sql_capture_create_slot_export("outbox_slot", 170002, true);
    cr_assert_str_eq(c, "CREATE_REPLICATION_SLOT \"outbox_slot\" LOGICAL pgoutput "
                        "(SNAPSHOT 'export', FAILOVER)");
    free(c);
    cr_assert_null(sql_capture_create_slot_export("outbox_slot", 160003, true),
                   "no failover slot before 17");
    cr_assert_null(sql_capture_create_slot_export("bad\"slot", 170002, false));
    cr_assert_null(sql_capture_create_slot_export("", 170002, false));
}
