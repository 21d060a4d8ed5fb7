/* sql_capture.c — the SQL of log-based capture: the publication and the
 * pgoutput slot that migrate creates, the slot's status, its removal, the
 * heartbeat and retention. Identifiers are checked and quoted here; the slot
 * name and every other value travel as parameters, except in the script of
 * `migrate --print-sql`, where the slot name is a checked, quoted literal. */
#include "core/sql_capture.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/event.h"
#include "core/sql.h"

/* Room for a quoted identifier of at most 48 bytes (sql_ident_valid), and
 * "schema"."table" of two. Valid identifiers hold no quote: no overflow. */
#define QIDENT_MAX 104
#define QUALIFIED_MAX (2 * QIDENT_MAX + 2)

int sql_capture_slot_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return 0;
    }
    return 1;
}

/* The names of one outbox table and its publication, quoted as the
 * statements need them. */
struct names {
    char qualified[QUALIFIED_MAX]; /* "schema"."table" */
    char qpub[QIDENT_MAX];         /* "publication" */
    char lschema[QIDENT_MAX];      /* 'schema' */
    char ltable[QIDENT_MAX];       /* 'table' */
    char lpub[QIDENT_MAX];         /* 'publication' */
};

static void names_fill(struct names *n, const char *schema, const char *table,
                       const char *publication)
{
    char qschema[QIDENT_MAX], qtable[QIDENT_MAX];
    sql_quote_ident(schema, qschema, sizeof qschema);
    sql_quote_ident(table, qtable, sizeof qtable);
    snprintf(n->qualified, sizeof n->qualified, "%s.%s", qschema, qtable);
    sql_quote_ident(publication, n->qpub, sizeof n->qpub);
    sql_quote_literal(schema, n->lschema, sizeof n->lschema);
    sql_quote_literal(table, n->ltable, sizeof n->ltable);
    sql_quote_literal(publication, n->lpub, sizeof n->lpub);
}

/* The slot's row, whether it exists or not: VALUES (1) LEFT JOIN the view.
 * On a standby pg_current_wal_lsn() fails; the replayed position stands in.
 * The publication counts only when it publishes inserts: the relay reads
 * nothing else. Columns: enum slot_col. */
static int build_slot_status(char **dst, const struct names *n)
{
    return sql_build(dst,
                 "SELECT s.slot_name IS NOT NULL, s.plugin::text, "
                 "COALESCE(s.database = current_database(), false), "
                 "COALESCE(s.active, false), s.active_pid, s.wal_status, "
                 "s.confirmed_flush_lsn::text, s.restart_lsn::text, "
                 "pg_catalog.pg_wal_lsn_diff(w.lsn, s.restart_lsn)::bigint, "
                 "pg_catalog.pg_wal_lsn_diff(w.lsn, s.confirmed_flush_lsn)::bigint, "
                 "EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables AS t "
                 "JOIN pg_catalog.pg_publication AS p ON p.pubname = t.pubname "
                 "WHERE t.pubname = $2::name AND t.schemaname = %s AND t.tablename = %s "
                 "AND p.pubinsert), "
                 "CASE WHEN pg_catalog.pg_is_in_recovery() THEN NULL "
                 "ELSE pg_catalog.pg_walfile_name(w.lsn) END "
                 "FROM (SELECT CASE WHEN pg_catalog.pg_is_in_recovery() "
                 "THEN pg_catalog.pg_last_wal_replay_lsn() "
                 "ELSE pg_catalog.pg_current_wal_lsn() END AS lsn) AS w "
                 "LEFT JOIN pg_catalog.pg_replication_slots AS s ON s.slot_name = $1::name",
                 n->lschema, n->ltable);
}

/* PostgreSQL 15 has no CREATE PUBLICATION IF NOT EXISTS. An existing
 * publication keeps its options: only the table is added when missing. */
