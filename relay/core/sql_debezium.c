/* sql_debezium.c — the view over Debezium's outbox table (sql_debezium.h).
 *
 * An automatically updatable view: one table, each of the relay's columns a
 * column of it or an expression. The relay updates only the columns that
 * are the table's own (sent_at, attempts, last_error, dead_at), so its
 * marks, failures and the dead-row commands pass through to the table, and
 * its claim's conditions reach the table's partial indexes. */
#include "core/sql_debezium.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sql.h"

#define IDENT_QUOTED 104 /* a valid identifier (48 bytes) quoted */

const char sql_debezium_comment[] =
    "SELECT obj_description(to_regclass($1), 'pg_class')";

/* The position out of the comment schema/debezium_poll.sql writes. */
const char sql_debezium_boundary[] =
    "SELECT b.lsn::text, s.confirmed_flush_lsn::text, "
    "s.slot_name IS NOT NULL AND b.lsn IS NOT NULL "
    "AND (s.confirmed_flush_lsn IS NULL OR s.confirmed_flush_lsn < b.lsn) "
    "FROM (SELECT substring(obj_description(to_regclass($1), 'pg_class') "
    "FROM 'WAL position ([0-9A-F]+/[0-9A-F]+)')::pg_lsn AS lsn) AS b "
    "LEFT JOIN pg_catalog.pg_replication_slots AS s ON s.slot_name = $2";

int sql_debezium_view_name(const char *table, char *out, size_t len)
{
    if (!sql_ident_valid(table))
        return -EINVAL;
    int n = snprintf(out, len, "%s" SQL_DEBEZIUM_VIEW_SUFFIX, table);
    return n > 0 && (size_t)n < len && n <= 63 ? 0 : -EINVAL;
}

int sql_debezium_seq(const char *schema, const char *table, char *out, size_t len)
{
    char view[64], seq[80];
    if (sql_debezium_view_name(table, view, sizeof view) < 0)
        return -EINVAL;
    snprintf(seq, sizeof seq, "%s" SQL_DEBEZIUM_SEQ_SUFFIX, view);
    return sql_quote_qualified(schema, seq, out, len);
}

static int map_valid(const struct sql_debezium_map *m)
{
    const char *must[] = {m->schema, m->table, m->event_id, m->aggregate_type, m->aggregate_id,
                          m->payload};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        if (!sql_ident_valid(must[i]))
            return 0;
    if ((*m->event_type && !sql_ident_valid(m->event_type)) ||
        (*m->created_at && !sql_ident_valid(m->created_at)) || m->n_placed > 8)
        return 0;
    for (size_t k = 0; k < m->n_placed; k++)
        if (!sql_ident_valid(m->placed[k]))
            return 0;
    return 1;
}

char *sql_debezium_signature(const struct sql_debezium_map *m)
{
    if (!map_valid(m))
        return NULL;
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f)
        return NULL;
    fprintf(f, "outbox-relay view of %s.%s, version 1: event_id=%s aggregate_type=%s "
               "aggregate_id=%s event_type=%s payload=%s created_at=%s placed=",
            m->schema, m->table, m->event_id, m->aggregate_type, m->aggregate_id, m->event_type,
            m->payload, m->created_at);
    for (size_t k = 0; k < m->n_placed; k++)
        fprintf(f, "%s%s", k ? "," : "", m->placed[k]);
    if (fclose(f) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* t."column" of a valid identifier. */
static void col(const char *name, char *out, size_t len)
{
    char q[IDENT_QUOTED];
    sql_quote_ident(name, q, sizeof q);
    snprintf(out, len, "t.%s", q);
}

/* The view's SELECT list: the relay's columns (CLAIM_COLUMNS and the
 * others sql.c names), then placed_1... */
static void select_list(FILE *f, const struct sql_debezium_map *m)
{
    char id[IDENT_QUOTED + 4], type[IDENT_QUOTED + 4], key[IDENT_QUOTED + 4];
    char payload[IDENT_QUOTED + 4], event_type[IDENT_QUOTED + 4], created[IDENT_QUOTED + 4];
    col(m->event_id, id, sizeof id);
    col(m->aggregate_type, type, sizeof type);
    col(m->aggregate_id, key, sizeof key);
    col(m->payload, payload, sizeof payload);
    fprintf(f, "t.\"relay_seq\" AS \"id\", %s AS \"event_id\", %s::text AS \"aggregate_type\", "
               "%s::text AS \"aggregate_id\", ",
            id, type, key);
    if (*m->event_type) {
        col(m->event_type, event_type, sizeof event_type);
        fprintf(f, "%s::text AS \"event_type\", ", event_type);
    } else {
        fputs("NULL::text AS \"event_type\", ", f);
    }
    fprintf(f, "NULL::text AS \"topic\", %s AS \"payload\", NULL::jsonb AS \"headers\", ",
            payload);
    /* The Event Router reads a timestamp without time zone as UTC. The rows
     * made before the migration have no insert time. */
    if (*m->created_at) {
        col(m->created_at, created, sizeof created);
        fprintf(f, "COALESCE(%s AT TIME ZONE 'UTC', t.\"relay_created_at\", '-infinity') "
                   "AS \"created_at\", ", created);
    } else {
        fputs("COALESCE(t.\"relay_created_at\", '-infinity') AS \"created_at\", ", f);
    }
    fputs("t.\"relay_sent_at\" AS \"sent_at\", t.\"relay_attempts\" AS \"attempts\", "
          "t.\"relay_last_error\" AS \"last_error\", t.\"relay_dead_at\" AS \"dead_at\"", f);
    for (size_t k = 0; k < m->n_placed; k++) {
        char placed[IDENT_QUOTED + 4];
        col(m->placed[k], placed, sizeof placed);
        fprintf(f, ", %s AS \"placed_%zu\"", placed, k + 1);
    }
}

char *sql_debezium_view(const struct sql_debezium_map *m)
{
    char view[64], qview[2 * IDENT_QUOTED + 2], qtable[2 * IDENT_QUOTED + 2];
    char *sig = sql_debezium_signature(m);
    if (!sig || sql_debezium_view_name(m->table, view, sizeof view) < 0) {
        free(sig);
        return NULL;
    }
    char *lit = malloc(2 * strlen(sig) + 4);
    if (!lit || sql_quote_literal(sig, lit, 2 * strlen(sig) + 4) < 0) {
        free(sig);
        free(lit);
        return NULL;
    }
    sql_quote_qualified(m->schema, view, qview, sizeof qview);
    sql_quote_qualified(m->schema, m->table, qtable, sizeof qtable);

    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (f) {
        /* Dropped first: CREATE OR REPLACE cannot take a column away. */
        fprintf(f, "DROP VIEW IF EXISTS %s;\nCREATE VIEW %s AS SELECT ", qview, qview);
        select_list(f, m);
        fprintf(f, " FROM %s AS t;\nCOMMENT ON VIEW %s IS %s;\n", qtable, qview, lit);
    }
    free(sig);
    free(lit);
    if (!f || fclose(f) != 0) {
        free(out);
        return NULL;
    }
    return out;
}
