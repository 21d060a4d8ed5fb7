/* wal_event.h — an outbox event as log-based capture (relay.capture = wal)
 * reads it, turned into the event_row the producer takes, the same as a
 * claimed row would be:
 *   - an Insert into the outbox table: its columns found by name (id,
 *     event_id, aggregate_type, aggregate_id, event_type, topic, payload,
 *     headers, created_at), in pgoutput's text format;
 *   - a logical message (pg_logical_emit_message) whose prefix is
 *     relay.message_prefix: its content a JSON envelope, see below.
 * No I/O; unit-tested in tests/unit/test_wal_event.c.
 *
 * The envelope of a message, one JSON object:
 *   {"aggregate_type": "order",          required, non-empty string
 *    "aggregate_id":   "42",             required, non-empty string (the Kafka key)
 *    "event_type":     "OrderPlaced",    required, non-empty string
 *    "payload":        {...},            optional, any JSON; absent or null = tombstone
 *    "headers":        {"k": "v"},       optional, an object of strings
 *    "topic":          "orders",         optional, overrides relay.topic
 *    "event_id":       "<uuid>"}         optional; absent: derived from the message's
 *                                        LSN, so the same message always gets the same id
 * The payload is published as its JSON text (compact, as cJSON prints it). */
#ifndef OUTBOX_WAL_EVENT_H
#define OUTBOX_WAL_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include "core/event.h"
#include "core/pgoutput.h"

/** An event and the memory its strings live in. row's strings point into the
 *  pgoutput message (insert) or into owned (message): valid while both are. */
struct wal_event {
    struct event_row row;
    char *owned;          /* what a message's strings were copied or printed into; freed by
                             wal_event_clear() */
};

/** The outbox event of Insert @p m. @p commit_time_us is the transaction's
 *  commit time (since 2000-01-01), used when created_at is missing.
 *  @return 0; -EINVAL (errbuf names the column) when a required column is
 *  missing, NULL or unreadable: the row is poison. */
int wal_event_from_insert(const struct pgo_msg *m, int64_t commit_time_us, struct wal_event *ev,
                          char *errbuf, size_t errlen);

/** The event of logical message @p m (the caller checked its prefix), read at
 *  @p lsn (the id's source when the envelope has none) in a transaction
 *  committed at @p commit_time_us (its created_at). row.id is 0: the message
 *  has no outbox row. @return 0; -EINVAL (errbuf says why) for content that is
 *  not an envelope; -ENOMEM. */
int wal_event_from_message(const struct pgo_msg *m, uint64_t lsn, int64_t commit_time_us,
                           struct wal_event *ev, char *errbuf, size_t errlen);

/** Frees what @p ev owns; it may be used again. */
void wal_event_clear(struct wal_event *ev);

#endif
