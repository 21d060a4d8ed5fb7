/* plan.c — the relay's next step; see plan.h. No I/O. */
#include "core/plan.h"

#include <assert.h>
#include <stddef.h>

/* ---- the batches ---------------------------------------------------------- */

static bool all_empty(const struct plan_state *s)
{
    for (int k = 0; k < s->n_batches; k++)
        if (s->b[k].phase != PHASE_EMPTY)
            return false;
    return true;
}

/* ---- the Kafka transaction ------------------------------------------------ */

/* With relay.fencing=transactional a batch is marked only once its
 * transaction committed: before that, nothing of it is visible. */
bool plan_txn_settled(const struct plan_state *s, const struct batch *b)
{
    return s->txn == PRODUCER_TXN_OFF || b->committed;
}

/* A batch whose transaction has not committed yet is still with Kafka. */
static bool txn_with_kafka(const struct plan_state *s, const struct batch *b)
{
    return b->phase == PHASE_DELIVERED && s->txn != PRODUCER_TXN_OFF && !b->committed;
}

/* A claim may run while a transaction is open or ending (its rows then wait,
 * held, for the next one), not before transactions are initialised nor into
 * one that must abort. */
bool plan_txn_may_claim(const struct plan_state *s)
{
    for (int k = 0; k < s->n_batches; k++)
        if (s->b[k].unpublished)
            return false; /* its rows come first: they are claimed again once it is done */
    return s->txn == PRODUCER_TXN_OFF ||
           ((s->txn == PRODUCER_TXN_OPEN || s->txn == PRODUCER_TXN_BUSY) && !s->txn_doomed);
}

/* Claimed rows are not produced now, whether the claim just answered
 * (plan_claimed) or was held for the next transaction (plan_fence). */
static bool claims_unwanted(const struct plan_state *s)
{
    return s->stopping || s->halted || s->halt_pending || s->refused;
}

/* The batches produced into the open transaction, @p b aside. */
static int txn_batches(const struct plan_state *s, const struct batch *b)
{
    int n = 0;
    for (int k = 0; k < s->n_batches; k++) {
        const struct batch *o = &s->b[k];
        n += o != b && !o->held && !o->committed && o->txn_gen == s->txn_gen &&
             (o->phase == PHASE_PRODUCING || o->phase == PHASE_DELIVERED);
    }
    return n;
}

bool plan_txn_holds(const struct plan_state *s, const struct batch *b)
{
    if (s->txn == PRODUCER_TXN_OFF)
        return false;
    bool others_held = false;
    for (int k = 0; k < s->n_batches; k++)
        others_held |= s->b[k].held != NULL && &s->b[k] != b;
    return !(s->txn == PRODUCER_TXN_OPEN && !s->txn_doomed && !others_held &&
             txn_batches(s, b) < PLAN_TXN_BATCHES_MAX);
}

/* A backlog is being claimed into the open transaction, which has room. */
static bool txn_growing(const struct plan_state *s)
{
    if (!s->claim_full || claims_unwanted(s) || txn_batches(s, NULL) >= PLAN_TXN_BATCHES_MAX)
        return false;
    bool claiming = false, free_slot = false;
    for (int k = 0; k < s->n_batches; k++) {
        claiming |= s->b[k].phase == PHASE_CLAIMING;
        free_slot |= s->b[k].phase == PHASE_EMPTY;
        if (s->b[k].held)
            return false; /* the next claim waits for the next transaction anyway */
    }
    return claiming || (s->wake && free_slot && !s->halt_pending);
}

/* The oldest batch whose claim result waits for the open transaction; -1. */
static int oldest_held(const struct plan_state *s)
{
    int oldest = -1;
    for (int k = 0; k < s->n_batches; k++)
        if (s->b[k].held && (oldest < 0 || s->b[k].claim_seq < s->b[oldest].claim_seq))
            oldest = k;
    return oldest;
}

