/* profile_check.c — the start-time check of relay.profile = debezium: every
 * column the profile reads is there, with a type the relay publishes as
 * Debezium does (see profile_check.h). */
#include "cmd/profile_check.h"

#include <errno.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errors.h"
#include "cmd/pg_session.h"
#include "core/event.h"
#include "core/sql.h"
#include "core/sql_capture.h"
#include "core/sql_debezium.h"

/* Type names (pg_type.typname) whose pgoutput text is what Debezium's
 * converters write for them. */
static const char *const text_types[] = {"text", "varchar", "bpchar", NULL};
/* Polled, a column is read as text, which drops a char(n)'s trailing blanks. */
static const char *const poll_text_types[] = {"text", "varchar", NULL};
static const char *const id_types[] = {"uuid", "text", "varchar", NULL};
static const char *const payload_types[] = {"jsonb", "json", "text", "varchar", NULL};
/* The Event Router reads only Timestamp, MicroTimestamp or NanoTimestamp as
 * the event timestamp: a timestamp without time zone. */
static const char *const time_types[] = {"timestamp", NULL};
static const char *const header_types[] = {"text", "varchar", "uuid", "int2", "int4", "int8",
                                           "jsonb", "json", NULL};
/* The Event Router reads a partition with getInt32. */
static const char *const partition_types[] = {"int4", NULL};

struct need {
    const char *key;    /* the configuration key naming the column */
    const char *column;
    const char *const *types;
};

static bool one_of(const char *type, const char *const *types)
{
    for (size_t i = 0; types[i]; i++)
        if (!strcmp(type, types[i]))
            return true;
    return false;
}

static void types_text(const char *const *types, char *out, size_t len)
{
    out[0] = '\0';
    for (size_t i = 0; types[i]; i++) {
        size_t used = strlen(out);
        snprintf(out + used, len - used, "%s%s", i ? ", " : "", types[i]);
    }
}

/* One needed column against the table's @p res. */
static int check_one(const PGresult *res, const struct relay_config *cfg, const struct need *n,
                     char *why, size_t len)
{
    char allowed[128];
    types_text(n->types, allowed, sizeof allowed);
    for (int i = 0; i < PQntuples(res); i++) {
        if (strcmp(PQgetvalue(res, i, 0), n->column) != 0)
            continue;
        if (one_of(PQgetvalue(res, i, 1), n->types))
            return 0;
        return errbuf_fail(why, len,
                           "column \"%s\" of \"%s\".\"%s\" (%s) is of type %s; the debezium "
                           "profile needs %s",
                           n->column, cfg->schema, cfg->table, n->key, PQgetvalue(res, i, 1),
                           allowed);
    }
    return errbuf_fail(why, len,
                       "\"%s\".\"%s\" has no column \"%s\" (%s), which the debezium profile reads",
                       cfg->schema, cfg->table, n->column, n->key);
}

/* What JsonConverter's schemas say of column @p name (@p key its setting):
 * its type and whether it is nullable. A DEFAULT would be in Debezium's
 * schema, which the relay does not write. */
static int column_facts(const PGresult *res, const struct relay_config *cfg, const char *key,
                        const char *name, struct connect_column *out, char *why, size_t len)
{
    for (int i = 0; i < PQntuples(res); i++) {
        if (strcmp(PQgetvalue(res, i, 0), name) != 0)
            continue;
        int type = connect_type_of(PQgetvalue(res, i, 1));
        if (type < 0)
            break; /* check_one() said so */
        if (!strcmp(PQgetvalue(res, i, 3), "t"))
            return errbuf_fail(why, len,
                               "column \"%s\" of \"%s\".\"%s\" (%s) has a DEFAULT, which "
                               "Debezium writes into the schema of json_with_schema: not "
                               "supported", name, cfg->schema, cfg->table, key);
        *out = (struct connect_column){ .type = (enum connect_type)type,
                                        .optional = strcmp(PQgetvalue(res, i, 2), "t") != 0 };
        return 0;
    }
    return 0;
}

static int schema_facts(const PGresult *res, const struct relay_config *cfg,
                        const struct event_placement *pl, struct connect_columns *cols, char *why,
                        size_t len)
{
    int rc = 0;
    if (cfg->key_converter == EVENT_CONVERTER_JSON_SCHEMA)
        rc = column_facts(res, cfg, "relay.column_aggregate_id", cfg->column_aggregate_id,
                          &cols->key, why, len);
    if (!rc && cfg->value_converter == EVENT_CONVERTER_JSON_SCHEMA)
        rc = column_facts(res, cfg, "relay.column_payload", cfg->column_payload, &cols->payload,
                          why, len);
    bool envelope_schemas = cfg->value_converter == EVENT_CONVERTER_JSON_SCHEMA;
    for (size_t i = 0; !rc && envelope_schemas && i < pl->n; i++)
        if (pl->where[i] == EVENT_PLACE_ENVELOPE)
            rc = column_facts(res, cfg, "relay.additional_placement", pl->column[i],
                              &cols->placed[i], why, len);
    return rc;
}

