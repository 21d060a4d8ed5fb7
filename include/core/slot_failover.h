/* slot_failover.h — relay.slot_failover = on: what a failover slot needs of
 * the primary, judged from what the server answers (no I/O). */
#ifndef OUTBOX_SLOT_FAILOVER_H
#define OUTBOX_SLOT_FAILOVER_H

#include <stdbool.h>
#include <stddef.h>

#include "core/sql_capture.h"

/** The first PostgreSQL release whose slots can follow a failover. */
#define SLOT_FAILOVER_MIN_VERSION 170000

enum slot_failover_verdict {
    SLOT_FAILOVER_OK = 0,
    SLOT_FAILOVER_WARN,   /* it works, but not yet across a failover */
    SLOT_FAILOVER_REFUSE, /* relay.slot_failover = on cannot be honoured */
};

/** Judges one row of sql_capture.failover_state (@p v: the values of enum
 *  failover_col, NULL for SQL NULL) for slot @p slot; @p slot_made: the slot
 *  exists now, so its failover flag counts. What is wrong or missing, and
 *  what closes it, goes to @p out. @return the verdict. */
enum slot_failover_verdict slot_failover_judge(const char *const v[FO_NCOLS], const char *slot,
                                               bool slot_made, char *out, size_t len);

#endif
