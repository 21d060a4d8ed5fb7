/* migrate.c — applies schema/ migrations, each once, each in one transaction.
 *
 * Blocking libpq is fine here: migrate is a one-shot command, not the loop.
 * All migrations of all tables serialise on one transaction-level advisory
 * lock, so two `migrate` processes at once (or a relay fleet starting
 * together) end in the same state as one. */
#include "cmd/migrate.h"
#include "cmd/migrate_int.h"

#include <errno.h>
#include <stdbool.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errors.h"
#include "base/log.h"
#include "cmd/pg_session.h"
#include "core/sql.h"
#include "core/sql_floor.h"

int migrate_known_version(void)
{
    return n_migrations ? migrations[n_migrations - 1].version : 0;
}

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

int migrate_locked(PGconn *conn, const char *lock_sql, const char *what, const char *sql)
{
    if (run(conn, "begin", "BEGIN") < 0)
        return -EIO;
    if (run(conn, "lock", lock_sql) < 0 || run(conn, what, sql) < 0 ||
        run(conn, "commit", "COMMIT") < 0) {
        rollback(conn);
        return -EIO;
    }
    return 0;
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

/* Runs the objects check (schema/objects.sql) in the open transaction.
 * @return how many objects are missing, their names joined into @p missing
 * (caller frees; NULL when none), or -EIO. */
static int missing_objects(PGconn *conn, const char *check, const char *absent_ok, char **missing)
{
    *missing = NULL;
    PGresult *res = PQexec(conn, check);
    if (!exec_ok(conn, "objects check", res)) {
        PQclear(res);
        return -EIO;
    }
    int rows = PQntuples(res), n = 0;
    size_t len = 0;
    FILE *out = rows > 0 ? open_memstream(missing, &len) : NULL;
    for (int i = 0; out && i < rows; i++) {
        if (absent_ok && strcmp(PQgetvalue(res, i, 0), absent_ok) == 0)
            continue;
        fprintf(out, "%s%s", n++ ? ", " : "", PQgetvalue(res, i, 0));
    }
    if (out)
        fclose(out);
    PQclear(res);
    return n;
}

/* The ledger says what was applied, not what still exists: a table dropped
 * by hand keeps its ledger rows. When objects are missing, every migration is
 * applied again (each one checks before it creates), in one transaction, and
 * the check runs again; what is still missing then needs a person.
 * @return 0 whole, 1 repaired, 2 newer than this binary (not checked), -EIO
 * (logged). */
static int check_objects(PGconn *conn, const struct sql_migrate *q, const char *qualified,
                         const char *schema, const char *table, const char *channel,
                         const char *absent_ok)
{
    char *check = sql_render_template(migration_objects_check, schema, table, channel);
    if (!check) {
        log_error("cannot render the objects check", "table=%s", qualified);
        return -EIO;
    }
    char *missing = NULL;
    int rc = -EIO;
    if (run(conn, "begin", "BEGIN") < 0)
        goto out;
    if (run(conn, "lock", q->lock) < 0)
        goto fail;

    /* A schema newer than this binary may have dropped or renamed what this
     * binary would look for (and would bring back). */
    const char *params[] = { qualified };
    PGresult *res = PQexecParams(conn, q->newest, 1, NULL, params, NULL, NULL, 0);
    if (!exec_ok(conn, "newest", res)) {
        PQclear(res);
        goto fail;
    }
    int newest = atoi(PQgetvalue(res, 0, 0));
    PQclear(res);
    int known = migrate_known_version();
    if (newest > known) {
        log_warn("schema is newer than this outbox-relay; its objects are not checked",
                 "table=%s schema_version=%d known_version=%d", qualified, newest, known);
        rollback(conn);
        rc = 2;
        goto out;
    }

    int n = missing_objects(conn, check, absent_ok, &missing);
    if (n <= 0) {
        rollback(conn);
        rc = n;
        goto out;
    }
    log_warn("schema objects are missing although their migrations are recorded; applying "
             "the migrations again",
             "table=%s missing=%s", qualified, log_quote(missing ? missing : ""));
    for (unsigned i = 0; i < n_migrations; i++) {
        char *sql = sql_render_template(migrations[i].sql, schema, table, channel);
        int ok = sql && run(conn, migrations[i].name, sql) == 0;
        free(sql);
        if (!ok)
            goto unrepairable;
    }
    free(missing);
    n = missing_objects(conn, check, absent_ok, &missing);
    if (n < 0)
        goto fail;
    if (n > 0)
        goto unrepairable;
    if (run(conn, "commit", "COMMIT") < 0)
        goto fail;
    log_info("schema repaired: the migrations were applied again", "table=%s", qualified);
    rc = 1;
    goto out;

unrepairable:
    /* A column dropped from a table that exists: CREATE TABLE IF NOT EXISTS
     * cannot bring it back, and migrate does not guess at data. */
    log_error("schema cannot be repaired by applying the migrations again; it was changed by "
              "hand and must be repaired by hand (or the table dropped, its rows saved, and "
              "migrate run again)",
              "table=%s missing=%s", qualified, log_quote(missing ? missing : ""));
fail:
    rollback(conn);
    rc = -EIO;
out:
    free(missing);
    free(check);
    return rc;
}

/* Connects for migrating and prepares the bookkeeping statements.
 * @return 0, -EHOSTUNREACH (logged) or -ENOMEM. */
static int migrate_open(const struct relay_config *cfg, PGconn **connp, struct sql_migrate *q)
{
    PGconn *conn = pg_session_open(cfg, "migrate", NULL, 0);
    if (!conn)
        return -EHOSTUNREACH;
    /* Keep NOTICEs such as "relation already exists, skipping" out of the output. */
    PQclear(PQexec(conn, "SET client_min_messages = warning"));
    if (sql_migrate_init(q, cfg->schema) < 0) {
        PQfinish(conn);
        return -ENOMEM;
    }
    *connp = conn;
    return 0;
}

/* How full migrate keeps the pages of the relay's own table, polled
 * (sql_floor_fill_pages); log-based capture fills them itself, with the
 * claim index dropped. */
static int fill_pages(PGconn *conn, const struct relay_config *cfg, const char *lock_sql)
{
    char *sql = sql_floor_fill_pages(cfg->schema, cfg->table, cfg->on_sent != RELAY_ON_SENT_DELETE);
    int rc = sql ? migrate_locked(conn, lock_sql, "fillfactor", sql) : -ENOMEM;
    free(sql);
    if (rc < 0)
        log_error("cannot set the outbox table's fillfactor (migrate needs to own the table)",
                  "table=%s.%s", cfg->schema, cfg->table);
    return rc < 0 ? -EIO : 0;
}

int migrate_run(const struct relay_config *cfg)
{
    PGconn *conn;
    struct sql_migrate q;
    int orc = migrate_open(cfg, &conn, &q);
    if (orc < 0)
        return orc;
    char qualified[160];
    snprintf(qualified, sizeof(qualified), "%s.%s", cfg->schema, cfg->table);

    /* Before anything changes: a server or role that cannot serve the slot. */
    bool wal = cfg->capture == RELAY_CAPTURE_WAL;
    int rc = wal ? migrate_capture_check(conn, cfg) : 0, applied = 0;
    /* Debezium's table is the application's: only the publication and the slot are ours. */
    bool own_table = cfg->profile == RELAY_PROFILE_OUTBOX, newer = false;
    for (unsigned i = 0; own_table && rc == 0 && i < n_migrations; i++) {
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
    if (rc == 0 && own_table) {
        /* Log-based capture drops the claim index (migrate_capture_apply). */
        char *absent_ok = wal ? sql_render_template("index {{table:xid_idx}}", cfg->schema,
                                                    cfg->table, cfg->notify_channel)
                              : NULL;
        rc = wal && !absent_ok ? -ENOMEM
                               : check_objects(conn, &q, qualified, cfg->schema, cfg->table,
                                               cfg->notify_channel, absent_ok);
        newer = rc == 2;
        rc = rc < 0 ? rc : 0;
        free(absent_ok);
    }
    if (rc == 0 && own_table && !wal && !newer)
        rc = fill_pages(conn, cfg, q.lock);
    if (rc == 0 && own_table)
        log_info("schema up to date", "table=%s applied=%d total=%u", qualified, applied,
                 n_migrations);
    if (rc == 0 && !own_table && !wal)
        rc = migrate_debezium_apply(conn, cfg, q.lock);
    if (rc == 0 && wal)
        rc = migrate_capture_apply(conn, cfg, q.lock);
    sql_migrate_free(&q);
    PQfinish(conn);
    return rc;
}

#define LEDGER_SUFFIX " (ledger)"

int migrate_ledger(const struct relay_config *cfg, const char *name)
{
    if (!sql_ident_valid(name)) {
        log_error("ledger name is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*, at most "
                  "48 bytes)", "ledger=%s", log_quote(name));
        return -EINVAL;
    }
    PGconn *conn;
    struct sql_migrate q;
    int orc = migrate_open(cfg, &conn, &q);
    if (orc < 0)
        return orc;
    /* Its own key in the bookkeeping: an outbox table of the same name keeps its own. */
    char qualified[200];
    snprintf(qualified, sizeof qualified, "%s.%s" LEDGER_SUFFIX, cfg->schema, name);
    int rc = 0, applied = 0;
    for (unsigned i = 0; i < n_ledger_migrations && rc == 0; i++) {
        rc = apply_one(conn, &ledger_migrations[i], &q, qualified, cfg->schema, name,
                       cfg->notify_channel);
        if (rc < 0)
            log_error("migration failed", "ledger=%s version=%d name=%s", log_quote(qualified),
                      ledger_migrations[i].version, ledger_migrations[i].name);
        else if (rc == 1) {
            applied++;
            log_info("migration applied", "ledger=%s version=%d name=%s", log_quote(qualified),
                     ledger_migrations[i].version, ledger_migrations[i].name);
            rc = 0;
        }
    }
    if (rc == 0)
        log_info("ledger up to date", "ledger=%s applied=%d total=%u", log_quote(qualified), applied,
                 n_ledger_migrations);
    sql_migrate_free(&q);
    PQfinish(conn);
    return rc;
}

int migrate_print_sql(const struct relay_config *cfg, const char *ledger, FILE *out)
{
    const struct migration *set = ledger ? ledger_migrations : migrations;
    /* Debezium's table is the application's: only what capture needs is ours. */
    unsigned n = ledger ? n_ledger_migrations
                        : cfg->profile == RELAY_PROFILE_OUTBOX ? n_migrations : 0;
    const char *table = ledger ? ledger : cfg->table;
    if (!sql_ident_valid(table))
        return -EINVAL;
    fprintf(out,
            "-- outbox-relay %s schema for %s.%s, rendered by `outbox-relay migrate --print-sql%s%s`.\n"
            "-- Every migration checks before it creates, so the script can run again. To\n"
            "-- apply it with another tool (Flyway, Liquibase, sqitch), keep each migration\n"
            "-- below as one versioned change, in order.\n",
            ledger ? "ledger" : "outbox", cfg->schema, table, ledger ? " --ledger " : "",
            ledger ? ledger : "");
    for (unsigned i = 0; i < n; i++) {
        char *sql = sql_render_template(set[i].sql, cfg->schema, table, cfg->notify_channel);
        if (!sql)
            return -EINVAL;
        fprintf(out, "\n-- ---- migration %d: %s\n\n%s", set[i].version, set[i].name, sql);
        free(sql);
    }
    if (!ledger && cfg->capture == RELAY_CAPTURE_WAL)
        return migrate_capture_print(cfg, out);
    if (!ledger && cfg->profile == RELAY_PROFILE_DEBEZIUM)
        return migrate_debezium_print(cfg, out);
    return 0;
}

void migrate_usage(FILE *out)
{
    fprintf(out,
            "Usage: outbox-relay migrate [--ledger NAME] [--print-sql]\n"
            "       (plus the -c FILE and -X section.key=value options of every command)\n"
            "\n"
            "  (no option)     create or upgrade the outbox table (relay.schema, relay.table),\n"
            "                  its index, notification trigger and enqueue function\n"
            "  --ledger NAME   create or upgrade the consumer's event ledger NAME instead\n"
            "  --print-sql     print the SQL instead of applying it; change nothing\n"
            "\n"
            "Each migration is applied once, under an advisory lock: running migrate again,\n"
            "or twice at once, is safe. Objects a migration created that were dropped by\n"
            "hand are created again.\n"
            "With relay.profile = debezium and relay.capture = poll it adds the relay's\n"
            "columns (relay_*), indexes and trigger to Debezium's table, rewriting no row\n"
            "(the rows already there count as sent), and the view \"<table>_relay\" that\n"
            "the relay claims through; it prints the WAL position after which the rows\n"
            "are the relay's.\n"
            "With relay.capture = wal it also creates the publication (relay.publication)\n"
            "of the table and the logical replication slot (relay.slot, plugin pgoutput),\n"
            "each unless it exists. That needs wal_level = logical and a role with\n"
            "REPLICATION; migrate checks both first and says what to change.\n"
            "Exit status: 0 ok, 64 usage, 69 PostgreSQL unreachable, 70 a migration failed,\n"
            "78 configuration rejected.\n");
}

int migrate_main(const struct relay_config *cfg, int argc, char **argv)
{
    const char *ledger = NULL;
    bool print = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--print-sql") == 0) {
            print = true;
        } else if (strcmp(argv[i], "--ledger") == 0 && i + 1 < argc) {
            ledger = argv[++i];
        } else if (strncmp(argv[i], "--ledger=", 9) == 0) {
            ledger = argv[i] + 9;
        } else {
            fprintf(stderr, "outbox-relay migrate: unexpected \"%s\"\n", argv[i]);
            migrate_usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (ledger && !sql_ident_valid(ledger)) {
        fprintf(stderr, "outbox-relay migrate: --ledger: \"%s\" is not a plain SQL identifier "
                        "([A-Za-z_][A-Za-z0-9_]*, at most 48 bytes)\n", ledger);
        return EXIT_USAGE;
    }
    if (print) {
        int rc = migrate_print_sql(cfg, ledger, stdout);
        if (fflush(stdout) != 0)
            rc = -EIO;
        return rc == 0 ? EXIT_OK : EXIT_SOFTWARE;
    }
    int rc = ledger ? migrate_ledger(cfg, ledger) : migrate_run(cfg);
    return rc == 0 ? EXIT_OK : rc == -EHOSTUNREACH ? EXIT_UNAVAILABLE : EXIT_SOFTWARE;
}
