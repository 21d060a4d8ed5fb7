/* migrate_capture.c — what migrate does for log-based capture (relay.capture
 * = wal): checks that the server and the role allow a logical slot, then
 * creates the publication of the outbox table and the pgoutput slot.
 *
 * Both are created under migrate's advisory lock, so two migrates at once
 * end as one. The slot is created in a transaction of its own that writes
 * nothing (the lock assigns no transaction id): PostgreSQL refuses to create
 * a logical slot in a transaction that has written. Creating it waits until
 * every transaction already running has ended (the slot's starting snapshot). */
#include "cmd/migrate_int.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "core/sql.h"
#include "core/sql_floor.h"
#include "core/slot_failover.h"
#include "core/sql_capture.h"

static bool is_true(const PGresult *res, int col)
{
    return !PQgetisnull(res, 0, col) && PQgetvalue(res, 0, col)[0] == 't';
}

/* Runs @p sql (with @p slot as $1 when not NULL) and expects rows.
 * @return the result, or NULL after logging the failure. */
static PGresult *query(PGconn *conn, const char *what, const char *sql, const char *slot,
                       const char *publication)
{
    const char *params[] = {slot, publication};
    int n = publication ? 2 : slot ? 1 : 0;
    PGresult *res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);
    if ((st == PGRES_TUPLES_OK && PQntuples(res) == 1) || st == PGRES_COMMAND_OK)
        return res;
    log_error("capture statement failed", "step=%s error=%s", what,
              log_quote(st == PGRES_TUPLES_OK ? "not one row" : PQresultErrorMessage(res)));
    PQclear(res);
    return NULL;
}

static bool run(PGconn *conn, const char *what, const char *sql)
{
    PGresult *res = query(conn, what, sql, NULL, NULL);
    PQclear(res);
    return res != NULL;
}

int migrate_capture_check(PGconn *conn, const struct relay_config *cfg)
{
    struct sql_capture q;
    if (sql_capture_init(&q, cfg->schema, cfg->table, cfg->publication) < 0)
        return -EIO;
    PGresult *res = query(conn, "requirements", q.requirements, NULL, NULL);
    sql_capture_free(&q);
    if (!res)
        return -EIO;
    int rc = 0;
    const char *wal_level = PQgetvalue(res, 0, REQ_WAL_LEVEL);
    if (strcmp(wal_level, "logical") != 0) {
        log_error("wal_level is not logical: relay.capture = wal reads the outbox through a "
                  "logical replication slot, which needs wal_level = logical in postgresql.conf; "
                  "the change takes effect only after PostgreSQL is restarted",
                  "wal_level=%s", wal_level);
        rc = -EIO;
    }
    if (!is_true(res, REQ_SUPERUSER) && !is_true(res, REQ_REPLICATION)) {
        const char *role = PQgetvalue(res, 0, REQ_ROLE);
        char qrole[2 * 64 + 4], grant[sizeof qrole + 32];
        if (sql_quote_ident(role, qrole, sizeof qrole) < 0)
            snprintf(qrole, sizeof qrole, "<role>");
        snprintf(grant, sizeof grant, "ALTER ROLE %s REPLICATION", qrole);
        log_error("the role lacks the REPLICATION attribute: relay.capture = wal creates and "
                  "streams from a replication slot, which needs it; a superuser grants it with "
                  "the statement in grant=. pg_hba.conf needs no 'replication' line for this: "
                  "that keyword matches physical replication only, and the relay's logical "
                  "replication connection (replication=database) is matched by the lines of its "
                  "database, like its other connections",
                  "role=%s grant=%s", log_quote(role), log_quote(grant));
        rc = -EIO;
    }
    PQclear(res);
    return rc;
}

/* The publication: created, or the table added to it, unless it already
 * publishes the table. An existing publication's options are the DBA's: one
 * that does not publish inserts is reported, not changed. */