struct fence_plan plan_fence(const struct plan_state *s)
{
    struct fence_plan f = { .release = -1 };
    assert(s->n_batches <= PLAN_MAX_BATCHES);
    if (s->txn == PRODUCER_TXN_OFF)
        return f;
    /* A dead producer's open transaction is never committed, nor one in which
     * a message failed: settle their batches as aborted at once, so that the
     * failures are recorded while the abort waits for the coordinator (which
     * may be down: the outage then costs no attempt and marks nothing). */
    for (int k = 0; k < s->n_batches; k++) {
        const struct batch *b = &s->b[k];
        if (b->phase != PHASE_DELIVERED || b->committed)
            continue;
        if (b->aborted || s->txn == PRODUCER_TXN_DEAD || (s->txn_doomed && b->txn_gen == s->txn_gen))
            f.unpublish |= 1u << k;
    }
    if (s->txn == PRODUCER_TXN_UNINIT) {
        /* Before the first produce of a leader, never for a standby; a
         * replaced producer waits until the lock is known to be ours, and
         * one made after refused connections until a broker is up. */
        f.init = s->role == STATS_ROLE_LEADER && !s->lead_unverified && !s->stopping &&
                 !s->connect_refused;
        return f;
    }
    f.drop_held = s->txn == PRODUCER_TXN_DEAD || claims_unwanted(s);
    if (s->txn != PRODUCER_TXN_OPEN)
        return f;
    bool due = false;
    for (int k = 0; k < s->n_batches; k++) {
        const struct batch *b = &s->b[k];
        if (b->phase != PHASE_DELIVERED || b->committed || (f.unpublish & (1u << k)))
            continue;
        if (b->txn_gen != s->txn_gen)
            continue; /* its transaction ended: the end's report settles it */
        if (s->txn_empty)
            f.settle_empty |= 1u << k; /* nothing of it reached the producer */
        else
            due = true;
    }
    /* Commits what is in flight too: the commit waits for its reports. A
     * doomed transaction is ended at once: the commit call aborts it. Under
     * a backlog the transaction first takes the batch being claimed, up to
     * PLAN_TXN_BATCHES_MAX: a commit costs a round trip to the coordinator
     * and the markers, paid once per transaction, not per batch. */
    f.commit = (due && !txn_growing(s)) || s->txn_doomed;
    if (!f.commit && s->txn_empty && !f.drop_held) {
        f.release = oldest_held(s);
        /* An unpublished batch counts as a cut: the held claim skipped its rows. */
        if (f.release >= 0)
            f.release_stale = s->b[f.release].claim_gen != s->truncations || f.unpublish != 0;
    }
    return f;
}

/* ---- the next step -------------------------------------------------------- */

static struct plan_step act(enum plan_act a)
{
    return (struct plan_step){ .act = a, .slot = -1, .index = -1 };
}

/* A new connection's checks and preparations, in order: the session, the
 * schema, the hot statements. PLAN_WAIT with @p *done false while they are
 * not all done. */
static struct plan_step connection_checks(const struct plan_state *s, bool *done)
{
    *done = false;
    /* Stopped before the checks passed: nothing was claimed on this
     * connection nor the lock taken, so nothing is waited for. */
    if (s->stopping && all_empty(s) && (!s->session_checked || !s->schema_checked))
        return act(PLAN_FINISH);
    if (!s->session_checked)
        return act(s->backoff ? PLAN_WAIT : PLAN_CHECK_SESSION);
    /* Refused: the batches in flight are marked first, unless the statements
     * that mark are not prepared or the deadline passed. */
    if (s->refused && (s->prepared < s->n_hot || all_empty(s) || s->now_ms >= s->refuse_deadline_ms))
        return act(PLAN_WIND_DOWN);
    if (!s->schema_checked)
        return act(s->backoff ? PLAN_WAIT : PLAN_CHECK_SCHEMA);
    if (s->prepared < s->n_hot) {
        struct plan_step p = act(s->backoff ? PLAN_WAIT : PLAN_PREPARE);
        p.index = s->backoff ? -1 : s->prepared;
        return p;
    }
    *done = true;
    return act(PLAN_WAIT);
}

