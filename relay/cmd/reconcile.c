/* reconcile.c — a failover's gap in relay.capture = wal closed from the
 * table and Kafka (cmd/reconcile.h). */
#include "cmd/reconcile.h"

#include <errno.h>
#include <libpq-fe.h>
#include <stdio.h>

#include "cmd/pg_session.h"
#include "cmd/replay.h"
#include "cmd/verify.h"
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

int reconcile_gap_run(const struct relay_config *cfg, struct reconcile_gap *g, char *err,
                      size_t errlen)
{
    int rc = make_slot(cfg, &g->created, err, errlen);
    if (rc < 0)
        return rc;
    struct vcheck v;
    vcheck_init(&v, 0);
    v.want_absent = true;
    struct verify_opts o = {.w = {.since = g->since}, .no_fence = true, .stop = g->stop};
    struct verify_meta meta;
    rc = verify_run(cfg, &o, &v, &meta, err, errlen);
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
