/* reconcile.c — a failover's gap in relay.capture = wal closed from the
 * table and Kafka (cmd/reconcile.h). */
#include "cmd/reconcile.h"

#include <errno.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cmd/pg_session.h"
#include "cmd/replay.h"
#include "cmd/verify.h"
#include "core/capture_recover.h"
#include "core/sql_capture.h"

/* Step 1 on a session of its own, in a transaction of the statement's own
 * (PostgreSQL refuses to make a logical slot in one that has written). */
static int make_slot(const struct relay_config *cfg, bool *created, char *err, size_t errlen)
{
    struct sql_capture q;
    if (sql_capture_init(&q, cfg->schema, cfg->table, cfg->publication) < 0) {
        snprintf(err, errlen, "cannot build the slot's statement");
        return -EINVAL;
    }
    PGconn *conn = pg_session_open(cfg, "slot recovery", err, errlen);
    int rc = conn ? 0 : -EHOSTUNREACH;
    if (conn) {
        const char *params[] = {cfg->slot};
        /* Remade on a promoted server, the slot is again one its standbys keep. */
        const char *create = cfg->slot_failover == RELAY_SLOT_FAILOVER_ON ? q.create_failover_slot
                                                                           : q.create_slot;
        PGresult *res = PQexecParams(conn, create, 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
            *created = !PQgetisnull(res, 0, 0) && PQgetvalue(res, 0, 0)[0] != 'f';
        else {
            snprintf(err, errlen, "creating the slot: %s", PQresultErrorMessage(res));
            rc = -EIO;
        }
        PQclear(res);
        PQfinish(conn);
    }
    sql_capture_free(&q);
    return rc;
}

/* Step 1 on a replication connection: the slot made with the snapshot it
 * was made in exported. On RECOVER_SLOT_SNAPSHOT *@p repl stays open, running
 * nothing, until the table is read in that snapshot (closing it, or any
 * command on it, ends the snapshot); *@p repl is NULL otherwise. */
static enum recover_slot export_slot(const struct relay_config *cfg, PGconn **repl,
                                     char *snapshot, size_t len, char *why, size_t whylen)
{
    *repl = pg_session_open_replication(cfg, "slot recovery", why, whylen);
    if (!*repl)
        return RECOVER_SLOT_BY_SQL;
    char *cmd = sql_capture_create_slot_export(cfg->slot, PQserverVersion(*repl),
                                               cfg->slot_failover == RELAY_SLOT_FAILOVER_ON);
    PGresult *res = cmd ? PQexec(*repl, cmd) : NULL;
    free(cmd);
    bool made = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
                PQnfields(res) >= 3;
    /* Its row: slot_name, consistent_point, snapshot_name, output_plugin. */
    const char *name = made && !PQgetisnull(res, 0, 2) ? PQgetvalue(res, 0, 2) : NULL;
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    enum recover_slot how = capture_recover_slot_made(made, name, state);
    if (how == RECOVER_SLOT_SNAPSHOT)
        snprintf(snapshot, len, "%s", name);
    else
        snprintf(why, whylen, "%s", res ? PQresultErrorMessage(res)
                                        : "no replication command for this server");
    PQclear(res);
    if (how != RECOVER_SLOT_SNAPSHOT) {
        PQfinish(*repl);
        *repl = NULL;
    }
    return how;
}

/* Step 1, the slot made if missing, in the way that lets step 2 read the
 * table in the slot's snapshot when the server allows it, else as before.
 * @return 0 or negative; *@p repl as export_slot leaves it. */
static int slot_for_gap(const struct relay_config *cfg, struct reconcile_gap *g, PGconn **repl,
                        char *snapshot, size_t len, enum recover_slot *how, char *err,
                        size_t errlen)
{
    char why[512] = "";
    *how = export_slot(cfg, repl, snapshot, len, why, sizeof why);
    g->created = *how == RECOVER_SLOT_SNAPSHOT || *how == RECOVER_SLOT_MADE;
    if (*how != RECOVER_SLOT_BY_SQL)
        return 0;
    log_warn("postgres failover: cannot make the slot with its snapshot exported; made through "
             "SQL, the table read in a snapshot of its own (rows committed meanwhile may come "
             "twice)", "slot=%s error=%s", cfg->slot, log_quote(why));
    return make_slot(cfg, &g->created, err, errlen);
}

int reconcile_gap_run(const struct relay_config *cfg, struct reconcile_gap *g, char *err,
                      size_t errlen)
{
    PGconn *repl = NULL;
    char snapshot[128] = "";
    enum recover_slot how;
    int rc = slot_for_gap(cfg, g, &repl, snapshot, sizeof snapshot, &how, err, errlen);
    if (rc < 0)
        return rc;
    struct vcheck v;
    vcheck_init(&v, 0);
    v.want_absent = true;
    struct verify_opts o = {.w = {.since = g->since}, .no_fence = true, .stop = g->stop,
                            .snapshot = repl ? snapshot : NULL};
    struct verify_meta meta;
    rc = verify_run(cfg, &o, &v, &meta, err, errlen);
    PQfinish(repl); /* the snapshot is imported (or refused): the slot is free to stream */
    g->table_read = capture_recover_table_read(how, meta.snapshot_imported);
    if (rc == 0 && v.absent_oom) {
        snprintf(err, errlen, "out of memory listing the rows Kafka lacks");
        rc = -ENOMEM;
    }
    g->absent = v.n_absent;
    if (rc == 0 && replay_ids(cfg, v.absent, v.n_absent, &g->published) != 0) {
        snprintf(err, errlen, "publishing the rows Kafka lacks failed (see the lines above)");
        rc = -EIO;
    }
    vcheck_free(&v);
    return rc;
}
