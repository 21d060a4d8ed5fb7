/* capture_dead.h — relay.capture = wal: the events that can never be
 * produced, waiting to be kept as dead rows in the outbox table, oldest
 * first (records of one source transaction are written in the stream's
 * order). One is written at a time; the daemon runs the statement. */
#ifndef OUTBOX_CAPTURE_DEAD_H
#define OUTBOX_CAPTURE_DEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/pg_binary.h"
#include "core/pgoutput.h"
#include "core/sql_capture.h"

/* A dead row that could not be written is tried again this much later. */
#define CAPTURE_DEAD_RETRY_MS 1000

struct event_row;

/** One event to keep: sql_capture.record_dead's parameters (owned) and the
 *  source transaction it holds back (set by capture_plan_dead_queued). */
struct capture_dead {
    unsigned gen;              /* the stream it came from */
    uint64_t seq;              /* its source transaction */
    int64_t outbox_id;         /* 0 for a logical message */
    char *params[SQL_CAPTURE_DEAD_NPARAMS];
};

/** The queue; all zero is an empty one. */
struct dead_queue {
    struct capture_dead *v;
    size_t n, cap;
    bool sending;              /* the oldest is being written */
    uint64_t retry_ms;         /* a failed write is not tried again before */
};

/** Queues event @p row (NULL for a logical message that is not one) with
 *  @p event_id and the reason @p why. @return the queued entry, or NULL
 *  (no memory; nothing queued). */
struct capture_dead *dead_queue_push(struct dead_queue *q, const struct event_row *row,
                                     const char *event_id, const char *why);

/** Writing the oldest failed at @p now_ms with @p sqlstate: it is tried
 *  again CAPTURE_DEAD_RETRY_MS later. @return true when that will not pass
 *  (capture_dead_refused: relaying halts, @p reason says why). */
bool dead_queue_failed(struct dead_queue *q, const char *sqlstate, uint64_t now_ms, char *reason,
                       size_t len);

/** @return whether the oldest may be written at @p now_ms. */
bool dead_queue_due(const struct dead_queue *q, uint64_t now_ms);

/** The oldest was written: it leaves the queue. */
void dead_queue_pop(struct dead_queue *q);

/** The stream they came from is gone (the new one reads them again): every
 *  entry leaves but the one being written, which finishes. */
void dead_queue_clear(struct dead_queue *q);

void dead_queue_free(struct dead_queue *q);

/** An event that can never be produced, as the log, its dead row and a halt
 *  name it (filled in place: event_id may point into it). */
struct capture_poison {
    char at[PGO_LSN_TEXT];      /* the LSN it was read at */
    char lsn_id[PGB_UUID_TEXT]; /* the event id made from that LSN */
    const char *event_id;       /* its own event id, else lsn_id */
    char reason[600];           /* the dead row's error: why, at which LSN */
};

/** Names the event read at @p lsn, with @p event_id (NULL or "" when it has
 *  none), that cannot be produced because @p why. */
void capture_poison_name(struct capture_poison *p, const char *event_id, uint64_t lsn,
                         const char *why);

/** Why relaying halts on @p p (outbox_id @p id, 0 for a logical message):
 *  @p why, into @p out. */
void capture_poison_halt_reason(const struct capture_poison *p, int64_t id, const char *why,
                                char *out, size_t len);

#endif
