/* relay_poll_int.h — relay.capture = poll's own state, private to
 * relay_poll.c, relay_poll_pipeline.c and relay_poll_fence.c: the rest of the
 * daemon reaches it through the capture interface in relay_int.h only. */
#ifndef OUTBOX_RELAY_POLL_INT_H
#define OUTBOX_RELAY_POLL_INT_H

#include "daemon/relay_int.h"

/* Several batches may be in flight: while Kafka acknowledges some,
 * PostgreSQL claims or marks another, so neither side waits for the other. */
#define N_BATCHES RELAY_BATCH_SLOTS
_Static_assert(N_BATCHES <= PLAN_MAX_BATCHES, "the engine names each batch slot by a bit");
_Static_assert(RELAY_BATCHES_IN_FLIGHT == PLAN_TXN_BATCHES_MAX, "the producer's queue holds a transaction's batches");

/* A delivery report's opaque: the batch slot in the top bits, the row below. */
#define OPAQUE_ROW_BITS 20
_Static_assert(100000 < (1 << OPAQUE_ROW_BITS), "batch_size must fit the opaque's row bits");

/* Polling's rules are plan_next's (core/plan.c); what is here carries them out. */
struct poll_capture {
    struct relay *relay;        /* its owner: a batch's reports find the relay through it */
    bool listening;
    bool wake;                  /* rows may be waiting: claim when possible */
    bool claim_full;            /* the last claim returned a whole batch */
    int prepared;               /* hot-path statements prepared on this connection */
    bool halt_pending;          /* on_poison=halt: a row of a batch in flight will halt us;
                                   claim and produce nothing more meanwhile */
    /* A failure reported for several rows of a batch may be one produce
     * request's (librdkafka gives every message of a rejected request its
     * error): those rows are charged nothing and produced again one at a
     * time, oldest first, up to isolate_until_id; only a row that fails
     * alone is charged. */
    bool isolating;
    int64_t isolate_until_id;
    /* The producer's queue was full: the batch stopped early and its claim
     * range was cut back to what it produced. No claim until reports free
     * room; a claim sent before the cut is discarded, since it skipped the
     * rows the cut batch gave back and could reorder their aggregates. */
    bool queue_full;
    unsigned truncations;
    uint64_t claims_sent;       /* claims sent since start: batch.claim_seq */
    /* SQL_FLOOR: where the next claim starts (sql_floor.h). has_floor is
     * false until a claim returned rows: claims start from the saved floor. */
    bool floor_mode;
    bool has_floor;
    int64_t floor_id;
    struct sql_floor_snap floor_snap;
    uint64_t backlog_due_ms;    /* next backlog query */
    uint64_t backlog_sent_ms;   /* when the running one was sent */
    uint64_t backlog_took_ms;   /* how long the last one took */
    bool claim_first;           /* new leader: its first batch is claimed and marked before
                                   the backlog count, which takes a while on a large backlog
                                   and would hold up the claim its transaction waits for */
    uint64_t claim_first_until; /* ... but no longer than this: Kafka may be away */

    struct batch b[N_BATCHES];      /* in flight; their index is the slot */
    struct strbuf params[3];    /* array literals for the mark and failure statements */
};

/* relay_poll_fence.c: the capture interface's txn_settle and txn_ended */
void relay_poll_txn_settle(struct relay *r, const struct fence_plan *f);
void relay_poll_txn_ended(struct relay *r, unsigned gen, enum producer_txn_result res);

/* relay_poll_pipeline.c */
int relay_in_flight(const struct relay *r);
bool relay_any_phase(const struct relay *r, enum phase ph);
void relay_batch_reset(struct batch *b);
void relay_row_failed(struct relay *r, struct batch *b, int i, enum stats_fail_reason kind,
                       enum attempt_limit limit, const char *why);
void relay_poll_on_report(struct relay *r, void *opaque, rd_kafka_resp_err_t err);
void relay_produce_rows(struct relay *r, struct batch *b, PGresult *res);
void relay_claim(struct relay *r, const struct plan_step *p);
/* SQL_FLOOR: the floor as the claim ($5..$7) and the backlog count ($1..$4)
 * take it: id (formatted into @p id), xmax, open transactions, xmin; all
 * NULL until a claim gave the relay a floor (they then use the saved one). */
void relay_floor_params(const struct relay *r, char id[24], const char *out[4]);
void relay_mark(struct relay *r, struct batch *b, unsigned with);
void relay_retention(struct relay *r);

#endif