static bool mark_due(const struct plan_state *s, const struct batch *b)
{
    return b->phase == PHASE_DELIVERED && !s->backoff && plan_txn_settled(s, b);
}

/* Delivered rows are marked whatever our role (a mark records a fact), the
 * lowest slot first, with every other batch whose marks are due as well: a
 * Kafka transaction settles its batches at once, and one statement is one
 * round trip and one commit. PLAN_WAIT with @p *done false when nothing else
 * may run: back-off, stopping (only marks, until all is empty), refused. */
static struct plan_step marks(const struct plan_state *s, bool *done)
{
    *done = false;
    for (int k = 0; k < s->n_batches; k++) {
        if (!mark_due(s, &s->b[k]))
            continue;
        struct plan_step p = act(PLAN_MARK);
        p.slot = k;
        for (int j = k + 1; j < s->n_batches && batch_marks_due(&s->b[k]); j++)
            if (mark_due(s, &s->b[j]) && batch_marks_due(&s->b[j]))
                p.with |= 1u << j;
        return p;
    }
    if (s->stopping) {
        /* capture = wal: an event kept as a dead row lets its transaction be confirmed */
        if (s->dead_due && s->role == STATS_ROLE_LEADER)
            return act(PLAN_RECORD_DEAD);
        return act(all_empty(s) && !s->capture_unsettled ? PLAN_FINISH : PLAN_WAIT);
    }
    /* Without back-off, a batch with marks due was chosen above. */
    *done = !s->backoff && !s->refused;
    return act(PLAN_WAIT);
}

/* A fatal producer is replaced once its batches have failed with __FATAL
 * and no transaction call runs on it, and, when Kafka refused it a right,
 * once its back-off has passed. One whose connections are refused is
 * stopped first, at once, its batches' rows failed by the stop (nothing of
 * them reached a broker): kept even until they are marked, it would have
 * librdkafka connect again (reconnect.backoff.ms) and be refused again. */
static struct plan_step producer(const struct plan_state *s, bool *done)
{
    *done = !s->producer_fatal && !s->producer_down;
    if (*done || s->txn == PRODUCER_TXN_BUSY)
        return act(PLAN_WAIT);
    if (s->producer_refused && !s->producer_down)
        return act(PLAN_STOP_PRODUCER);
    if (all_empty(s) && s->now_ms >= s->producer_retry_at_ms)
        return act(PLAN_REPLACE_PRODUCER);
    return act(PLAN_WAIT);
}

static struct plan_step leadership(const struct plan_state *s, bool *done)
{
    *done = false;
    if (s->role == STATS_ROLE_UNKNOWN || (s->role == STATS_ROLE_STANDBY && s->lock_due))
        return act(PLAN_TAKE_LOCK);
    if (s->role == STATS_ROLE_LEADER && s->lock_due)
        return act(PLAN_VERIFY_LOCK);
    if (s->role == STATS_ROLE_STANDBY && s->holder_due)
        return act(PLAN_ASK_HOLDER);
    *done = true;
    return act(PLAN_WAIT);
}

/* Another batch is claimed only while the others are with Kafka; retention
 * runs when nothing is in flight. */
