/* relay_wal.c — relay.capture = wal as one of the two capture modes
 * (struct capture_ops, relay_int.h): the stream's own functions are
 * relay_capture*.c's; what the shared daemon asks of a mode and the stream
 * has no use for is answered here. */
#include "daemon/relay_int.h"

static int wal_start(struct relay *r)
{
    int rc = relay_capture_start(r);
    /* delete mode removes rows behind the confirmed position, on the same clock */
    if (rc == EXIT_OK && r->cfg->on_sent == RELAY_ON_SENT_DELETE)
        r->retention_s = 1;
    return rc;
}

static unsigned wal_sql_flags(const struct relay_config *cfg, const char *claim)
{
    (void)cfg;
    (void)claim;
    return 0; /* nothing is claimed: no floor */
}

/* capture = wal reads no NOTIFY: the leader holds the quiet lock so that
 * writers send none (each one serialises commits cluster-wide). */
static void wal_leading(struct relay *r)
{
    r->quiet_wanted = true;
}

static void wal_tick(struct relay *r)
{
    if (r->retention_s > 0 && relay_now_ms(r) - r->last_retention_ms >= PLAN_CAPTURE_RETENTION_EVERY_MS)
        r->retention_due = true;
}

/* Kafka's reports settle the stream's transactions, not batches: a shutdown
 * waits for the capture plan (capture_unsettled), not for these. */
static int wal_in_flight(const struct relay *r)
{
    (void)r;
    return 0;
}

static bool wal_producing(const struct relay *r)
{
    (void)r;
    return false;
}

static void wal_wake(struct relay *r)
{
    (void)r; /* the stream brings the rows */
}

/* Its Kafka transactions are the capture plan's, with no batches in them. */
static void wal_txn_settle(struct relay *r, const struct fence_plan *f)
{
    (void)r;
    (void)f;
}

static void wal_txn_ended(struct relay *r, unsigned gen, enum producer_txn_result res)
{
    (void)r;
    (void)gen;
    (void)res;
}

const struct capture_ops relay_wal_ops = {
    .name = "wal",
    .sql_flags = wal_sql_flags,
    .start = wal_start,
    .connected = relay_capture_connected,
    .leading = wal_leading,
    .tick = wal_tick,
    .status = relay_capture_status,
    .act = relay_capture_act,
    .step = relay_capture_step,
    .on_report = relay_capture_on_report,
    .in_flight = wal_in_flight,
    .producing = wal_producing,
    .stop = relay_capture_stop,
    .free = relay_capture_free,
    .wake = wal_wake,
    .txn_settle = wal_txn_settle,
    .txn_ended = wal_txn_ended,
};
