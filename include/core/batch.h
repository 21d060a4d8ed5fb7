/* batch.h — the rows of one claim in flight, apart from any I/O: their ids,
 * what became of each (delivered, failed and why, held), and the id span a
 * concurrent claim must skip.
 *
 * Part of the engine (docs/ARCHITECTURE.md): no PostgreSQL, Kafka or event
 * loop header. The daemon (relay_poll_pipeline.c) fills a batch from a claim's result, reports each
 * delivery into it, and writes what it says (marks, failure records). */
#ifndef OUTBOX_BATCH_H
#define OUTBOX_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/engine.h"

enum phase {
    PHASE_EMPTY = 0,   /* nothing claimed */
    PHASE_CLAIMING,    /* claim statement running */
    PHASE_PRODUCING,   /* rows handed to librdkafka, waiting for reports */
    PHASE_DELIVERED,   /* every report is in; marks not yet written */
    PHASE_MARKING,     /* mark statement running */
    PHASE_RECORDING,   /* failure bookkeeping statement running */
};

enum row_state {
    ROW_PENDING = 0,
    ROW_DELIVERED,
    ROW_FAILED,    /* reason set: counts as an attempt; reason NULL: not the row's fault */
    ROW_SKIPPED,   /* held behind a failed row of its aggregate, or not produced: stays unsent */
};

struct batch {
    enum phase phase;
    int slot;
    int n_rows;
    int n_outstanding;
    int n_delivered;
    int n_suspects;             /* rows failed with an error not yet proven their own */
    int suspect_err;            /* the Kafka error of the suspects (an rd_kafka_resp_err_t) */
    bool marked;                /* the delivered rows of this batch are marked */
    bool alone;                 /* one row, produced while nothing else was: a failure is its own */
    unsigned claim_gen;         /* the relay's truncations when the claim was sent */
    bool rescan_after_mark;     /* a claim skipped this batch's id range: claim again after */
    unsigned txn_gen;           /* fencing: the Kafka transaction its rows were produced in */
    bool committed;             /* fencing: that transaction committed: its delivered rows may be marked */
    bool aborted;               /* fencing: that transaction was aborted: nothing of it is visible */
    bool unpublished;           /* fencing: its rows go back unsent; no claim until it is done */
    void *held;                 /* fencing: the claim's result (the daemon's), kept while its rows
                                   wait for the open transaction to end; NULL otherwise */
    struct id_span span;        /* the id range the other batch's claim must skip */
    int64_t skipped_lo;         /* the lowest id its claim skipped (INT64_MAX: none) */
    uint64_t start_ms;
    uint64_t claim_seq;         /* the relay's claims before this one: claims in the order sent
                                   (two can start in one millisecond of the loop's clock) */
    int cap;                    /* rows the per-row arrays hold (batch_size may grow on SIGHUP) */
    int64_t *ids;
    int64_t *created_ms;        /* for the delivery latency histogram */
    unsigned char *state;
    unsigned char *limit;       /* ROW_FAILED: enum attempt_limit of its error */
    char **reason;              /* ROW_FAILED: why (allocated; failures are rare) */
    char **agg;                 /* ROW_FAILED/held: "type\x1fid" of the aggregate (allocated) */
    bool record_each;           /* the batch's failure record failed: one statement per row */
    int record_row;             /* record_each: the row being recorded */
    bool record_lost;           /* record_each: some row's failure could not be recorded */
};

/** Sizes the per-row arrays for @p n rows; only on an empty batch.
 *  @return 0 or -ENOMEM. */
int batch_reserve(struct batch *b, int n);

/** Empties the batch (frees reasons and aggregate keys). The daemon releases
 *  b->held first. */
void batch_clear(struct batch *b);

/** batch_clear, and frees the arrays. */
void batch_free(struct batch *b);

/** The claim's ids and created_ms are in place for @p n rows: every row is
 *  ROW_SKIPPED until produced, and the span covers them all. */
void batch_loaded(struct batch *b, int n);

/** The batch ends before row @p i: the rows from @p i on stay unsent, so the
 *  span shrinks to the rows before, or a later row of one of their
 *  aggregates would be claimed and produced first. */
void batch_cut_at(struct batch *b, int i);

/** Row @p i failed: @p why (NULL: not the row's fault, charged nothing; cut
 *  short at a character boundary if it had to be), @p limit the attempts it
 *  may cost. @return true when it is charged to the row. */
bool batch_row_failed(struct batch *b, int i, enum attempt_limit limit, const char *why);

