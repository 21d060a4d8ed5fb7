/* engine.c — the relay's decisions about rows; see engine.h. No I/O. */
#include "core/engine.h"

#include <errno.h>
#include <string.h>

/* ---- poison policies ------------------------------------------------------ */

/* A new policy is its line in POISON_POLICIES (engine.h) and its row here
 * (and its name in the config key's description); the relay reads only these
 * columns. */
static const struct poison_rules policies[POISON_N] = {
    [POISON_HOLD_AGGREGATE] = {
        .hold_claim = true, .hold_in_flight = true,
        .dead_letters = true, .halts = false,
        .dead_msg = "row dead-lettered; later rows of its aggregate are held",
    },
    [POISON_DEAD_LETTER] = {
        .hold_claim = false, .hold_in_flight = false,
        .dead_letters = true, .halts = false,
        .dead_msg = "row dead-lettered; later rows of its aggregate continue",
    },
    /* The row stays where it is (no dead_at), and so does everything after it. */
    [POISON_HALT] = {
        .hold_claim = false, .hold_in_flight = true,
        .dead_letters = false, .halts = true,
        .dead_msg = "row dead-lettered",
    },
};

#define POISON_NAME_(e, name) [e] = name,
const char *const poison_policy_names[POISON_N + 1] = {
    POISON_POLICIES(POISON_NAME_)[POISON_N] = NULL,
};
#undef POISON_NAME_

const struct poison_rules *poison_rules_of(enum poison_policy p)
{
    return &policies[p < POISON_N ? p : POISON_HOLD_AGGREGATE];
}

enum poison_policy poison_policy_parse(const char *name)
{
    for (int p = 0; p < POISON_N; p++)
        if (strcmp(name, poison_policy_names[p]) == 0)
            return (enum poison_policy)p;
    return POISON_N;
}

enum poison_outcome poison_outcome_of(const struct poison_rules *rules, bool dead, bool exhausted,
                                      bool halted)
{
    if (dead)
        return OUTCOME_DEAD_LETTERED;
    return exhausted && rules->halts && !halted ? OUTCOME_HALT : OUTCOME_RETRY;
}

/* ---- a failed delivery ---------------------------------------------------- */

struct failure_verdict engine_judge_failure(enum kafka_fault fault, bool alone)
{
    struct failure_verdict v = {0};
    v.permanent = fault == KAFKA_FAULT_PERMANENT;
    v.limit = v.permanent ? LIMIT_ONE
              : fault == KAFKA_FAULT_OUTAGE || fault == KAFKA_FAULT_DENIED ? LIMIT_NONE
                                                                           : LIMIT_MAX;
    switch (fault) {
    case KAFKA_FAULT_OURS:
        /* Purged at shutdown, or caught in a fatal error the relay recovers
         * from: nobody's failure, not even a failed delivery to count. */
        break;
    case KAFKA_FAULT_OUTAGE:
        /* Counted as a failed delivery, charged to nobody. */
        v.counted = true;
        break;
    case KAFKA_FAULT_DENIED:
        /* Every row of the topic fails alike until an ACL changes: charged
         * to nobody, and retried only after a back-off, not in a loop. */
        v.counted = true;
        v.denied = true;
        break;
    case KAFKA_FAULT_PERMANENT:
    case KAFKA_FAULT_RETRIABLE:
        /* A broker rejects a whole produce request with one error: every
         * row in it gets it, though at most one may be at fault. */
        v.counted = true;
        v.suspect = !alone;
        v.charged = alone;
        break;
    }
    return v;
}

/* ---- handing a row to the producer ---------------------------------------- */

enum send_verdict engine_send_verdict(int rc, bool queue_empty)
{
    if (rc == 0)
        return SEND_QUEUED;
    /* A full queue frees room as reports come, unless nothing is in it:
     * then this row alone is too large, and always will be. */
    if (rc == -ENOBUFS)
        return queue_empty ? SEND_TOO_LARGE : SEND_CUT;
    if (rc == -EIO)
        return SEND_CUT;
    /* librdkafka keeps a topic it was refused in an error state and fails
     * every produce to it at once: the same refusal as a delivery report's. */
    if (rc == -EACCES)
        return SEND_DENIED;
    return SEND_REFUSED;
}

/* ---- id spans ------------------------------------------------------------- */

struct id_span id_span_empty(void)
{
    return (struct id_span){ .lo = 1, .hi = 0 };
}

struct id_span id_span_of(const int64_t *ids, int n)
{
    struct id_span s = { .lo = INT64_MAX, .hi = INT64_MIN };
    for (int i = 0; i < n; i++) {
        if (ids[i] < s.lo)
            s.lo = ids[i];
        if (ids[i] > s.hi)
            s.hi = ids[i];
    }
    return n > 0 ? s : id_span_empty();
}

struct id_span id_span_union(struct id_span a, struct id_span b)
{
    if (id_span_is_empty(a))
        return b;
    if (id_span_is_empty(b))
        return a;
    return (struct id_span){ .lo = a.lo < b.lo ? a.lo : b.lo, .hi = a.hi > b.hi ? a.hi : b.hi };
}
