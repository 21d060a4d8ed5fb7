/* capture_plan.c — relay.capture = wal: the stream's rules, without I/O.
 *
 * The standby status update reports a source transaction's end LSN as
 * flushed only once every message of it, and of every transaction before
 * it, is acknowledged by Kafka — committed, with fencing = transactional
 * (pgo_acks keeps one entry per transaction in flight). Any failure restarts
 * the stream from what was confirmed: the server sends again what followed,
 * so nothing is lost and what was in flight may come twice. */
#include "core/capture_plan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/pg_binary.h"
#include "core/plan.h"

/* The stream generation in a delivery report's opaque, above the transaction's sequence. */
#define OPAQUE_GEN_SHIFT 48
#define OPAQUE_GEN_MASK 0xffffu

void capture_plan_init(struct capture_plan *p)
{
    memset(p, 0, sizeof *p);
}

void capture_plan_free(struct capture_plan *p)
{
    pgo_acks_free(&p->acks);
    free(p->open);
    free(p->done);
    memset(p, 0, sizeof *p);
}

static bool transactional(const struct capture_env *e)
{
    return e->txn != PRODUCER_TXN_OFF;
}

/* ---- confirming ----------------------------------------------------------- */

/* The acknowledgements say @p lsn may be confirmed. */
static void confirm(struct capture_plan *p, uint64_t now_ms, uint64_t lsn, struct capture_acts *a)
{
    if (lsn <= p->confirmed)
        return;
    p->confirmed = lsn;
    p->last_progress_ms = now_ms;
    a->what |= CAP_DO_CONFIRMED | CAP_DO_STATUS;
}

/* Ends the stream; it starts again from the confirmed position once this
 * relay leads and what it sent is settled (capture_plan_step), after a
 * back-off when it ended on a failure (@p failed). */
static void stop(struct capture_plan *p, const struct capture_env *e, const char *why, bool failed,
                 struct capture_acts *a)
{
    a->what |= CAP_DO_CLOSE;
    a->why = p->state != CAPTURE_OFF ? why : NULL;
    p->state = CAPTURE_OFF;
    /* A failure waits, longer each time in a row (the reconnect back-off of
     * polling's connection); a lost leadership waits only for the lock. */
    p->restart_at_ms = e->now_ms;
    if (failed) {
        p->restart_at_ms += plan_reconnect_delay(p->failures, CAPTURE_RETRY_MS,
                                                 CAPTURE_RETRY_MAX_MS, e->random);
        p->failures++;
    }
}

/* ---- the Kafka transaction ------------------------------------------------ */

/* The messages of the open Kafka transaction become the committing ones. */
static void commit(struct capture_plan *p, const struct capture_env *e, struct capture_acts *a)
{
    if (p->committing || e->txn != PRODUCER_TXN_OPEN || p->txn_msgs == 0)
        return;
    if (e->txn_empty) {
        /* They went with a transaction that ended without this plan, or with
         * the producer that held it: nothing of them is confirmed, and the
         * next stream sends them again. Committing the empty one would
         * confirm what Kafka never got. */
        p->n_open = 0;
        p->txn_msgs = 0;
        p->txn_whole = false;
        return;
    }
    struct capture_count *tmp = p->done;
    size_t cap = p->done_cap;
    p->done = p->open;
    p->n_done = p->n_open;
    p->done_cap = p->open_cap;
    p->done_msgs = p->txn_msgs;
    p->open = tmp;
    p->open_cap = cap;
    p->n_open = 0;
    p->txn_msgs = 0;
    p->txn_whole = false;
    p->committing = true;
    p->commit_at_ms = e->now_ms;
    a->what |= CAP_DO_COMMIT;
}

static void commit_held(struct capture_plan *p, const struct capture_env *e, struct capture_acts *a)
{
    if (transactional(e) && p->txn_msgs > 0)
        commit(p, e, a);
}