static int build_create_publication(char **dst, const struct names *n)
{
    return sql_build(dst,
                 "DO $outbox_relay$\n"
                 "BEGIN\n"
                 "    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = %s) THEN\n"
                 "        CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert');\n"
                 "    ELSIF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables\n"
                 "                      WHERE pubname = %s AND schemaname = %s AND tablename = %s) THEN\n"
                 "        ALTER PUBLICATION %s ADD TABLE %s;\n"
                 "    END IF;\n"
                 "END\n"
                 "$outbox_relay$",
                 n->lpub, n->qpub, n->qualified, n->lpub, n->lschema, n->ltable, n->qpub,
                 n->qualified);
}

/* CASE evaluates its ELSE only when no slot of that name exists; the
 * statement must run in a transaction that has written nothing (PostgreSQL
 * refuses to create a logical slot in one that has). @p name is an SQL
 * expression: a parameter, or a quoted literal for the script. */
static int build_create_slot(char **dst, const char *name, bool failover)
{
    return sql_build(dst,
                 "SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots "
                 "WHERE slot_name = %s) THEN false "
                 "ELSE (pg_catalog.pg_create_logical_replication_slot(%s, 'pgoutput'%s)).slot_name "
                 "IS NOT NULL END",
                 name, name, failover ? ", failover => true" : "");
}

/* What a failover slot needs of the primary. The slot's failover flag is
 * read through to_jsonb: the column exists from PostgreSQL 17 on only, and
 * the same statement also serves older servers (to be refused by name). */
static int build_failover_state(char **dst)
{
    return sql_build(dst,
                 "WITH w AS (SELECT NULLIF(pg_catalog.btrim(n, ' \"'), '') AS n "
                 "FROM pg_catalog.unnest(pg_catalog.string_to_array(COALESCE("
                 "pg_catalog.current_setting('synchronized_standby_slots', true), ''), ',')) AS n) "
                 "SELECT pg_catalog.current_setting('server_version_num')::int, "
                 "COALESCE(pg_catalog.current_setting('synchronized_standby_slots', true), ''), "
                 "(SELECT (pg_catalog.to_jsonb(s) ->> 'failover')::bool "
                 "FROM pg_catalog.pg_replication_slots AS s WHERE s.slot_name = $1::name), "
                 "(SELECT pg_catalog.string_agg(w.n, ',') FROM w WHERE w.n IS NOT NULL AND NOT EXISTS "
                 "(SELECT 1 FROM pg_catalog.pg_replication_slots AS p WHERE p.slot_name = w.n "
                 "AND p.slot_type = 'physical')), "
                 "(SELECT pg_catalog.string_agg(w.n, ',') FROM w JOIN pg_catalog.pg_replication_slots "
                 "AS p ON p.slot_name = w.n AND p.slot_type = 'physical' WHERE NOT p.active)");
}

/* What migrate checks before it creates anything: the server's wal_level and
 * the role's attributes (creating and streaming a slot need REPLICATION). */
static int build_requirements(char **dst)
{
    return sql_build(dst,
                 "SELECT current_setting('wal_level'), r.rolname::text, r.rolsuper, "
                 "r.rolreplication FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user");
}

static int build_publication_state(char **dst, const struct names *n)
{
    return sql_build(dst,
                 "SELECT p.oid IS NOT NULL, EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables "
                 "AS t WHERE t.pubname = %s AND t.schemaname = %s AND t.tablename = %s), "
                 "COALESCE(p.pubinsert, false) "
                 "FROM (VALUES (1)) AS one LEFT JOIN pg_catalog.pg_publication AS p "
                 "ON p.pubname = %s",
                 n->lpub, n->lschema, n->ltable, n->lpub);
}

