/* migrate.c — applies schema/ migrations, each once, each in one transaction.
 *
 * Blocking libpq is fine here: migrate is a one-shot command, not the loop.
 * All migrations of all tables serialise on one transaction-level advisory
 * lock, so two `migrate` processes at once (or a relay fleet starting
 * together) end in the same state as one. */
#include "migrate.h"

#include <errno.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sql.h"

static int exec_ok(PGconn *conn, const char *what, PGresult *res)
{
    ExecStatusType st = PQresultStatus(res);
    int ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    if (!ok)
        log_error("migration statement failed", "step=%s error=%s", what,
                  log_quote(PQresultErrorMessage(res)));
    (void)conn;
    return ok;
}

static int run(PGconn *conn, const char *what, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    int ok = exec_ok(conn, what, res);
    PQclear(res);
    return ok ? 0 : -EIO;
}

static void rollback(PGconn *conn)
{
    PQclear(PQexec(conn, "ROLLBACK"));
}

/* Applies one migration unless the bookkeeping says it already was.
 * @return 1 applied, 0 already there, -EIO on failure (rolled back). */
static int apply_one(PGconn *conn, const struct migration *m, const struct sql_migrate *q,
                     const char *qualified, const char *schema, const char *table,
                     const char *channel)
{
    if (run(conn, "begin", "BEGIN") < 0)
        return -EIO;
    if (run(conn, "lock", q->lock) < 0 || run(conn, "bookkeeping", q->create_schema) < 0 ||
        run(conn, "bookkeeping", q->create_table) < 0)
        goto fail;

    char version[16];
    snprintf(version, sizeof(version), "%d", m->version);
    const char *params[] = { qualified, version, m->name };

    PGresult *res = PQexecParams(conn, q->applied, 2, NULL, params, NULL, NULL, 0);
    if (!exec_ok(conn, "check", res)) {
        PQclear(res);
        goto fail;
    }
    int already = PQntuples(res) > 0;
    PQclear(res);
    if (already) {
        rollback(conn);
        return 0;
    }

    char *sql = sql_render_template(m->sql, schema, table, channel);
    if (!sql) {
        log_error("cannot render migration", "version=%d name=%s", m->version, m->name);
        goto fail;
    }
    int rc = run(conn, m->name, sql);
    free(sql);
    if (rc < 0)
        goto fail;

    res = PQexecParams(conn, q->record, 3, NULL, params, NULL, NULL, 0);
    rc = exec_ok(conn, "record", res) ? 0 : -EIO;
    PQclear(res);
    if (rc < 0 || run(conn, "commit", "COMMIT") < 0)
        goto fail;
    return 1;

fail:
    rollback(conn);
    return -EIO;
}

int migrate_run(const struct relay_config *cfg)
{
    PGconn *conn = PQconnectdb(cfg->pg_conninfo);
    if (PQstatus(conn) != CONNECTION_OK) {
        log_error("cannot connect to postgres", "error=%s",
                  log_quote_pq(cfg->pg_conninfo, PQerrorMessage(conn)));
        PQfinish(conn);
        return -EHOSTUNREACH;
    }
    /* Keep NOTICEs such as "relation already exists, skipping" out of the output. */
    PQclear(PQexec(conn, "SET client_min_messages = warning"));

    struct sql_migrate q;
    if (sql_migrate_init(&q, cfg->schema) < 0) {
        PQfinish(conn);
        return -ENOMEM;
    }
    char qualified[160];
    snprintf(qualified, sizeof(qualified), "%s.%s", cfg->schema, cfg->table);

    int rc = 0, applied = 0;
    for (unsigned i = 0; i < n_migrations; i++) {
        rc = apply_one(conn, &migrations[i], &q, qualified, cfg->schema, cfg->table,
                       cfg->notify_channel);
        if (rc < 0) {
            log_error("migration failed", "table=%s version=%d name=%s", qualified,
                      migrations[i].version, migrations[i].name);
            break;
        }
        if (rc == 1) {
            applied++;
            log_info("migration applied", "table=%s version=%d name=%s", qualified,
                     migrations[i].version, migrations[i].name);
        }
        rc = 0;
    }
    if (rc == 0)
        log_info("schema up to date", "table=%s applied=%d total=%u", qualified, applied,
                 n_migrations);
    sql_migrate_free(&q);
    PQfinish(conn);
    return rc;
}