static int check_columns(const PGresult *res, const struct relay_config *cfg,
                         struct connect_columns *cols, char *why, size_t len)
{
    if (PQntuples(res) == 0)
        return errbuf_fail(why, len, "the outbox table \"%s\".\"%s\" does not exist", cfg->schema,
                           cfg->table);
    const char *const *texts = cfg->capture == RELAY_CAPTURE_POLL ? poll_text_types : text_types;
    struct need needs[5 + EVENT_PLACEMENT_MAX] = {
        {"relay.column_event_id", cfg->column_event_id, id_types},
        {"relay.column_aggregate_type", cfg->column_aggregate_type, texts},
        {"relay.column_aggregate_id", cfg->column_aggregate_id, texts},
        {"relay.column_payload", cfg->column_payload, payload_types},
    };
    size_t n = 4;
    if (*cfg->column_created_at)
        needs[n++] = (struct need){"relay.column_created_at", cfg->column_created_at, time_types};
    struct event_placement pl;
    if (event_placement_parse(cfg->additional_placement, &pl, why, len) < 0)
        return -EINVAL;
    for (size_t i = 0; i < pl.n; i++)
        needs[n++] = (struct need){"relay.additional_placement", pl.column[i],
                                   pl.where[i] == EVENT_PLACE_PARTITION ? partition_types
                                                                        : header_types};
    for (size_t i = 0; i < n; i++)
        if (check_one(res, cfg, &needs[i], why, len) < 0)
            return -EINVAL;
    return schema_facts(res, cfg, &pl, cols, why, len);
}

int profile_view_map(const struct relay_config *cfg, struct event_placement *pl,
                     struct sql_debezium_map *m)
{
    if (event_placement_parse(cfg->additional_placement, pl, NULL, 0) < 0)
        return -EINVAL;
    *m = (struct sql_debezium_map){
        .schema = cfg->schema, .table = cfg->table, .event_id = cfg->column_event_id,
        .aggregate_type = cfg->column_aggregate_type, .aggregate_id = cfg->column_aggregate_id,
        .event_type = cfg->column_event_type, .payload = cfg->column_payload,
        .created_at = cfg->column_created_at, .n_placed = pl->n,
    };
    for (size_t k = 0; k < pl->n; k++)
        m->placed[k] = pl->column[k];
    return 0;
}

/* capture = poll: the view, when migrate made it, was made for this
 * configuration (no view yet: the relay waits for migrate, and says so). */
static int check_view(PGconn *conn, const struct relay_config *cfg, char *why, size_t len)
{
    struct event_placement pl;
    struct sql_debezium_map m;
    char view[64], qualified[260];
    if (profile_view_map(cfg, &pl, &m) < 0 || sql_debezium_view_name(cfg->table, view,
                                                                     sizeof view) < 0)
        return errbuf_fail(why, len, "relay.table \"%s\" is too long for the view \"%s%s\"",
                           cfg->table, cfg->table, SQL_DEBEZIUM_VIEW_SUFFIX);
    char *want = sql_debezium_signature(&m);
    sql_quote_qualified(cfg->schema, view, qualified, sizeof qualified);
    const char *params[] = {qualified};
    PGresult *res = PQexecParams(conn, sql_debezium_comment, 1, NULL, params, NULL, NULL, 0);
    int rc = PQresultStatus(res) == PGRES_TUPLES_OK ? 0 : -EHOSTUNREACH;
    if (rc == 0 && !want)
        rc = -ENOMEM;
    if (rc == 0 && !PQgetisnull(res, 0, 0) && strcmp(PQgetvalue(res, 0, 0), want) != 0)
        rc = errbuf_fail(why, len,
                         "the view \"%s\".\"%s\" was made for another configuration (%s); "
                         "this one needs \"%s\": run `outbox-relay migrate` with it",
                         cfg->schema, view, PQgetvalue(res, 0, 0), want);
    PQclear(res);
    free(want);
    return rc;
}

int profile_check(const struct relay_config *cfg, struct connect_columns *cols, char *why,
                  size_t len)
{
    memset(cols, 0, sizeof *cols);
    if (cfg->profile != RELAY_PROFILE_DEBEZIUM)
        return 0;
    /* Unreachable is not this check's to report: the caller decides. */
    char ignored[256];
    PGconn *conn = pg_session_open(cfg, "profile-check", ignored, sizeof ignored);
    if (!conn)
        return -EHOSTUNREACH;
    char qualified[260];
    sql_quote_qualified(cfg->schema, cfg->table, qualified, sizeof qualified);
    const char *params[] = {qualified};
    PGresult *res = PQexecParams(conn, sql_table_columns, 1, NULL, params, NULL, NULL, 0);
    int rc = PQresultStatus(res) == PGRES_TUPLES_OK ? check_columns(res, cfg, cols, why, len)
                                                    : -EHOSTUNREACH;
    PQclear(res);
    if (rc == 0 && cfg->capture == RELAY_CAPTURE_POLL)
        rc = check_view(conn, cfg, why, len);
    PQfinish(conn);
    return rc;
}
