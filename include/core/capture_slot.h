/* capture_slot.h — relay.capture = wal: what the server answers the
 * capture's statements and stream — the slot's row, read into what the relay
 * reports (struct stats_slot), its refusals, a dead row it would not keep —
 * and what an operator is told to do about it. No I/O: the daemon runs the
 * statements. */
#ifndef OUTBOX_CAPTURE_SLOT_H
#define OUTBOX_CAPTURE_SLOT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/stats.h"
#include "core/capture_plan.h"
#include "core/failover_watch.h"
#include "core/sql_capture.h"

/** The names the slot is checked against (relay.slot, relay.publication,
 *  relay.schema, relay.table). */
struct capture_names {
    const char *slot, *publication, *schema, *table;
};

/** Reads one row of sql_capture.slot_status (@p v: the values of enum
 *  slot_col, NULL for SQL NULL), queried at @p now (unix seconds), into @p s,
 *  with what is wrong in s->problem. @p clear: the stream runs, or this
 *  relay does not lead; otherwise a problem the stream was told is kept. */
void capture_slot_read(struct stats_slot *s, const char *const v[SLOT_NCOLS],
                       const struct capture_names *n, double now, bool clear);

/** A slot query's answer (@p v, as capture_slot_read) at @p now, for a relay
 *  streaming as @p p says, the @p leader or not: read into @p s, and what it
 *  says of a failover (failover_watch_seen on @p w). Readiness names a gap
 *  unless a reconcile is @p recovering, which says so itself. */
struct failover_news capture_slot_seen(struct stats_slot *s, const char *const v[SLOT_NCOLS],
                                       const struct capture_names *n, double now,
                                       const struct capture_plan *p, bool leader,
                                       struct failover_watch *w, bool recovering);

/** What a refusal of the server (@p sqlstate) means for the operator: a hint
 *  appended to @p why in @p out. */
void capture_explain(const char *why, const char *sqlstate, char *out, size_t len);

/** What the end of a stream in @p state means. */
struct capture_loss {
    const char *say;            /* the line to log; NULL when it ended as asked */
    bool busy;                  /* another session reads the slot */
};

/** The stream in @p state ended with @p why (@p sqlstate: the server's
 *  refusal, "" for none). A refusal, or a stream that never streamed, is
 *  explained (capture_explain) in readiness's @p problem. */
struct capture_loss capture_lost(enum capture_state state, const char *why, const char *sqlstate,
                                 char *problem, size_t len);

/** The created_at bound of retention at @p now (unix seconds) as timestamptz
 *  text: with on_sent = delete (@p delete) the commit time of the newest
 *  confirmed transaction @p last_commit, else @p retention_ms before now.
 *  @return false when there is none yet (nothing confirmed). */
bool capture_retention_bound(bool delete, double last_commit, double now, long retention_ms,
                             char *out, size_t len);

/** Keeping event @p event_id (that cannot be produced: @p why) as a dead row
 *  failed with @p sqlstate. @return true when that will not pass (no
 *  privilege, a column missing: relaying halts; @p reason says why), false
 *  for a lost connection, a conflict or a shutdown (tried again). */
bool capture_dead_refused(const char *sqlstate, const char *event_id, const char *why,
                          char *reason, size_t len);

#endif
