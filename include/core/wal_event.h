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
 * An Insert's values must be in pgoutput's text format with the walsender's
 * DateStyle ISO (created_at read as "2026-12-04 05:41:13.123456+05:30"): the
 * replication connection must set it (options=-c datestyle=ISO). created_at and event_id are then formatted
 * as a claim formats them (pg_binary.c): both modes give the same headers.
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
 * An optional member that is null counts as absent; a member not listed here,
 * or one given twice, makes the message poison (a misspelt "payload" would
 * otherwise publish a tombstone). event_id is 8-4-4-4-12 hex digits, published
 * lower-case. The payload is published as its JSON text, compact, as cJSON
 * prints it: numbers go through a double, so an integer beyond 2^53 loses
 * digits; an application that needs them exact sends them as strings.
 *
 * The derived event_id of LSN X/Y (X its high 32 bits, Y its low ones, as
 * PostgreSQL prints an LSN) is "XXXXXXXX-0000-8000-8000-0000YYYYYYYY" in
 * lower-case hex, e.g. 0/16B3748 -> 00000000-0000-8000-8000-0000016b3748: an RFC
 * 9562 version 8 (custom) UUID of the RFC 4122 variant, so it never equals a
 * gen_random_uuid() (version 4). An LSN names one message in a cluster and
 * its standbys; a cluster restored to an earlier point reuses LSNs, and so
 * these ids. */
#ifndef OUTBOX_WAL_EVENT_H
#define OUTBOX_WAL_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/event.h"
#include "core/pgoutput.h"

/** An event and the memory its strings live in. row's strings point into
 *  owned or row's own buffers (pgoutput's values are not NUL-terminated, so
 *  they are copied): the event outlives the message it was read from. */
struct wal_event {
    struct event_row row;
    char *owned;          /* what the strings were copied or printed into; freed by
                             wal_event_clear() */
};

/** The columns an Insert is read from (relay.column_*). */
struct wal_columns {
    bool relay_table;        /* the relay's own table: the bigint id, topic and headers are read
                                too, and event_type is required */
    const char *event_id, *aggregate_type; /* required */
    const char *aggregate_id; /* required; a NULL value only outside the relay's table (no key) */
    const char *event_type, *payload;                     /* NULL or "" = none */
    const char *created_at;  /* NULL or "" = the commit time */
    const struct event_placement *placement; /* NULL: none; else read into row.placed */
};

/** wal_event_from_insert() from the columns @p cols names. A placed column
 *  that is missing or NULL is a NULL value. @return as wal_event_from_insert(). */
int wal_event_from_insert_cols(const struct pgo_msg *m, int64_t commit_time_us,
                               const struct wal_columns *cols, struct wal_event *ev,
                               char *errbuf, size_t errlen);

/** The outbox event of Insert @p m into @p ev (overwritten: clear an event
 *  before reusing it). @p commit_time_us is the transaction's commit time
 *  (since 2000-01-01), used when created_at is missing or NULL. Required:
 *  id, event_id, aggregate_type, aggregate_id, event_type.
 *  @return 0; -EINVAL (errbuf names the column) when a required column is
 *  missing, NULL or unreadable: the row is poison; -ENOMEM. */
int wal_event_from_insert(const struct pgo_msg *m, int64_t commit_time_us, struct wal_event *ev,
                          char *errbuf, size_t errlen);

/** Whether pgoutput message @p m is an event to relay: an Insert into
 *  @p schema.@p table of a row not already settled (sent_at or dead_at set:
 *  the relay's own dead-row copies, or rows inserted as sent), or a logical
 *  message with @p prefix. */
bool wal_event_wanted(const struct pgo_msg *m, const char *schema, const char *table,
                      const char *prefix);

/** Appends what logical message @p m says (its printable bytes) to the
 *  error in @p err (@p len bytes): no row holds a message to look at. */
void wal_event_message_context(const struct pgo_msg *m, char *err, size_t len);

/** The event of logical message @p m (the caller checked its prefix) into
 *  @p ev (overwritten, as above), read at @p lsn (the id's source when the
 *  envelope has none) in a transaction committed at @p commit_time_us (its
 *  created_at). row.id is 0: the message has no outbox row. @return 0;
 *  -EINVAL (errbuf says why) for content that is not an envelope; -ENOMEM. */
int wal_event_from_message(const struct pgo_msg *m, uint64_t lsn, int64_t commit_time_us,
                           struct wal_event *ev, char *errbuf, size_t errlen);

/** The event of a change the stream wants (wal_event_wanted): an Insert read
 *  from @p cols (wal_event_from_insert_cols), a logical message read at
 *  @p lsn (wal_event_from_message). @return as those. */
int wal_event_from_change(const struct pgo_msg *m, uint64_t lsn, int64_t commit_time_us,
                          const struct wal_columns *cols, struct wal_event *ev, char *errbuf,
                          size_t errlen);

/** The event id of a message without one, from the LSN it was read at. */
void wal_event_lsn_id(uint64_t lsn, char out[PGB_UUID_TEXT]);

/** Frees what @p ev owns; it may be used again. */
void wal_event_clear(struct wal_event *ev);

#endif