struct capture_acts capture_plan_committed(struct capture_plan *p, const struct capture_env *e,
                                           bool ok)
{
    struct capture_acts a = { 0 };
    p->committing = false;
    if (ok) {
        uint64_t lsn = p->confirmed;
        for (size_t i = 0; i < p->n_done; i++)
            lsn = pgo_acks_done_n(&p->acks, p->done[i].seq, p->done[i].n);
        a.published = p->done_msgs;
        confirm(p, e->now_ms, lsn, &a);
        if (p->done_msgs < CAPTURE_TRICKLE_MSGS)
            p->rest_until_ms = p->commit_at_ms + CAPTURE_COMMIT_EVERY_MS;
        /* What was read ahead during the commit is produced now; the socket
         * may have nothing more for a while (a trickle), so the read that
         * ends idle, which commits it, is not left to the next event. */
        a.what |= CAP_DO_DRAIN_KICK;
    } else {
        stop(p, e, "kafka transaction aborted", true, &a);
    }
    p->n_done = 0;
    p->done_msgs = 0;
    a.what |= CAP_DO_STEP;
    return a;
}

/* One message of source transaction @p seq went into the open Kafka transaction. */
static bool count_open(struct capture_plan *p, uint64_t seq)
{
    if (p->n_open > 0 && p->open[p->n_open - 1].seq == seq) {
        p->open[p->n_open - 1].n++;
        return true;
    }
    if (p->n_open == p->open_cap) {
        size_t cap = p->open_cap ? 2 * p->open_cap : 64;
        struct capture_count *v = realloc(p->open, cap * sizeof *v);
        if (!v)
            return false;
        p->open = v;
        p->open_cap = cap;
    }
    p->open[p->n_open++] = (struct capture_count){ .seq = seq, .n = 1 };
    return true;
}

/* ---- the stream's messages ------------------------------------------------ */

bool capture_plan_may_produce(const struct capture_plan *p, const struct capture_env *e)
{
    /* Stopping, the source transaction being read is finished first: its
     * events are then confirmed, and the next relay does not send them again. */
    bool stopping = e->stopping && !p->in_txn;
    return e->leader && !stopping && !e->halted && !e->refused && !e->producer_fatal &&
           !p->committing &&
           (e->txn == PRODUCER_TXN_OFF || (e->txn == PRODUCER_TXN_OPEN && !e->txn_doomed));
}

bool capture_plan_admit(struct capture_plan *p, const struct capture_env *e, struct capture_acts *a)
{
    /* A full transaction waits here, before its message is decoded. */
    if (capture_plan_may_produce(p, e) && !(transactional(e) && p->txn_msgs >= CAPTURE_TXN_MAX_MSGS))
        return true;
    commit_held(p, e, a);
    return false;
}

bool capture_plan_begin(struct capture_plan *p, int64_t commit_time_us)
{
    p->in_txn = true;
    p->seq = pgo_acks_begin(&p->acks);
    p->commit_time_us = commit_time_us;
    if (pgo_acks_waiting(&p->acks) == 1)
        p->oldest_commit_us = commit_time_us;
    return p->seq != 0;
}

struct capture_acts capture_plan_commit_seen(struct capture_plan *p, const struct capture_env *e,
                                             uint64_t end_lsn)
{
    struct capture_acts a = { 0 };
    p->in_txn = false;
    p->txn_whole = p->txn_whole || p->txn_msgs > 0;
    pgo_acks_commit(&p->acks, p->seq, end_lsn);
    confirm(p, e->now_ms, p->acks.confirmed, &a);
    if (pgo_acks_waiting(&p->acks) == 1)
        p->oldest_commit_us = p->commit_time_us;
    return a;
}

void capture_plan_read(struct capture_plan *p, uint64_t end_lsn)
{
    if (end_lsn > p->received)
        p->received = end_lsn;
}

