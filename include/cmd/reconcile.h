/* reconcile.h — closes the gap a failover leaves in relay.capture = wal when
 * the promoted server has no slot, or one that starts past what the relay
 * confirmed (relay.slot_recovery = reconcile, relay_capture_recover.c):
 *
 *   1. the slot is made if it is missing, on a replication connection that
 *      exports the snapshot it was made in (CREATE_REPLICATION_SLOT): what
 *      commits after that point, the stream delivers;
 *   2. the table's rows from a safe lower bound on, read in that snapshot,
 *      are matched against Kafka by event_id, as verify does, without a
 *      fence (nothing streams to pass one): the rows no message was seen
 *      for are the gap, whatever their place in it;
 *   3. those rows are published in id order (hence each aggregate's), as the
 *      relay writes them, with the same event ids, and acknowledged.
 *
 * The stream starts only after. A row is then either in the snapshot or in
 * the stream, never both: only rows in flight when the old primary stopped
 * may come twice. When the snapshot cannot be shared (a slot that was there
 * already, a server or connection that refuses the command, a reading
 * session that cannot import it) the slot is made, as before, by the SQL
 * function and the table read after it in a snapshot of its own: a row
 * committed in between may be both published here and streamed, a duplicate
 * around the failover, never a loss. It blocks (libpq, a consumer, a
 * producer). */
#ifndef OUTBOX_RECONCILE_H
#define OUTBOX_RECONCILE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

struct reconcile_gap {
    const char *since;          /* the rows read: created_at from here on (timestamptz text) */
    atomic_int *stop;           /* may be NULL; non-zero: stop soon */
    bool created;               /* out: the slot was made */
    size_t absent;              /* out: rows Kafka did not hold */
    uint64_t published;         /* out: of those, published and acknowledged */
    const char *table_read;     /* out: "slot_snapshot" (the table read in the slot's
                                   snapshot) or "own_snapshot" (duplicates possible) */
};

/** Runs steps 1-3 for the table, slot and topics of @p cfg.
 *  @return 0 when every row Kafka lacked was published, else a negative
 *  errno with the reason in @p err. */
int reconcile_gap_run(const struct relay_config *cfg, struct reconcile_gap *g, char *err,
                      size_t errlen);

#endif
