/* capture_ahead.h — relay.capture = wal: the replication stream's frames
 * read ahead into memory while a Kafka transaction commits (nothing can be
 * produced meanwhile), so that PostgreSQL's walsender is not held back by
 * the commit's round trips; offered again, oldest first, once it is done. */
#ifndef OUTBOX_CAPTURE_AHEAD_H
#define OUTBOX_CAPTURE_AHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** At most this many bytes are read ahead: then reading stops. */
#define CAPTURE_AHEAD_BYTES (2 << 20)

struct capture_frame;

/** A queue of frames; all zero is an empty one. */
struct capture_ahead {
    struct capture_frame **v;
    size_t head, n, cap, bytes;
};

/** Keeps a copy of frame @p buf. @return false when it is full (or no memory). */
bool capture_ahead_push(struct capture_ahead *q, const uint8_t *buf, size_t len);

/** @return whether frames wait. */
bool capture_ahead_left(const struct capture_ahead *q);

/** The oldest frame waiting, in @p buf and @p len. @return false when none. */
bool capture_ahead_peek(const struct capture_ahead *q, const uint8_t **buf, size_t *len);

/** The oldest frame was taken. */
void capture_ahead_pop(struct capture_ahead *q);

/** Forgets every frame (the stream they came from is gone). */
void capture_ahead_clear(struct capture_ahead *q);

void capture_ahead_free(struct capture_ahead *q);

#endif