struct capture_acts capture_plan_keepalive(struct capture_plan *p, uint64_t end_lsn,
                                           bool reply_requested)
{
    struct capture_acts a = { 0 };
    /* Frames come in order: what a keepalive says was sent has been read. */
    capture_plan_read(p, end_lsn);
    /* With nothing read left unconfirmed, the server's position is
     * confirmed itself: the slot moves past WAL that held no event, and a
     * server shutting down, whose walsender waits until its last position
     * is confirmed, does not wait for the next event. */
    bool idle = !p->in_txn && pgo_acks_waiting(&p->acks) == 0;
    if (idle && end_lsn > p->confirmed) {
        p->confirmed = end_lsn;
        a.what |= CAP_DO_STATUS;
    } else if (reply_requested) {
        a.what |= CAP_DO_STATUS;
    }
    return a;
}

uint64_t capture_plan_opaque(const struct capture_plan *p)
{
    return ((uint64_t)(p->gen & OPAQUE_GEN_MASK) << OPAQUE_GEN_SHIFT) | p->seq;
}

enum capture_send capture_plan_sent(struct capture_plan *p, const struct capture_env *e, int rc,
                                    bool *too_large, struct capture_acts *a)
{
    /* Nothing of this stream is with the producer: a full queue is this message alone. */
    bool empty = !p->committing && (transactional(e) ? p->txn_msgs == 0 : p->unacked == 0);
    enum send_verdict v = engine_send_verdict(rc, empty);
    *too_large = v == SEND_TOO_LARGE;
    if (v == SEND_TOO_LARGE || v == SEND_REFUSED)
        return CAPTURE_SEND_POISON;
    /* A topic right refuses every event of the topic alike until someone
     * grants it: kept as dead rows, they would all be lost to the stream
     * for want of an ACL. The stream stops instead and reads them again
     * from the confirmed position once the producer's back-off is over;
     * that back-off paces the retries, so the stream adds none of its own
     * (it would hold the stream up to half a minute after a grant). */
    if (v == SEND_DENIED) {
        commit_held(p, e, a);
        stop(p, e, "kafka refuses a right on the topic", false, a);
        return CAPTURE_SEND_DENIED;
    }
    if (v == SEND_CUT) {
        /* A full queue empties as Kafka acknowledges: a commit (which
         * flushes) or the reports resume the stream. */
        p->queue_full = rc == -ENOBUFS;
        if (p->queue_full)
            commit_held(p, e, a);
        return CAPTURE_SEND_LATER;
    }
    pgo_acks_sent(&p->acks, p->seq);
    if (transactional(e)) {
        p->txn_msgs++;
        count_open(p, p->seq);
    } else {
        p->unacked++;
    }
    return CAPTURE_SENT;
}

/* ---- events that can never be produced ------------------------------------ */

bool capture_plan_poison_halts(bool halts, bool dead_rows)
{
    /* A table without the relay's columns has nowhere to keep a dead row. */
    return halts || !dead_rows;
}

struct capture_acts capture_plan_halt(struct capture_plan *p, const struct capture_env *e)
{
    struct capture_acts a = { 0 };
    /* What came before it is good: committed and confirmed; the stream stays
     * stopped on this message until the process ends. */
    commit_held(p, e, &a);
    return a;
}

void capture_plan_dead_queued(struct capture_plan *p, unsigned *gen, uint64_t *seq)
{
    *gen = p->gen;
    *seq = p->seq;
    pgo_acks_sent(&p->acks, p->seq); /* its transaction waits for the record */
}

struct capture_acts capture_plan_dead_recorded(struct capture_plan *p, const struct capture_env *e,
                                               unsigned gen, uint64_t seq)
{
    struct capture_acts a = { .what = CAP_DO_STEP };
    if (gen == p->gen)
        confirm(p, e->now_ms, pgo_acks_done(&p->acks, seq), &a);
    return a;
}

/* ---- Kafka's reports ------------------------------------------------------- */

