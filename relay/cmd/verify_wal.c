/* verify_wal.c — which rows verify may count as sent when relay.capture =
 * wal, where the relay never marks a row: the slot decides.
 *
 * The argument, step by step (verify.c does steps 1 and 4, this file 2 and 3):
 *
 * 1. verify reads the table in one REPEATABLE READ transaction, and its first
 *    statement (the window's bounds) takes the snapshot every page is read
 *    in. A row in that snapshot committed before the snapshot was taken, so
 *    its commit record is in the WAL before anything written afterwards.
 * 2. Then, on another connection, the fence: a transactional logical message
 *    with the heartbeat prefix, committed at once. pg_logical_emit_message()
 *    returns F, the end of the message's record: after the snapshot, so after
 *    the commit record of every row verify will read.
 * 3. The relay confirms the slot only to the end of a source transaction
 *    whose messages, and those of every transaction before it in commit
 *    order, Kafka acknowledged (committed, with fencing = transactional);
 *    keepalives never move it. It confirms the fence's own transaction too
 *    (a message with another prefix is not relayed, its commit is
 *    confirmed), so on a relay that keeps up confirmed_flush_lsn passes F
 *    within moments. Once confirmed_flush_lsn >= F, every transaction whose
 *    commit ended before F — every row of the snapshot — is on Kafka.
 * 4. So a row of the snapshot that is not dead counts as sent, and one the
 *    snapshot does not hold is not read at all. No created_at bound is
 *    needed: a transaction open across the fence that commits after it is
 *    not in the snapshot, whatever its created_at says (a bound
 *    created_at < time of F would count such a row as sent while the slot
 *    may not have reached it yet; the snapshot cannot).
 *
 * When the slot does not pass F within the settle time (the relay stopped,
 * halted on a poison event, or far behind), nothing can be told apart from
 * pending: every row not marked is pending, and the command says so with its
 * own exit status. What remains inexact is what the slot itself cannot know:
 * a row committed before the slot was created was never in its stream and
 * counts as sent (it is reported missing, which it is). */
#include "cmd/verify.h"

#include <errno.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/stats.h"
#include "cmd/pg_session.h"
#include "core/pgoutput.h"
#include "core/sql.h"
#include "core/sql_capture.h"

#define SETTLE_POLL_MS 100

/* The slot's confirmed_flush_lsn into *@p lsn (0 when unset).
 * @return 0, -ENOENT (no such slot, or another database's), or negative. */
static int slot_confirmed(PGconn *c, const struct sql_capture *q, const char *slot,
                          const char *publication, uint64_t *lsn, char *err, size_t errlen)
{
    const char *params[] = {slot, publication};
    PGresult *res = PQexecParams(c, q->slot_status, 2, NULL, params, NULL, NULL, 0);
    int rc = 0;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        snprintf(err, errlen, "reading the replication slot %s: %s", slot,
                 PQstatus(c) == CONNECTION_BAD ? PQerrorMessage(c) : PQresultErrorMessage(res));
        rc = PQstatus(c) == CONNECTION_BAD ? -EHOSTUNREACH : -EIO;
    } else if (PQgetvalue(res, 0, SLOT_EXISTS)[0] != 't' ||
               PQgetvalue(res, 0, SLOT_DATABASE_OK)[0] != 't') {
        snprintf(err, errlen,
                 "the replication slot %s does not exist in this database (relay.slot; "
                 "`outbox-relay migrate` creates it)", slot);
        rc = -ENOENT;
    } else {
        *lsn = PQgetisnull(res, 0, SLOT_CONFIRMED_LSN)
                   ? 0 : pgo_lsn_parse(PQgetvalue(res, 0, SLOT_CONFIRMED_LSN));
    }
    PQclear(res);
    return rc;
}

/* Writes the fence; *@p f its LSN. @return 0 or negative. */
static int emit_fence(PGconn *c, const struct sql_capture *q, struct verify_fence *f, char *err,
                      size_t errlen)
{
    const char *params[] = {SQL_CAPTURE_HEARTBEAT_PREFIX};
    PGresult *res = PQexecParams(c, q->heartbeat, 1, NULL, params, NULL, NULL, 0);
    int rc = 0;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        snprintf(err, errlen, "writing verify's fence (pg_logical_emit_message): %s",
                 PQstatus(c) == CONNECTION_BAD ? PQerrorMessage(c) : PQresultErrorMessage(res));
        rc = PQstatus(c) == CONNECTION_BAD ? -EHOSTUNREACH : -EIO;
    } else {
        snprintf(f->lsn_text, sizeof f->lsn_text, "%s", PQgetvalue(res, 0, 0));
        f->lsn = pgo_lsn_parse(f->lsn_text);
    }
    PQclear(res);
    return rc;
}

int verify_wal_fence(const struct relay_config *cfg, int64_t settle_ms, atomic_int *stop,
                     struct verify_fence *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    struct sql_capture q;
    if (sql_capture_init(&q, cfg->schema, cfg->table, cfg->publication) < 0) {
        snprintf(err, errlen, "cannot build the slot's statements");
        return -EINVAL;
    }
    /* Not the reading connection: that one holds the snapshot, and the fence
     * must commit now. */
    PGconn *c = pg_session_open(cfg, "verify", err, errlen);
    int rc = c ? 0 : -EHOSTUNREACH;
    uint64_t confirmed = 0;
    if (rc == 0) /* a missing slot is an error before anything is written */
        rc = slot_confirmed(c, &q, cfg->slot, cfg->publication, &confirmed, err, errlen);
    if (rc == 0)
        rc = emit_fence(c, &q, f, err, errlen);
    double start = stats_now();
    while (rc == 0) {
        rc = slot_confirmed(c, &q, cfg->slot, cfg->publication, &confirmed, err, errlen);
        if (rc == 0 && confirmed >= f->lsn) {
            f->passed = true;
            break;
        }
        if (rc == 0 && stop && atomic_load(stop))
            rc = -EINTR;
        if (rc == 0 && (stats_now() - start) * 1000 >= (double)settle_ms)
            break;
        if (rc == 0)
            usleep(SETTLE_POLL_MS * 1000);
    }
    f->waited = stats_now() - start;
    pgo_lsn_text(confirmed, f->confirmed_text);
    PQfinish(c);
    sql_capture_free(&q);
    return rc;
}

bool verify_wal_snapshot(PGconn *c, const char *snapshot)
{
    char lit[128], cmd[160];
    bool ok = sql_quote_literal(snapshot, lit, sizeof lit) >= 0;
    PGresult *res = NULL;
    if (ok) {
        snprintf(cmd, sizeof cmd, "SET TRANSACTION SNAPSHOT %s", lit);
        res = PQexec(c, cmd);
        ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    }
    if (ok) {
        PQclear(res);
        return true;
    }
    /* The exporting connection gone, or another server of a host list:
     * a snapshot taken now is still after the slot was made, so nothing is
     * lost by reading in it; only rows committed meanwhile may come twice. */
    log_warn("verify: cannot read in the slot's snapshot; reading in one of its own",
             "snapshot=%s error=%s", snapshot,
             log_quote(res ? PQresultErrorMessage(res) : "snapshot name too long"));
    PQclear(res);
    PQclear(PQexec(c, "ROLLBACK"));
    return false;
}