int sql_capture_init(struct sql_capture *s, const char *schema, const char *table,
                     const char *publication)
{
    memset(s, 0, sizeof *s);
    if (!sql_ident_valid(schema) || !sql_ident_valid(table) || !sql_ident_valid(publication))
        return -EINVAL;
    struct names n;
    names_fill(&n, schema, table, publication);

    int rc = build_slot_status(&s->slot_status, &n);
    rc |= build_create_publication(&s->create_publication, &n);
    rc |= build_create_slot(&s->create_slot, "$1::name", false);
    rc |= build_create_slot(&s->create_failover_slot, "$1::name", true);
    rc |= build_failover_state(&s->failover_state);
    rc |= build_requirements(&s->requirements);
    rc |= build_publication_state(&s->publication_state, &n);
    /* The lateral call runs only for the slot's row: none when it is absent. */
    rc |= sql_build(&s->drop_slot,
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots AS s, "
                "LATERAL pg_catalog.pg_drop_replication_slot(s.slot_name) "
                "WHERE s.slot_name = $1::name)");
    /* Only the leader runs it, once its Kafka transactions fenced older leaders. */
    rc |= sql_build(&s->take_over,
                "SELECT s.active_pid, a.application_name, "
                "pg_catalog.pg_terminate_backend(s.active_pid) "
                "FROM pg_catalog.pg_replication_slots AS s "
                "LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid = s.active_pid "
                "WHERE s.slot_name = $1::name AND s.active_pid IS NOT NULL "
                "AND s.active_pid <> pg_catalog.pg_backend_pid()");
    /* Idempotent: a replayed stream records the same event again as one more attempt. */
    rc |= sql_build(&s->record_dead,
                "INSERT INTO %s AS o (\"event_id\", \"aggregate_type\", \"aggregate_id\", "
                "\"event_type\", \"topic\", \"payload\", \"headers\", \"created_at\", "
                "\"attempts\", \"last_error\", \"dead_at\") "
                "VALUES ($1::uuid, $2, $3, $4, $5, $6::jsonb, $7::jsonb, "
                "COALESCE($8::timestamptz, pg_catalog.clock_timestamp()), 1, $9, "
                "pg_catalog.clock_timestamp()) "
                "ON CONFLICT (\"event_id\") DO UPDATE SET \"attempts\" = o.\"attempts\" + 1, "
                "\"last_error\" = EXCLUDED.\"last_error\", "
                "\"dead_at\" = COALESCE(o.\"dead_at\", EXCLUDED.\"dead_at\")",
                n.qualified);
    rc |= sql_build(&s->heartbeat, "SELECT pg_catalog.pg_logical_emit_message(true, $1::text, ''::text)");
    /* Small batches, oldest ids first, by the rows' physical addresses: each
     * DELETE holds its row locks briefly. */
    rc |= sql_build(&s->retention,
                "DELETE FROM %s WHERE ctid = ANY(ARRAY(SELECT ctid FROM %s "
                "WHERE \"created_at\" < $1::timestamptz ORDER BY \"id\" LIMIT $2::int))",
                n.qualified, n.qualified);
    if (rc != 0) {
        sql_capture_free(s);
        return -ENOMEM;
    }
    return 0;
}

char *sql_capture_start_replication(const char *slot, const char *publication, uint64_t lsn)
{
    if (!sql_capture_slot_valid(slot) || !sql_ident_valid(publication))
        return NULL;
    char qslot[QIDENT_MAX], qpub[QIDENT_MAX], lpub[QIDENT_MAX + 4];
    sql_quote_ident(slot, qslot, sizeof qslot);
    sql_quote_ident(publication, qpub, sizeof qpub);
    sql_quote_literal(qpub, lpub, sizeof lpub);
    char *out = NULL;
    if (sql_build(&out,
              "START_REPLICATION SLOT %s LOGICAL %X/%X (proto_version '1', "
              "publication_names %s, messages 'true')",
              qslot, (unsigned)(lsn >> 32), (unsigned)(lsn & 0xffffffffu), lpub) < 0)
        return NULL;
    return out;
}