static int apply_publication(PGconn *conn, const struct relay_config *cfg,
                             const struct sql_capture *q, const char *lock_sql)
{
    PGresult *res = query(conn, "publication state", q->publication_state, NULL, NULL);
    if (!res)
        return -EIO;
    bool exists = is_true(res, 0), has_table = is_true(res, 1), inserts = is_true(res, 2);
    PQclear(res);
    if (exists && !inserts) {
        log_error("the publication does not publish inserts, which are all the relay reads; "
                  "change it with ALTER PUBLICATION ... SET (publish = 'insert') or name another "
                  "one in relay.publication",
                  "publication=%s", cfg->publication);
        return -EIO;
    }
    if (exists && has_table) {
        log_info("publication up to date", "publication=%s table=%s.%s", cfg->publication,
                 cfg->schema, cfg->table);
        return 0;
    }
    if (migrate_locked(conn, lock_sql, "publication", q->create_publication) < 0) {
        log_error("cannot create the publication (it needs the CREATE privilege on the "
                  "database and ownership of the outbox table)",
                  "publication=%s table=%s.%s", cfg->publication, cfg->schema, cfg->table);
        return -EIO;
    }
    log_info(exists ? "table added to the publication" : "publication created",
             "publication=%s table=%s.%s", cfg->publication, cfg->schema, cfg->table);
    return 0;
}

/* The index of the rows' transaction ids serves polling's claim only
 * (schema/005): with the stream it would cost every insert one more index
 * write (and the walsender one more WAL record to read), and no row is ever
 * marked, so its pages need no room for a second version. Migrate in polling
 * mode creates the index again and leaves room again. Only the relay's own
 * table has it. */
static int drop_claim_index(PGconn *conn, const struct relay_config *cfg, const char *lock_sql)
{
    char *drop = sql_floor_drop_claim_index(cfg->schema, cfg->table);
    if (!drop || migrate_locked(conn, lock_sql, "claim index", drop) < 0) {
        free(drop);
        log_error("cannot drop the claim index, which log-based capture does not use",
                  "table=%s.%s", cfg->schema, cfg->table);
        return -EIO;
    }
    free(drop);
    return 0;
}

/* relay.slot_failover = on: what the primary shows of a failover slot's
 * needs, judged before the slot is made (@p slot_made false) and after. */
static int check_failover(PGconn *conn, const struct relay_config *cfg, const struct sql_capture *q,
                          bool slot_made)
{
    if (cfg->slot_failover != RELAY_SLOT_FAILOVER_ON)
        return 0;
    PGresult *res = query(conn, "failover state", q->failover_state, cfg->slot, NULL);
    if (!res)
        return -EIO;
    const char *v[FO_NCOLS];
    for (int i = 0; i < FO_NCOLS; i++)
        v[i] = PQgetisnull(res, 0, i) ? NULL : PQgetvalue(res, 0, i);
    char why[1024];
    enum slot_failover_verdict verdict = slot_failover_judge(v, cfg->slot, slot_made, why, sizeof why);
    PQclear(res);
    if (verdict == SLOT_FAILOVER_REFUSE) {
        log_error("relay.slot_failover = on cannot be honoured", "slot=%s problem=%s", cfg->slot,
                  log_quote(why));
        return -EIO;
    }
    if (slot_made) {
        if (verdict == SLOT_FAILOVER_WARN)
            log_warn("failover slot not yet kept by a standby", "slot=%s problem=%s", cfg->slot,
                     log_quote(why));
        else
            log_info("failover slot", "slot=%s needs=%s", cfg->slot, log_quote(why));
    }
    return 0;
}

/* The slot, in a transaction that takes migrate's lock and writes nothing. */
static int apply_slot(PGconn *conn, const struct relay_config *cfg, const struct sql_capture *q,
                      const char *lock_sql)
{
    bool failover = cfg->slot_failover == RELAY_SLOT_FAILOVER_ON;
    if (check_failover(conn, cfg, q, false) < 0)
        return -EIO;
    PGresult *res = NULL;
    bool ok = run(conn, "begin", "BEGIN") && run(conn, "lock", lock_sql) &&
              (res = query(conn, "slot", failover ? q->create_failover_slot : q->create_slot,
                           cfg->slot, NULL)) != NULL &&
              run(conn, "commit", "COMMIT");
    bool created = ok && is_true(res, 0);
    PQclear(res);
    if (!ok) {
        PQclear(PQexec(conn, "ROLLBACK"));
        log_error("cannot create the replication slot", "slot=%s", cfg->slot);
        return -EIO;
    }
    log_info(created ? "replication slot created" : "replication slot exists",
             "slot=%s plugin=pgoutput failover=%s", cfg->slot, failover ? "on" : "off");
    return check_failover(conn, cfg, q, true);
}