static struct plan_step claim(const struct plan_state *s)
{
    int free_slot = -1, in_use = 0;
    bool busy = false, full = true;
    for (int k = 0; k < s->n_batches; k++) {
        if (s->b[k].phase == PHASE_EMPTY) {
            free_slot = free_slot >= 0 ? free_slot : k;
            continue;
        }
        in_use++;
        full &= batch_whole(&s->b[k], s->batch_size);
        if (s->b[k].phase != PHASE_PRODUCING && !txn_with_kafka(s, &s->b[k]))
            busy = true;
    }
    /* A slot beyond what one transaction carries serves a backlog only: its
     * claim waits for the next transaction, which Kafka then works on while
     * this one's batches are marked. Under a trickle the rows it took would
     * wait for that transaction instead of joining the next claim's. */
    if (in_use >= PLAN_TXN_BATCHES_MAX && (s->txn == PRODUCER_TXN_OFF || !full))
        free_slot = -1;
    bool drained = batch_outstanding(s->b, s->n_batches) == 0; /* nothing of ours is queued: there is room */
    /* Rows produced alone go one at a time: nothing else may share their request. */
    if (s->isolating && !all_empty(s))
        busy = true;
    struct plan_step p = act(PLAN_WAIT);
    /* A right refused on the topic: the rows wait out the back-off. */
    bool denied = s->now_ms < s->producer_retry_at_ms;
    if (s->wake && !s->halted && !s->halt_pending && (!s->queue_full || drained) &&
        free_slot >= 0 && !busy && !denied && plan_txn_may_claim(s)) {
        p.act = PLAN_CLAIM;
        p.slot = free_slot;
        p.alone = s->isolating;
        p.limit = s->isolating ? 1 : s->batch_size;
        /* The other batches' rows are not marked yet: their id range is
         * skipped, and rows inside it that were not theirs are found by the
         * claim after their marks. No id cursor survives a batch, so no
         * late-committing row is skipped for ever. */
        p.skip = id_span_empty();
        for (int k = 0; k < s->n_batches; k++) {
            if (k == free_slot || s->b[k].phase == PHASE_EMPTY || s->b[k].n_rows == 0)
                continue;
            p.skip = id_span_union(p.skip, s->b[k].span);
            p.rescan |= 1u << k;
        }
    } else if (s->retention_due && all_empty(s)) {
        p.act = PLAN_RETENTION;
    }
    p.queue_drained = drained;
    return p;
}

/* The quiet lock, before a claim: taken when writers notify faster than
 * claims return (plan_claimed), released when a claim finds nothing. Only a
 * leader holds it: a standby holding it would leave the new leader unwoken. */
static struct plan_step quiet(const struct plan_state *s, bool *done)
{
    *done = false;
    bool leading = s->role == STATS_ROLE_LEADER && s->listening && !s->stopping && !s->refused;
    switch (s->quiet) {
    case PLAN_QUIET_OFF:
        if (leading && s->quiet_wanted)
            return act(PLAN_TAKE_QUIET);
        break;
    case PLAN_QUIET_ON:
        if (!leading || s->quiet_idle)
            return act(PLAN_RELEASE_QUIET);
        break;
    case PLAN_QUIET_LEAVING:
        /* Writers that notify again while the check waits for them: the
         * stream never paused. Quiet again, the relay claims until a claim
         * finds nothing, as before; without it a steady stream keeps the
         * check failing and every writer notifying until it pauses. */
        if (leading && s->quiet_wanted)
            return act(PLAN_TAKE_QUIET);
        /* A claim that finds rows comes first: the check is for the last one. */
        if (leading && s->quiet_idle && s->now_ms >= s->quiet_check_at_ms)
            return act(PLAN_CHECK_QUIET);
        break;
    }
    *done = true;
    return act(PLAN_WAIT);
}

/* The first stages, in priority order: each answers a step, or sets *done
 * when it has nothing to do and the next may decide. */
static struct plan_step (*const stages[])(const struct plan_state *, bool *) = {
    connection_checks, marks, producer, leadership,
};

/* relay.capture = wal, once the connection is checked and the role known:
 * the slot query for every role, then the leader's heartbeat and retention.
 * No LISTEN, claim, backlog count or quiet lock: the stream brings the rows. */