struct capture_acts capture_plan_report(struct capture_plan *p, const struct capture_env *e,
                                        uint64_t opaque, bool ok)
{
    struct capture_acts a = { 0 };
    unsigned gen = (unsigned)(opaque >> OPAQUE_GEN_SHIFT);
    uint64_t seq = opaque & ((1ull << OPAQUE_GEN_SHIFT) - 1);
    bool current = gen == (p->gen & OPAQUE_GEN_MASK);
    if (p->unacked > 0 && current)
        p->unacked--;
    if (!ok) {
        if (!transactional(e) && current)
            stop(p, e, "a delivery failed", true, &a);
        /* with a transaction the failure dooms it: its commit aborts */
        commit_held(p, e, &a);
        a.what |= CAP_DO_STEP;
        return a;
    }
    if (p->queue_full) {
        p->queue_full = false;
        a.what |= CAP_DO_RESUME;
    }
    if (transactional(e) || !current)
        return a;
    a.published = 1;
    confirm(p, e->now_ms, pgo_acks_done(&p->acks, seq), &a);
    if (p->unacked == 0 && p->state == CAPTURE_OFF)
        a.what |= CAP_DO_STEP; /* a restart waited for the reports */
    return a;
}

/* ---- the stream's life ----------------------------------------------------- */

struct capture_acts capture_plan_idle(struct capture_plan *p, const struct capture_env *e)
{
    struct capture_acts a = { 0 };
    /* Half a source transaction confirms nothing: the rest is on its way. */
    if (transactional(e) && p->txn_whole && !p->committing)
        commit(p, e, &a);
    return a;
}

struct capture_acts capture_plan_streaming(struct capture_plan *p)
{
    p->state = CAPTURE_STREAMING;
    p->failures = 0;
    return (struct capture_acts){ .what = CAP_DO_STATUS };
}

struct capture_acts capture_plan_lost(struct capture_plan *p, const struct capture_env *e, bool busy)
{
    struct capture_acts a = { .what = CAP_DO_STEP };
    bool ended = p->state == CAPTURE_ENDING; /* as asked */
    if (!ended)
        p->slot_busy = busy && e->leader;
    stop(p, e, NULL, !ended, &a);
    return a;
}

struct capture_acts capture_plan_fail(struct capture_plan *p, const struct capture_env *e,
                                      const char *why)
{
    struct capture_acts a = { 0 };
    stop(p, e, why, true, &a);
    return a;
}

struct capture_acts capture_plan_commit_refused(struct capture_plan *p, const struct capture_env *e)
{
    p->committing = false;
    return capture_plan_fail(p, e, "cannot commit the kafka transaction");
}

void capture_plan_status_sent(struct capture_plan *p, uint64_t now_ms)
{
    p->status_sent_ms = now_ms;
}

void capture_plan_heartbeat_sent(struct capture_plan *p, uint64_t now_ms)
{
    p->last_progress_ms = now_ms; /* one at a time, whatever its fate */
}

void capture_plan_new_slot(struct capture_plan *p)
{
    p->confirmed = p->received = 0;
    p->acks.confirmed = 0;
}

void capture_plan_taken_over(struct capture_plan *p, uint64_t now_ms)
{
    p->restart_at_ms = now_ms + CAPTURE_TAKE_OVER_WAIT_MS;
}

void capture_plan_slot_queried(struct capture_plan *p, uint64_t now_ms)
{
    p->slot_query_at_ms = now_ms + CAPTURE_SLOT_QUERY_EVERY_MS;
}

void capture_plan_connected(struct capture_plan *p)
{
    p->slot_query_at_ms = 0;
}

void capture_plan_taking_over(struct capture_plan *p)
{
    p->slot_busy = false;
}

void capture_plan_started(struct capture_plan *p, const struct capture_env *e, bool ok)
{
    p->state = ok ? CAPTURE_STARTING : CAPTURE_OFF;
    if (!ok)
        p->restart_at_ms = e->now_ms + CAPTURE_RETRY_MS;
}

