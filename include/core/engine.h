/* engine.h — the relay's decisions about rows, apart from any I/O.
 *
 * What a failed delivery means for the row, what each on_poison policy does,
 * and which id range a claim must skip while other batches are in flight.
 * Nothing here calls PostgreSQL, Kafka or the event loop (the source includes
 * none of their headers), so every rule is unit-tested on its own
 * (tests/unit/test_engine.c); the daemon (relay/daemon/relay_*.c) feeds it what happened and carries out
 * what it decides. */
#ifndef OUTBOX_ENGINE_H
#define OUTBOX_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/kafka_rules.h"

/* ---- poison policies: one row each --------------------------------------- */

/* Each policy's enum and relay.on_poison value; what it does is its row of
 * policies[] in engine.c. The configuration accepts exactly these names. */
#define POISON_POLICIES(X)                                                                         \
    X(POISON_HOLD_AGGREGATE, "hold_aggregate")                                                     \
    X(POISON_DEAD_LETTER, "dead_letter")                                                           \
    X(POISON_HALT, "halt")

#define POISON_ENUM_(e, name) e,
enum poison_policy { POISON_POLICIES(POISON_ENUM_) POISON_N };
#undef POISON_ENUM_

struct poison_rules {
    bool hold_claim;        /* the claim skips the aggregates of dead rows (SQL_HOLD_AGGREGATE) */
    bool hold_in_flight;    /* later rows of a failed row's aggregate in the batches in flight
                               wait behind it instead of overtaking it */
    bool dead_letters;      /* a row out of attempts gets dead_at and is skipped from then on */
    bool halts;             /* a row out of attempts stops relaying */
    const char *dead_msg;   /* the log line of a dead-lettered row */
};

/** The rules of @p p. */
const struct poison_rules *poison_rules_of(enum poison_policy p);

/** The policy named @p name; POISON_N if none is (the config rejects those). */
enum poison_policy poison_policy_parse(const char *name);

/** Every policy's name, in enum order, NULL-terminated: the config's allowed values. */
extern const char *const poison_policy_names[];

/** What a row's recorded failure means under its policy. */
enum poison_outcome {
    OUTCOME_RETRY = 0,      /* attempts left (or halted already): claimed and produced again */
    OUTCOME_DEAD_LETTERED,  /* out of attempts, dead_at set: skipped from now on */
    OUTCOME_HALT,           /* out of attempts under halt: relaying stops */
};

/** The outcome of a failure record under @p rules: @p dead, the record set
 *  dead_at (it asks for that only when rules->dead_letters); @p exhausted,
 *  the row is out of attempts; @p halted, relaying stopped already. */
enum poison_outcome poison_outcome_of(const struct poison_rules *rules, bool dead, bool exhausted,
                                      bool halted);

/* ---- a failed delivery --------------------------------------------------- */

/** How many attempts a failure may cost before on_poison applies. */
enum attempt_limit {
    LIMIT_ONE = 0,    /* permanent: retrying the same message cannot cure it */
    LIMIT_MAX,        /* retriable and maybe the row's own (e.g. its topic does not exist) */
    LIMIT_NONE,       /* Kafka itself is (partly) unavailable: no attempt is counted */
};

struct failure_verdict {
    bool charged;             /* the row's own: attempts + 1 and last_error */
    bool suspect;             /* it shared a failed request: produced alone before anyone
                                 is charged; charged nothing meanwhile */
    bool counted;             /* counts in the failed deliveries metric */
    bool permanent;           /* the metric's reason: permanent, else retriable */
    bool denied;              /* a right refused: nothing more is produced until a back-off
                                 (plan_denied_delay) has passed */
    enum attempt_limit limit; /* when charged */
};

/** The rule for a row whose delivery failed with an error of class @p fault.
 *  @p alone: the row was produced while nothing else was, so a failure of its
 *  request is its own. A failure that is the relay's own (ours) or an outage
 *  costs nothing; any other is proven the row's only once it fails alone. */
struct failure_verdict engine_judge_failure(enum kafka_fault fault, bool alone);

/* ---- handing a row to the producer --------------------------------------- */

/** What a row's hand-over to the producer means for it. */
enum send_verdict {
    SEND_QUEUED = 0,    /* with the producer: its delivery report follows */
    SEND_REFUSED,       /* it can never be produced as it is (its topic, headers, size):
                           charged, and one attempt exhausts it */
    SEND_TOO_LARGE,     /* larger than the whole producer queue, which is empty: refused too */
    SEND_CUT,           /* the producer cannot take it now (queue full, producer unusable):
                           not the row's fault; the batch ends before it */
    SEND_DENIED,        /* the principal lacks a right on its topic (-EACCES): not the row's
                           fault; the batch ends before it and the relay backs off */
};

/** The verdict on a hand-over that returned @p rc (0 or a negative errno as
 *  producer_send returns them, -EACCES for a topic the principal may not
 *  write; -EINVAL also for a topic that cannot be rendered), @p queue_empty: nothing of the relay's is in the producer. */
enum send_verdict engine_send_verdict(int rc, bool queue_empty);

/** What the error of a SEND_TOO_LARGE hand-over says after the producer's words. */
#define ENGINE_TOO_LARGE_WHY " (larger than the producer queue: queue.buffering.max.kbytes)"


/* ---- the id ranges of batches in flight ---------------------------------- */

/** Ids lo..hi, both included; empty when lo > hi. */
struct id_span {
    int64_t lo, hi;
};

/** The empty span. */
struct id_span id_span_empty(void);

/** The smallest span holding ids[0..n-1]; empty for n == 0. */
struct id_span id_span_of(const int64_t *ids, int n);

/** The smallest span holding both. */
struct id_span id_span_union(struct id_span a, struct id_span b);

static inline bool id_span_is_empty(struct id_span s)
{
    return s.lo > s.hi;
}

#endif