static struct plan_step capture_next(const struct plan_state *s)
{
    if (s->slot_query_due)
        return act(PLAN_SLOT_QUERY);
    if (s->role != STATS_ROLE_LEADER || s->stopping)
        return act(PLAN_WAIT);
    if (s->quiet_wanted && s->quiet == PLAN_QUIET_OFF)
        return act(PLAN_TAKE_QUIET); /* held while leading: nothing listens for NOTIFY */
    /* A deposed leader, paused, may still hold the slot through its walsender
     * until wal_sender_timeout: the lock says it is no longer entitled to. */
    if (s->slot_busy)
        return act(PLAN_SLOT_TAKE_OVER);
    if (s->dead_due)
        return act(PLAN_RECORD_DEAD); /* its transaction is confirmed only then */
    if (s->heartbeat_due)
        return act(PLAN_HEARTBEAT);
    if (s->retention_due && s->capture_streaming)
        return act(PLAN_RETENTION);
    return act(PLAN_WAIT);
}

uint64_t plan_backlog_next_ms(uint64_t now_ms, uint64_t took_ms)
{
    /* At 1M pending rows the count takes ~0.35 s: every 5 s, 7 % of the
     * drain, and a stall of every claim and mark behind it. */
    uint64_t every = took_ms * PLAN_BACKLOG_SHARE;
    if (every < PLAN_BACKLOG_EVERY_MS)
        every = PLAN_BACKLOG_EVERY_MS;
    if (every > PLAN_BACKLOG_AT_MOST_EVERY_MS)
        every = PLAN_BACKLOG_AT_MOST_EVERY_MS;
    return now_ms + every;
}

struct plan_step plan_next(const struct plan_state *s)
{
    bool done;
    struct plan_step p;
    assert(s->n_batches <= PLAN_MAX_BATCHES);
    if (!s->pg_ready)
        return act(PLAN_WAIT);
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++) {
        p = stages[i](s, &done);
        if (!done)
            return p;
    }
    if (!s->ready_sent)
        return act(PLAN_READY); /* connected, the role known: what Type=notify waits for */
    if (s->capture_wal)
        return capture_next(s);
    /* Under row-level security the relay would count only what it sees. */
    if (s->now_ms >= s->backlog_due_ms && !s->row_security &&
        !(s->claim_first && s->now_ms < s->claim_first_until)) {
        p = act(PLAN_COUNT_BACKLOG);
        p.at_ms = plan_backlog_next_ms(s->now_ms, s->backlog_took_ms);
        return p;
    }
    p = quiet(s, &done);
    if (!done)
        return p;
    if (s->role != STATS_ROLE_LEADER)
        return act(PLAN_WAIT);
    if (!s->listening)
        return act(PLAN_LISTEN);
    return claim(s);
}

/* A batch other than @p b holds rows on their way to Kafka. */
static bool others_in_flight(const struct plan_state *s, const struct batch *b)
{
    for (int k = 0; k < s->n_batches; k++)
        if (s->b[k].slot != b->slot && s->b[k].phase != PHASE_EMPTY && s->b[k].n_rows > 0)
            return true;
    return false;
}

struct claim_verdict plan_claimed(const struct plan_state *s, const struct batch *b, int n,
                                  int64_t first_id)
{
    struct claim_verdict v = { .use = CLAIM_PRODUCE, .alone = b->alone };
    v.quiet_wanted = n > 0 && s->notifies >= PLAN_QUIET_NOTIFIES;
    /* An empty claim beside a batch in flight says little: that batch took
     * what was there a moment ago, and its mark wakes a claim again (the
     * claim skipped its range). Releasing the lock on it would let writers
     * notify again between every two batches of a steady stream. */
    v.quiet_idle = n == 0 && !others_in_flight(s, b);
    if (b->claim_gen != s->truncations) {
        v.use = CLAIM_STALE;
        return v;
    }
    if (b->alone && (n == 0 || first_id > s->isolate_until_id)) {
        v.isolation_over = true;
        v.alone = n > 0;
    }
    if (n == 0 || claims_unwanted(s)) {
        v.use = CLAIM_DROP;
        return v;
    }
    /* A row produced alone while suspects remain means more are waiting
     * too: the poll interval would pace the isolation at one row per interval. */
    v.more = n >= (v.alone ? 1 : s->batch_size);
    /* No NOTIFY wakes a quiet relay: it claims again while claims find rows. */
    v.more |= s->quiet != PLAN_QUIET_OFF;
    return v;
}