struct capture_acts capture_plan_ended(struct capture_plan *p, const struct capture_env *e, bool ok)
{
    struct capture_acts a = { 0 };
    if (ok) {
        p->state = CAPTURE_ENDING;
        return a;
    }
    stop(p, e, "stopping", false, &a);
    a.what |= CAP_DO_STEP; /* the plan may finish now */
    return a;
}

/* Starts streaming when what the last stream sent is settled: its
 * transaction committed (or aborted), its reports in. */
static void start(struct capture_plan *p, struct capture_acts *a)
{
    if (p->committing || p->txn_msgs > 0 || p->unacked > 0)
        return;
    pgo_acks_free(&p->acks);
    p->n_open = p->n_done = 0;
    p->in_txn = p->txn_whole = false;
    p->gen++;
    p->seq = 0;
    p->oldest_commit_us = 0;
    p->rest_until_ms = 0;
    p->state = CAPTURE_STARTING;
    a->what |= CAP_DO_START;
}

enum capture_route capture_plan_route(const struct capture_plan *p, bool ahead_left,
                                      uint64_t now_ms)
{
    /* Nothing is produced until the commit ends: under a backlog the socket
     * is read on meanwhile, a trickle's frames are left in it. */
    if (p->committing)
        return p->done_msgs < CAPTURE_TRICKLE_MSGS ? CAPTURE_OFFER_LATER : CAPTURE_READ_AHEAD;
    if (ahead_left)
        return CAPTURE_OFFER_LATER;
    return now_ms < p->rest_until_ms ? CAPTURE_REST : CAPTURE_TAKE;
}

uint64_t capture_plan_rest_ms(const struct capture_plan *p, uint64_t now_ms)
{
    return now_ms < p->rest_until_ms ? p->rest_until_ms - now_ms : 0;
}

bool capture_plan_may_drain(const struct capture_plan *p, const struct capture_env *e)
{
    return !e->finished && !e->halted && p->state == CAPTURE_STREAMING &&
           capture_plan_may_produce(p, e);
}

/* Not the leader any more, or stopping: what the stream finishes first. */
static void step_leaving(struct capture_plan *p, const struct capture_env *e, struct capture_acts *a)
{
    if (!e->stopping || !e->leader || e->refused) {
        /* Without the lock the rest of a source transaction may not be
         * produced, and waiting for Kafka with the slot held would keep the
         * next leader out and a server shutting down waiting (its walsender
         * exits only once its position is confirmed). The slot is let go
         * now; what Kafka takes meanwhile still moves the position this
         * process starts its next stream from. */
        commit_held(p, e, a);
        stop(p, e, "no longer the leader", false, a);
        return;
    }
    /* Stopping: the source transaction being read is finished first, then
     * what Kafka took is committed and confirmed before the stream closes,
     * so that the next reader does not send it again. */
    if (p->in_txn && capture_plan_may_drain(p, e) && !e->ahead_left) {
        a->what |= CAP_DO_RESUME;
        return;
    }
    commit_held(p, e, a);
    if (!capture_plan_drained(p, e) && p->state == CAPTURE_STREAMING)
        return;
    /* The last status update must reach the server before the socket closes. */
    if (p->state == CAPTURE_STREAMING) {
        a->what |= CAP_DO_END;
        return;
    }
    if (p->state == CAPTURE_ENDING)
        return;
    stop(p, e, "stopping", false, a);
    a->what |= CAP_DO_STEP; /* the plan may finish now */
}

