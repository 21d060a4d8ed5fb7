/* verify_check.h — the comparison behind `outbox-relay verify`, without I/O.
 *
 * The caller (verify.c) reads the outbox table in slices of rows (by id) and,
 * for each slice, the Kafka partitions those rows map to; this module keeps a
 * compact record per row (digests of key, value and headers, not copies),
 * matches each message to its row by event_id, and at the end of the slice
 * counts what is missing, duplicated, out of order or different. Memory is
 * the slice's rows (sizeof(struct vcheck_row) each, plus a 4-byte hash slot
 * or two), whatever Kafka holds. */
#ifndef OUTBOX_VERIFY_CHECK_H
#define OUTBOX_VERIFY_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- digests ------------------------------------------------------------ */

/** FNV-1a 64 over @p n bytes, continuing from @p h (start with VCHECK_SEED). */
#define VCHECK_SEED 0xcbf29ce484222325ULL
uint64_t vcheck_hash(uint64_t h, const void *p, size_t n);

/** Digest of a key or value; NULL (a tombstone, a NULL key) differs from empty. */
uint64_t vcheck_digest_bytes(const void *p, size_t n);

/** Folds one header (name, value; @p value NULL = a NULL header value) into
 *  the running headers digest @p h (start with VCHECK_SEED); order matters. */
uint64_t vcheck_digest_header(uint64_t h, const char *name, size_t name_len, const void *value,
                              size_t value_len);

/** Folds the message timestamp (ms) into a headers digest, last. */
uint64_t vcheck_digest_timestamp(uint64_t h, int64_t timestamp_ms);

/** Parses a uuid in text form (8-4-4-4-12 hex digits, any case) into @p out.
 *  @return true if it is one. */
bool vcheck_uuid_parse(const char *text, size_t len, uint8_t out[16]);

/** Writes @p id as 36 characters and a NUL. */
void vcheck_uuid_format(const uint8_t id[16], char out[37]);

/* ---- rows and messages -------------------------------------------------- */

enum vcheck_state { VCHECK_PENDING = 0, VCHECK_SENT, VCHECK_DEAD };

/** What the table says of one row, reduced to what the comparison needs. */
struct vcheck_row {
    int64_t id;
    uint8_t event_id[16];
    uint64_t key;             /* vcheck_digest_bytes(aggregate_id) */
    uint64_t value;           /* vcheck_digest_bytes(payload), NULL for a tombstone */
    uint64_t headers;         /* every header in order, then the timestamp */
    int64_t first_offset;     /* the first delivery seen (set by vcheck_observe) */
    int32_t first_partition;  /* -1: none seen */
    uint32_t topic;           /* vcheck_topic() of the row's topic */
    uint16_t deliveries;      /* saturates */
    uint8_t state;            /* enum vcheck_state */
    uint8_t flags;            /* internal */
};

/** One message read from Kafka, reduced the same way. */
struct vcheck_msg {
    uint32_t topic;
    int32_t partition;
    int64_t offset;
    int64_t timestamp;        /* ms */
    bool has_event_id;        /* an event_id header that parses as a uuid */
    uint8_t event_id[16];
    bool has_outbox_id;
    int64_t outbox_id;
    bool replay;              /* carries the header written by `outbox-relay replay` */
    uint64_t key, value, headers; /* headers: without the replay header */
};

/** What vcheck_observe() made of a message. */
enum vcheck_verdict {
    VCHECK_MATCH = 0,         /* a delivery of a row, identical */
    VCHECK_DUPLICATE,         /* a further delivery of a row, identical */
    VCHECK_MISMATCH,          /* a delivery whose key, value, headers or topic differ */
    VCHECK_UNKNOWN,           /* an event_id no row of the window has */
    VCHECK_IGNORED,           /* not ours to judge: no event_id, outside the slice or window,
                                 or a replay to another topic */
};

/** Bits of what differs in a mismatch. */
#define VCHECK_DIFF_KEY     0x1u
#define VCHECK_DIFF_VALUE   0x2u
#define VCHECK_DIFF_HEADERS 0x4u  /* headers or timestamp */
#define VCHECK_DIFF_TOPIC   0x8u

/* ---- the report ---------------------------------------------------------- */