/* What makes the slot unusable for this relay, or NULL. */
static const char *slot_problem(const PGresult *res)
{
    if (!is_true(res, SLOT_EXISTS))
        return "the slot does not exist after it was created (dropped meanwhile?)";
    if (PQgetisnull(res, 0, SLOT_PLUGIN) || strcmp(PQgetvalue(res, 0, SLOT_PLUGIN), "pgoutput") != 0)
        return "a slot of that name exists but is not a logical slot of the pgoutput plugin: "
               "name another in relay.slot, or drop it if nothing uses it";
    if (!is_true(res, SLOT_DATABASE_OK))
        return "a slot of that name exists in another database of the cluster (slot names are "
               "cluster-wide): name another in relay.slot";
    if (!PQgetisnull(res, 0, SLOT_WAL_STATUS) && strcmp(PQgetvalue(res, 0, SLOT_WAL_STATUS), "lost") == 0)
        return "the slot is lost (PostgreSQL removed WAL it still needed): see outbox-relay slot status";
    if (!is_true(res, SLOT_PUBLICATION_OK))
        return "the publication does not publish the outbox table's inserts";
    return NULL;
}

int migrate_capture_apply(PGconn *conn, const struct relay_config *cfg, const char *lock_sql)
{
    struct sql_capture q;
    if (sql_capture_init(&q, cfg->schema, cfg->table, cfg->publication) < 0)
        return -EIO;
    int rc = apply_publication(conn, cfg, &q, lock_sql);
    if (rc == 0)
        rc = apply_slot(conn, cfg, &q, lock_sql);
    if (rc == 0 && cfg->profile == RELAY_PROFILE_OUTBOX)
        rc = drop_claim_index(conn, cfg, lock_sql);
    PGresult *res = rc == 0 ? query(conn, "slot status", q.slot_status, cfg->slot, cfg->publication)
                            : NULL;
    if (rc == 0 && !res)
        rc = -EIO;
    const char *problem = res ? slot_problem(res) : NULL;
    if (problem) {
        log_error("the replication slot cannot serve the relay", "slot=%s publication=%s problem=%s",
                  cfg->slot, cfg->publication, log_quote(problem));
        rc = -EIO;
    }
    PQclear(res);
    sql_capture_free(&q);
    return rc;
}

int migrate_capture_print(const struct relay_config *cfg, FILE *out)
{
    struct sql_capture q;
    if (sql_capture_init(&q, cfg->schema, cfg->table, cfg->publication) < 0)
        return -EINVAL;
    char *script = sql_capture_script(&q, cfg->slot, cfg->slot_failover == RELAY_SLOT_FAILOVER_ON);
    sql_capture_free(&q);
    char *drop = cfg->profile == RELAY_PROFILE_OUTBOX ? sql_floor_drop_claim_index(cfg->schema, cfg->table) : NULL;
    if (!script || (cfg->profile == RELAY_PROFILE_OUTBOX && !drop)) {
        free(script);
        return -EINVAL;
    }
    fprintf(out,
            "\n-- ---- log-based capture (relay.capture = wal): the publication %s and the\n"
            "-- logical replication slot %s (plugin pgoutput). It needs wal_level = logical.\n\n%s",
            cfg->publication, cfg->slot, script);
    if (drop)
        fprintf(out,
                "\n-- Polling claims by this index; the stream does not, and each insert would\n"
                "-- write it for nothing (migrate in polling mode creates it again).\n%s;\n",
                drop);
    free(drop);
    free(script);
    return 0;
}
