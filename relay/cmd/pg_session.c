/* pg_session.c — see pg_session.h. */
#include "cmd/pg_session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "core/pg_failure.h"

/* The conninfo is parsed here, not handed over as an expandable dbname: that
 * would take a conninfo without "=" (a mistyped URI) for a database name,
 * whose text libpq then quotes back, instead of failing with libpq's own
 * syntax error. */
static PGconn *connect_parsed(const PQconninfoOption *opts, const char *app_name,
                              bool replication)
{
    size_t n = 0;
    for (const PQconninfoOption *o = opts; o->keyword; o++)
        n++;
    const char **keys = calloc(n + 3, sizeof(*keys));
    const char **values = calloc(n + 3, sizeof(*values));
    PGconn *conn = NULL;
    if (keys && values) {
        /* First, so that a fallback_application_name of the conninfo wins. */
        size_t k = 0;
        keys[k] = "fallback_application_name";
        values[k++] = app_name;
        for (const PQconninfoOption *o = opts; o->keyword; o++) {
            if (o->val && !(replication && strcmp(o->keyword, "replication") == 0)) {
                keys[k] = o->keyword;
                values[k++] = o->val;
            }
        }
        if (replication) {
            keys[k] = "replication";
            values[k++] = "database";
        }
        keys[k] = NULL;
        conn = PQconnectdbParams(keys, values, 0);
    }
    free(keys);
    free(values);
    return conn;
}

static void report(const char *conninfo, const char *message, char *err, size_t errlen)
{
    const char *quoted = log_quote_pq(conninfo, message);
    const char *hint = pg_failure_hint(message);
    if (err)
        snprintf(err, errlen, "cannot connect to postgres: %s%s%s", quoted, hint ? "; hint: " : "",
                 hint ? hint : "");
    else if (hint)
        log_error("cannot connect to postgres", "error=%s hint=%s", quoted, log_quote(hint));
    else
        log_error("cannot connect to postgres", "error=%s", quoted);
}

static PGconn *open_session(const struct relay_config *cfg, const char *command, bool replication,
                            char *err, size_t errlen)
{
    char app_name[64];
    snprintf(app_name, sizeof app_name, "outbox-relay %s", command);
    char *parse_error = NULL;
    PQconninfoOption *opts = PQconninfoParse(cfg->pg_conninfo, &parse_error);
    if (!opts) {
        report(cfg->pg_conninfo, parse_error ? parse_error : "out of memory", err, errlen);
        PQfreemem(parse_error);
        return NULL;
    }
    PGconn *conn = connect_parsed(opts, app_name, replication);
    PQconninfoFree(opts);
    if (PQstatus(conn) == CONNECTION_OK)
        return conn;
    report(cfg->pg_conninfo, conn ? PQerrorMessage(conn) : "out of memory", err, errlen);
    PQfinish(conn);
    return NULL;
}

PGconn *pg_session_open(const struct relay_config *cfg, const char *command, char *err,
                        size_t errlen)
{
    return open_session(cfg, command, false, err, errlen);
}

PGconn *pg_session_open_replication(const struct relay_config *cfg, const char *command,
                                    char *err, size_t errlen)
{
    return open_session(cfg, command, true, err, errlen);
}