/** Counters of one topic, or of them all. */
struct vcheck_counts {
    uint64_t rows, sent, pending, dead;
    uint64_t messages;        /* messages judged (matched, duplicate, mismatched, unknown) */
    uint64_t missing;         /* sent rows with no message */
    uint64_t duplicates;      /* rows (event_ids) delivered more than once */
    uint64_t extra_deliveries;/* the messages beyond the first of those rows */
    uint64_t replayed;        /* messages carrying the replay header */
    uint64_t out_of_order;    /* aggregates whose first deliveries are not in id order */
    uint64_t mismatched;      /* messages */
    uint64_t unknown;         /* messages */
};

enum vcheck_problem {
    VCHECK_P_MISSING = 0, VCHECK_P_DUPLICATE, VCHECK_P_OUT_OF_ORDER, VCHECK_P_MISMATCH,
    VCHECK_P_UNKNOWN, VCHECK_P_COUNT
};

/** @return "missing", "duplicates", "out_of_order", "mismatched" or "unknown". */
const char *vcheck_problem_name(enum vcheck_problem p);

/** One example of a problem. */
struct vcheck_example {
    int64_t id;               /* the row (unknown: the message's outbox_id header, or 0) */
    uint8_t event_id[16];
    uint32_t topic;
    int32_t partition;        /* -1 when there is no message (missing) */
    int64_t offset;
    int64_t other_id;         /* out of order: the later row delivered first */
    int64_t other_offset;
    unsigned diff;            /* mismatch: VCHECK_DIFF_* */
    unsigned deliveries;      /* duplicate: how many */
};

struct vcheck_topic {
    char *name;
    uint64_t hash;
    struct vcheck_counts c;
};

struct vcheck {
    /* the current slice */
    struct vcheck_row *rows;  /* in id order */
    size_t n_rows, cap_rows;
    uint32_t *slots;          /* open addressing on event_id: row index + 1, 0 = free */
    size_t n_slots;           /* a power of two */
    int64_t own_lo, own_hi;   /* messages with an outbox_id here are judged by this slice */
    bool own_unnumbered;      /* and those without one */
    int64_t window_lo_ms, window_hi_ms; /* timestamps a message of the window can have */

    /* across slices */
    struct vcheck_topic *topics;
    size_t n_topics, cap_topics;
    struct vcheck_counts total;
    size_t max_examples;      /* per problem */
    struct vcheck_example *examples[VCHECK_P_COUNT];
    size_t n_examples[VCHECK_P_COUNT];
    /* with want_absent: the ids of the rows no message was seen for, whether
     * the table says sent or not (dead rows aside), ascending */
    bool want_absent;
    int64_t *absent;
    size_t n_absent, cap_absent;
    bool absent_oom;          /* an id could not be kept: the list is short */
};

/** Prepares @p v, keeping up to @p max_examples examples of each problem. */
void vcheck_init(struct vcheck *v, size_t max_examples);
void vcheck_free(struct vcheck *v);

/** @return the index of topic @p name, added if new, or UINT32_MAX without memory. */
uint32_t vcheck_topic(struct vcheck *v, const char *name);

/** Starts a slice: forgets the previous slice's rows. Messages whose
 *  outbox_id header is in [@p own_lo, @p own_hi] (and, if @p unnumbered,
 *  those without one) and whose timestamp is in [@p lo_ms, @p hi_ms] may be
 *  counted unknown by this slice; the slices of a window must not overlap. */
void vcheck_slice_begin(struct vcheck *v, int64_t own_lo, int64_t own_hi, bool unnumbered,
                        int64_t lo_ms, int64_t hi_ms);

/** Adds a row of the slice (ids ascending; first_partition, deliveries and
 *  flags are reset here). @return 0 or -ENOMEM. */
int vcheck_row_add(struct vcheck *v, const struct vcheck_row *row);

/** Indexes the slice's rows by event_id: call once after the last row and
 *  before the first message. @return 0 or -ENOMEM. */
int vcheck_slice_index(struct vcheck *v);

/** Judges one message, in (partition, offset) order within a partition.
 *  @return the verdict; counters and examples are updated. */
enum vcheck_verdict vcheck_observe(struct vcheck *v, const struct vcheck_msg *m);

/** Ends the slice: counts rows, missing, duplicates and out-of-order
 *  aggregates (reorders the slice's rows). */
void vcheck_slice_end(struct vcheck *v);

/** @return true when nothing is missing, mismatched or out of order (what
 *  verify's exit status 0 means: duplicates and unknown messages are not errors). */
bool vcheck_ok(const struct vcheck *v);

#endif
