/* migrate_debezium.c — migrate for relay.capture = poll in the debezium
 * profile: the application's table gets the relay's columns, its indexes and
 * its trigger, and the view the relay reads it through (migrate_int.h). */
#include "cmd/migrate.h"
#include "cmd/migrate_int.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cmd/profile_check.h"
#include "core/sql.h"
#include "core/sql_debezium.h"

/* schema/004: the trigger's function, the same as the relay's own table's. */
static const char *notify_function(void)
{
    for (unsigned i = 0; i < n_migrations; i++)
        if (migrations[i].version == 4)
            return migrations[i].sql;
    return NULL;
}

/* The trigger's function and the template rendered for the view, then the
 * view's statements. */
static char *render(const struct relay_config *cfg)
{
    struct event_placement pl;
    struct sql_debezium_map m;
    char view[64];
    if (profile_view_map(cfg, &pl, &m) < 0 || sql_debezium_view_name(cfg->table, view,
                                                                     sizeof view) < 0)
        return NULL;
    const char *fn = notify_function();
    char *notify = fn ? sql_render_template(fn, cfg->schema, view, cfg->notify_channel) : NULL;
    char *tmpl = sql_render_template_on(migration_debezium_poll, cfg->schema, view, cfg->table,
                                        cfg->notify_channel);
    char *v = sql_debezium_view(&m);
    char *out = NULL;
    if (notify && tmpl && v && asprintf(&out, "%s\n%s\n%s", notify, tmpl, v) < 0)
        out = NULL;
    free(notify);
    free(tmpl);
    free(v);
    return out;
}

int migrate_debezium_apply(PGconn *conn, const struct relay_config *cfg, const char *lock_sql)
{
    char *sql = render(cfg);
    if (!sql) {
        log_error("cannot render the view over Debezium's table", "table=%s.%s", cfg->schema,
                  cfg->table);
        return -EIO;
    }
    int rc = migrate_locked(conn, lock_sql, "debezium_poll", sql);
    free(sql);
    if (rc < 0)
        return rc;
    /* The position the first migration recorded (the rows before it are
     * the connector's) and where the connector's slot is. */
    char qualified[260];
    sql_debezium_seq(cfg->schema, cfg->table, qualified, sizeof qualified);
    const char *params[] = {qualified, cfg->slot};
    PGresult *res = PQexecParams(conn, sql_debezium_boundary, 2, NULL, params, NULL, NULL, 0);
    bool ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
    log_info("Debezium's table is ready for polling: the rows committed before the position are "
             "the connector's, the later ones the relay's, which starts once the connector's "
             "slot (relay.slot) has confirmed past the position",
             "table=%s.%s position=%s slot=%s confirmed=%s", cfg->schema, cfg->table,
             ok ? PQgetvalue(res, 0, 0) : "?", cfg->slot,
             !ok || PQgetisnull(res, 0, 1) ? "(no such slot)" : PQgetvalue(res, 0, 1));
    if (ok && PQgetisnull(res, 0, 1))
        log_warn("relay.slot names no replication slot: the relay will not wait for the "
                 "connector to publish the rows before the position; set relay.slot to the "
                 "connector's slot (slot.name) unless it is gone",
                 "slot=%s", cfg->slot);
    PQclear(res);
    return 0;
}

int migrate_debezium_print(const struct relay_config *cfg, FILE *out)
{
    char *sql = render(cfg);
    if (!sql)
        return -EINVAL;
    fprintf(out, "\n-- ---- relay.capture = poll on Debezium's table\n\n%s", sql);
    free(sql);
    return 0;
}
