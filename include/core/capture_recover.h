/* capture_recover.h — relay.slot_recovery = reconcile decided apart from any
 * I/O: whether the table can close a failover's gap at all, when a reconcile
 * runs (the leader, a gap, none running, a failed one's back-off over), from
 * when it reads rows, what readiness says meanwhile and what its end
 * changes. The daemon (relay_capture_recover.c) runs it off the loop. */
#ifndef OUTBOX_CAPTURE_RECOVER_H
#define OUTBOX_CAPTURE_RECOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/stats.h"
#include "core/capture_plan.h"
#include "core/failover_watch.h"

/* A reconcile that failed is tried again this much later (at the next slot query after it). */
#define CAPTURE_RECOVER_RETRY_MS 10000

struct capture_recover {
    bool reconcile;             /* relay.slot_recovery = reconcile, and the table proves a gap */
    char no_reconcile[200];     /* why reconcile acts as stop; "" when it does not */
    uint64_t retry_at_ms;       /* a failed one is not tried again before */
};

/** relay.slot_recovery = reconcile (@p wanted) or stop, for a table as
 *  failover_gap_provable's flags say. @return true when reconcile was asked
 *  for and cannot prove a gap closed (no_reconcile says why): the relay says
 *  so at start, not after a failover. */
bool capture_recover_setup(struct capture_recover *c, bool wanted, bool rows_deleted,
                           bool messages, bool app_table);

/** What relay.slot_recovery comes to: "reconcile" or "stop". */
const char *capture_recover_mode(const struct capture_recover *c);

/** Whether a reconcile starts at @p now_ms: a gap blocks @p w, the table can
 *  close it, this relay leads and is not stopping (@p leading), and none is
 *  @p running. */
bool capture_recover_due(const struct capture_recover *c, const struct failover_watch *w,
                         bool leading, bool running, uint64_t now_ms);

/** Where a reconcile reads rows from (failover_recovery_since of
 *  @p confirmed_at, @p started_at) as UTC text, "2026-01-02T03:04:05Z". */
void capture_recover_since(double confirmed_at, double started_at, char *out, size_t len);

/** What readiness says while a reconcile of the rows since @p since runs. */
void capture_recover_problem(const char *since, char *out, size_t len);

/** A reconcile closed the gap at @p now (unix seconds), publishing
 *  @p published rows: counted in @p s; @p w and @p p stream from the slot
 *  now on the server. */
void capture_recover_done(struct stats_slot *s, struct failover_watch *w, struct capture_plan *p,
                          uint64_t published, double now);

/* How the slot came to be when a reconcile made it on a replication
 * connection, and so in which snapshot the table can be read. */
enum recover_slot {
    RECOVER_SLOT_SNAPSHOT,  /* made, and its snapshot exported: read the table in it, and a
                               row comes either from the table or from the stream, never both */
    RECOVER_SLOT_MADE,      /* made, no snapshot named: the table read after, in its own */
    RECOVER_SLOT_EXISTED,   /* there already (duplicate_object): no snapshot to share */
    RECOVER_SLOT_BY_SQL,    /* the command failed otherwise (no replication connection, a
                               server that refused it): made by the SQL function, as before */
};

/** What creating the slot on a replication connection came to: @p made it
 *  (with @p snapshot, the exported snapshot's name, NULL or "" when none),
 *  else the error's @p sqlstate (NULL when there is none). */
enum recover_slot capture_recover_slot_made(bool made, const char *snapshot, const char *sqlstate);

/** How a reconcile's log names the table's read: "slot_snapshot" when the
 *  slot's snapshot was exported (@p made) and @p imported by the reading
 *  transaction, else "own_snapshot" (rows committed after the slot was made
 *  and before the read may come twice). */
const char *capture_recover_table_read(enum recover_slot made, bool imported);

/** A reconcile failed at @p now_ms: tried again CAPTURE_RECOVER_RETRY_MS later. */
void capture_recover_failed(struct capture_recover *c, uint64_t now_ms);

#endif