/** Row @p i's delivery report: delivered (@p v NULL), or failed as @p v
 *  judged it, @p why the error's name (kept when the row is charged).
 *  @return true for the batch's last report: it is PHASE_DELIVERED now. */
bool batch_reported(struct batch *b, int i, const struct failure_verdict *v, const char *why);

/** The rows whose failure is theirs to record, and the first of them (0 if none). */
int batch_failures_to_record(const struct batch *b);
int batch_first_failure(const struct batch *b);

/** The rows that failed through no fault of theirs (an outage, ours, suspects):
 *  charged nothing, produced again. */
int batch_failures_uncharged(const struct batch *b);

/** True when @p key ("type\x1fid") has a failed or held row in one of the
 *  @p n batches: a later row of it must wait behind that row. */
bool batch_holds(const struct batch *batches, int n, const char *key);

/** At most this many gaps are passed to a claim; a span with more is
 *  skipped whole, and nothing above it is claimed until it is marked. */
#define BATCH_GAPS_MAX 100

/** The ids in @p span that no batch of @p mask (bit k: batches[k]) holds,
 *  ascending, into @p gaps: the only ids a pending row in the span that is in
 *  no batch can have (it committed after their claims). The claim takes such
 *  rows with the rows above the span, in id order, so that no later row of
 *  their aggregate overtakes them. @return how many (0 for an empty span),
 *  or -1 when there are more than @p max, or a batch's ids are not ascending
 *  (nothing then proves which ids are free). */
int batch_gaps_within(const struct batch *batches, int n, unsigned mask, struct id_span span,
                      int64_t *gaps, int max);

/* ---- the batch's phases ---------------------------------------------------- */

/** The reports the @p n batches still wait for. */
int batch_outstanding(const struct batch *batches, int n);

/** Whether one of the @p n batches is in phase @p ph. */
bool batch_any_in(const struct batch *batches, int n, enum phase ph);

/** The connection was lost while @p b's statement ran. A lost mark goes back
 *  to PHASE_DELIVERED (marks are conditional: written again after the
 *  reconnect); other phases keep theirs (reports still come).
 *  @return true when the batch is to be emptied: a lost claim produced
 *  nothing, and a lost failure record is simply tried again (an attempt is
 *  not lost data): its rows are claimed again. */
bool batch_lost(struct batch *b);

/** Whether @p b, every report in, has marks to write (then its failures). */
bool batch_marks_due(const struct batch *b);

/** Whether @p b holds a whole batch of @p size rows: claimed full, and not
 *  cut since (a cut leaves its rows after the cut unsent, outside its span). */
bool batch_whole(const struct batch *b, int size);

/** What follows @p b's marks. */
enum batch_next {
    BATCH_RECORD = 0,     /* failures charged to rows: record them */
    BATCH_DONE,           /* nothing to record: the batch is complete */
    BATCH_RETRY_LATER,    /* nothing reached Kafka and no row is to blame: empty the batch,
                             wait a poll interval, claim its rows again */
};
enum batch_next batch_after_marks(const struct batch *b);

/** The Kafka transaction @p gen ended with @p res: the @p n batches whose
 *  rows were produced into it are committed (marked once delivered) or
 *  aborted (nothing of them visible); claims held for a later transaction
 *  were not in it. @return true when the held claims are to be given back
 *  unproduced: they would overtake the rows of the aborted one. */
bool batch_txn_ended(struct batch *batches, int n, unsigned gen, enum producer_txn_result res);

/** What follows when writing @p b's failure record failed. */
enum record_retry {
    RECORD_EACH = 0,    /* the whole batch's record: record the rows one by one, so that
                           one row (a value the table refuses, a trigger) does not lose
                           the bookkeeping of the others */
    RECORD_GIVE_UP,     /* a record of one row: empty the batch and back off; its rows
                           are claimed again and fail again */
    RECORD_NEXT,        /* one by one: this row's record is lost (it is claimed again),
                           the next row's is written */
};
enum record_retry batch_record_failed(const struct batch *b);

/** What becomes of row @p i once its batch is done. */
enum row_end {
    ROW_END_SENT = 0,      /* delivered: marked sent */
    ROW_END_CHARGED,       /* failed on its own: attempts + 1, last_error (maybe dead) */
    ROW_END_CLAIMABLE,     /* nothing written: claimed again (held, cut, outage, ours) */
};
enum row_end batch_row_end(const struct batch *b, int i);

#endif