struct capture_acts capture_plan_step(struct capture_plan *p, const struct capture_env *e)
{
    struct capture_acts a = { 0 };
    if (e->finished || e->halted)
        return a; /* halted: the stream stays stopped on the event at fault */
    bool leading = e->leader && !e->stopping && !e->refused;
    /* A fatal producer's messages fail: the stream starts again on its successor. */
    if (e->producer_fatal && p->state != CAPTURE_OFF && !p->committing) {
        stop(p, e, "the kafka producer failed", true, &a);
        return a;
    }
    if (!leading && p->state != CAPTURE_OFF) {
        step_leaving(p, e, &a);
        return a;
    }
    if (p->state == CAPTURE_OFF) {
        /* A stream that ended while the open Kafka transaction held some of
         * its messages: the next one waits for them, so they are committed. */
        commit_held(p, e, &a);
        /* A stream on a server whose slot starts past what was confirmed
         * would skip the events in between for ever. */
        if (leading && !e->server_gap && capture_plan_may_produce(p, e) && e->now_ms >= p->restart_at_ms)
            start(p, &a);
        return a;
    }
    if (capture_plan_may_drain(p, e) && !e->ahead_left)
        a.what |= CAP_DO_RESUME;
    if (capture_plan_status_due(p, e->now_ms))
        a.what |= CAP_DO_STATUS;
    return a;
}

bool capture_plan_drained(const struct capture_plan *p, const struct capture_env *e)
{
    return !p->committing && p->txn_msgs == 0 && p->unacked == 0 && e->n_dead == 0 &&
           !(p->in_txn && p->state == CAPTURE_STREAMING);
}

bool capture_plan_settled(const struct capture_plan *p, const struct capture_env *e)
{
    /* Halted, the stream stays on the event at fault and its source
     * transaction cannot be finished: the server keeps what was confirmed
     * before, and the Kafka transaction holding that transaction's first
     * events is never committed. Only the deliveries still awaited are
     * waited for, not the shutdown's deadline. */
    if (e->halted)
        return !p->committing && p->unacked == 0;
    /* The stream too is closed: its last status update reached the server. */
    return capture_plan_drained(p, e) && p->state == CAPTURE_OFF;
}

bool capture_plan_heartbeat_due(const struct capture_plan *p, uint64_t now_ms, long every_ms)
{
    return every_ms > 0 && p->state == CAPTURE_STREAMING &&
           now_ms - p->last_progress_ms >= (uint64_t)every_ms;
}

size_t capture_plan_status_update(const struct capture_plan *p, double now,
                                  uint8_t out[PGO_STATUS_UPDATE_LEN])
{
    int64_t now_us = (int64_t)((now - (double)PGB_EPOCH_UNIX_S) * 1e6);
    return pgo_status_update(out, p->received, p->confirmed, now_us, false);
}

bool capture_plan_lag_shown(const struct capture_plan *p, const struct capture_env *e)
{
    return e->leader && !e->stopping && !e->refused && !e->halted && !e->finished &&
           p->state != CAPTURE_OFF;
}

bool capture_plan_status_due(const struct capture_plan *p, uint64_t now_ms)
{
    return p->state == CAPTURE_STREAMING && now_ms - p->status_sent_ms >= CAPTURE_STATUS_EVERY_MS;
}

double capture_plan_lag(const struct capture_plan *p, double now, double epoch_unix_s)
{
    if (pgo_acks_waiting(&p->acks) == 0 || p->oldest_commit_us <= 0)
        return 0;
    double lag = now - ((double)p->oldest_commit_us / 1e6 + epoch_unix_s);
    return lag > 0 ? lag : 0;
}

void capture_plan_status(const struct capture_plan *p, const struct capture_env *e,
                         long heartbeat_ms, bool dead_due, struct plan_state *s)
{
    s->n_hot = 0; /* nothing claimed or marked */
    s->capture_wal = true;
    s->heartbeat_due = capture_plan_heartbeat_due(p, e->now_ms, heartbeat_ms);
    s->slot_query_due = e->now_ms >= p->slot_query_at_ms;
    s->capture_streaming = p->state == CAPTURE_STREAMING;
    s->slot_busy = p->slot_busy;
    s->dead_due = dead_due;
    s->capture_unsettled = !capture_plan_settled(p, e);
}