const char *plan_act_name(enum plan_act a)
{
    static const char *const names[] = {
        [PLAN_WAIT] = "wait",
        [PLAN_FINISH] = "finish",
        [PLAN_CHECK_SESSION] = "check_session",
        [PLAN_WIND_DOWN] = "wind_down",
        [PLAN_CHECK_SCHEMA] = "check_schema",
        [PLAN_PREPARE] = "prepare",
        [PLAN_MARK] = "mark",
        [PLAN_REPLACE_PRODUCER] = "replace_producer",
        [PLAN_STOP_PRODUCER] = "stop_producer",
        [PLAN_TAKE_LOCK] = "take_lock",
        [PLAN_VERIFY_LOCK] = "verify_lock",
        [PLAN_ASK_HOLDER] = "ask_holder",
        [PLAN_READY] = "ready",
        [PLAN_COUNT_BACKLOG] = "count_backlog",
        [PLAN_LISTEN] = "listen",
        [PLAN_CLAIM] = "claim",
        [PLAN_RETENTION] = "retention",
        [PLAN_TAKE_QUIET] = "take_quiet",
        [PLAN_RELEASE_QUIET] = "release_quiet",
        [PLAN_CHECK_QUIET] = "check_quiet",
        [PLAN_HEARTBEAT] = "heartbeat",
        [PLAN_SLOT_QUERY] = "slot_query",
        [PLAN_SLOT_TAKE_OVER] = "slot_take_over",
        [PLAN_RECORD_DEAD] = "record_dead",
    };
    return (unsigned)a < sizeof names / sizeof names[0] && names[a] ? names[a] : "?";
}

/* ---- the connection ------------------------------------------------------- */

uint64_t plan_reconnect_delay(unsigned attempt, uint64_t base_ms, uint64_t max_ms, uint64_t random)
{
    uint64_t delay = base_ms;
    for (unsigned k = 0; k < attempt && delay < max_ms; k++)
        delay *= 2;
    if (delay > max_ms)
        delay = max_ms;
    return delay / 2 + random % (delay / 2 + 1);
}

uint64_t plan_denied_delay(unsigned attempt, uint64_t random)
{
    return plan_reconnect_delay(attempt, PLAN_DENIED_FIRST_MS, PLAN_DENIED_MAX_MS, random);
}

uint64_t plan_quiet_check_wait(uint64_t prev_ms, uint64_t poll_interval_ms)
{
    uint64_t wait = prev_ms ? 2 * prev_ms : PLAN_QUIET_FIRST_CHECK_MS;
    if (wait > PLAN_QUIET_LAST_CHECK_MS)
        wait = PLAN_QUIET_LAST_CHECK_MS;
    return wait < poll_interval_ms ? wait : poll_interval_ms;
}

bool plan_retention_due(long retention_s, uint64_t now_ms, uint64_t last_ms)
{
    return retention_s > 0 && now_ms - last_ms >= PLAN_RETENTION_EVERY_MS;
}

/* ---- shutdown ------------------------------------------------------------- */

enum drain_act plan_drain_on_signal(bool stopping, bool pg_connected, bool producing)
{
    if (stopping)
        return DRAIN_FINISH; /* a second signal: the operator will not wait */
    return !pg_connected && !producing ? DRAIN_FINISH : DRAIN_WAIT;
}

enum drain_act plan_drain_on_deadline(bool purged, bool producing)
{
    return !purged && producing ? DRAIN_PURGE : DRAIN_FINISH;
}

enum drain_act plan_drain_on_lost(bool producing)
{
    return producing ? DRAIN_WAIT : DRAIN_FINISH;
}