char *sql_capture_create_slot_export(const char *slot, int server_version, bool failover)
{
    if (!sql_capture_slot_valid(slot) || (failover && server_version < 170000))
        return NULL;
    char qslot[QIDENT_MAX];
    sql_quote_ident(slot, qslot, sizeof qslot);
    char *out = NULL;
    /* 14 knows only the older keyword syntax; 15 on still read it, but the
     * FAILOVER option (17 on) exists only in the parenthesised one. */
    int rc = server_version < 150000
                 ? sql_build(&out, "CREATE_REPLICATION_SLOT %s LOGICAL pgoutput EXPORT_SNAPSHOT",
                             qslot)
                 : sql_build(&out, "CREATE_REPLICATION_SLOT %s LOGICAL pgoutput "
                                   "(SNAPSHOT 'export'%s)", qslot, failover ? ", FAILOVER" : "");
    return rc < 0 ? NULL : out;
}

static char *dup_or_null(const char *s, size_t len)
{
    return s ? strndup(s, len) : NULL;
}

int sql_capture_dead_params(char *params[SQL_CAPTURE_DEAD_NPARAMS], const struct event_row *row,
                            const char *event_id, const char *why)
{
    const char *empty = "";
    params[0] = strdup(event_id);
    params[1] = strdup(row && row->aggregate_type ? row->aggregate_type : empty);
    params[2] = strdup(row && row->aggregate_id ? row->aggregate_id : empty);
    params[3] = strdup(row && row->event_type ? row->event_type : empty);
    params[4] = row && row->topic ? strdup(row->topic) : NULL;
    params[5] = row ? dup_or_null(row->payload, row->payload_len) : NULL;
    params[6] = row && row->headers_json ? strdup(row->headers_json) : NULL;
    params[7] = row && row->created_at && *row->created_at ? strdup(row->created_at) : NULL;
    params[8] = strdup(why);
    if (params[0] && params[1] && params[2] && params[3] && params[8])
        return 0;
    sql_capture_dead_params_free(params);
    return -ENOMEM;
}

void sql_capture_dead_params_free(char *params[SQL_CAPTURE_DEAD_NPARAMS])
{
    for (int i = 0; i < SQL_CAPTURE_DEAD_NPARAMS; i++) {
        free(params[i]);
        params[i] = NULL;
    }
}

char *sql_capture_script(const struct sql_capture *s, const char *slot, bool failover)
{
    if (!s->create_publication || !sql_capture_slot_valid(slot))
        return NULL;
    char lslot[QIDENT_MAX];
    sql_quote_literal(slot, lslot, sizeof lslot);
    char *create = NULL, *out = NULL;
    if (build_create_slot(&create, lslot, failover) == 0 &&
        sql_build(&out,
              "%s;\n\n"
              "-- The slot: PostgreSQL refuses to create it in a transaction that has written\n"
              "-- anything, so run this statement on its own (not inside BEGIN ... COMMIT).\n"
              "-- It needs wal_level = logical and a role with REPLICATION (or a superuser).\n"
              "%s;\n",
              s->create_publication, create) < 0)
        out = NULL;
    free(create);
    return out;
}

void sql_capture_free(struct sql_capture *s)
{
    free(s->slot_status);
    free(s->create_publication);
    free(s->create_slot);
    free(s->create_failover_slot);
    free(s->failover_state);
    free(s->drop_slot);
    free(s->heartbeat);
    free(s->take_over);
    free(s->record_dead);
    free(s->retention);
    free(s->requirements);
    free(s->publication_state);
    memset(s, 0, sizeof *s);
}

/* The columns of a table, their types' names, NOT NULL and DEFAULT ($1: the
 * table, quoted and qualified, as regclass text): what relay.profile =
 * debezium checks at start. */
const char sql_table_columns[] =
    "SELECT a.attname::text, t.typname::text, a.attnotnull, a.atthasdef "
    "FROM pg_catalog.pg_attribute AS a "
    "JOIN pg_catalog.pg_type AS t ON t.oid = a.atttypid "
    "WHERE a.attrelid = pg_catalog.to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped";
