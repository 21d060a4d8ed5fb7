/* producer_txn.c — relay.fencing=transactional: librdkafka's blocking
 * transaction calls on libuv's thread pool, their outcome on the loop. */
#include "io/producer.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/log.h"
#include "core/kafka_rules.h"
#include "io/producer_int.h"

/* ---- transactions ------------------------------------------------------- */

/* librdkafka's init_transactions, commit_transaction and abort_transaction
 * block (a round trip to the transaction coordinator, and a flush): they run
 * on libuv's thread pool, one at a time, and touch nothing but the instance,
 * which librdkafka makes safe to share between threads. */
enum txn_op { TXN_INIT, TXN_COMMIT };

/* Each blocking call waits at most this long; a retriable failure is tried
 * again until TXN_TOTAL_MS have passed, unless the producer is being stopped
 * or given up (a call that timed out resumes where it was: short calls only
 * let the loop's cancel through within a second). */
#define TXN_CALL_MS 1000
#define TXN_TOTAL_MS 30000
/* A timed-out init (no coordinator yet) is tried again after this long. */
#define TXN_INIT_RETRY_MS 1000

struct txn_job {
    uv_work_t work;
    struct producer *p;       /* read on the loop thread only */
    rd_kafka_t *rk;
    enum txn_op op;
    unsigned gen;             /* the generation this call ends */
    atomic_int cancel;        /* producer_stop: give up retrying */
    atomic_int abandon;       /* producer_txn_abandon: and do not abort */
    bool stop_pending;        /* producer_stop ran meanwhile: destroy after the call */
    producer_txn_cb cb;
    void *arg;
    enum producer_txn_result res;
    int code;                 /* the error of a failed call: the fatal error's own when fatal */
    char why[512];
    rd_kafka_conf_t *fence_conf; /* init: then fence the other transactional id with this */
    enum producer_spare spare;   /* what that found */
};

/* Repeats @p call on @p rk while it fails retriably, within TXN_TOTAL_MS, or
 * with @p to_the_end until its outcome is known (or the producer stops). */
static rd_kafka_error_t *txn_call(struct txn_job *j, rd_kafka_t *rk,
                                  rd_kafka_error_t *(*call)(rd_kafka_t *, int), bool to_the_end)
{
    uint64_t deadline = uv_hrtime() / 1000000 + TXN_TOTAL_MS;
    for (;;) {
        rd_kafka_error_t *e = call(rk, TXN_CALL_MS);
        if (!e || !rd_kafka_error_is_retriable(e) || j->cancel ||
            (!to_the_end && uv_hrtime() / 1000000 >= deadline))
            return e;
        rd_kafka_error_destroy(e);
    }
}

static void txn_fail(struct txn_job *j, rd_kafka_error_t *e, const char *what)
{
    rd_kafka_resp_err_t code = rd_kafka_error_code(e);
    char fatal[256] = "";
    j->code = code;
    if (rd_kafka_error_is_fatal(e) || code == RD_KAFKA_RESP_ERR__FATAL) {
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(j->rk, fatal, sizeof(fatal));
        if (orig)
            j->code = orig;
    }
    snprintf(j->why, sizeof(j->why), "%s: %s%s%s", what, rd_kafka_error_string(e),
             *fatal ? "; " : "", fatal);
}

/* On a worker thread, after the instance's own init: a short-lived instance
 * of the other transactional id initialises it, which aborts what an older
 * leader had open under it and fences that producer, as the own init does
 * for the own id. Which of the two ids an older leader used last is not
 * known. */
static void fence_other_id(struct txn_job *j)
{
    char err[256];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, j->fence_conf, err, sizeof err);
    if (!rk) {
        rd_kafka_conf_destroy(j->fence_conf);
        j->fence_conf = NULL;
        j->spare = PRODUCER_SPARE_FAILED;
        return;
    }
    j->fence_conf = NULL; /* rd_kafka_new took it */
    rd_kafka_error_t *e = txn_call(j, rk, rd_kafka_init_transactions, false);
    if (!e) {
        j->spare = PRODUCER_SPARE_FENCED;
    } else {
        int code = rd_kafka_error_code(e);
        if (code == RD_KAFKA_RESP_ERR__FATAL)
            code = rd_kafka_fatal_error(rk, err, sizeof err);
        j->spare = kafka_denial_of(code) != KAFKA_DENIAL_NONE ? PRODUCER_SPARE_DENIED
                                                               : PRODUCER_SPARE_FAILED;
        rd_kafka_error_destroy(e);
    }
    rd_kafka_destroy(rk);
}

/* On a worker thread. */
static void txn_work(uv_work_t *w)
{
    struct txn_job *j = w->data;
    rd_kafka_error_t *e;
    j->res = PRODUCER_TXN_DONE;
    if (j->op == TXN_INIT) {
        e = txn_call(j, j->rk, rd_kafka_init_transactions, false);
        if (e) {
            txn_fail(j, e, "init_transactions");
            j->res = rd_kafka_error_is_retriable(e) && !rd_kafka_error_is_fatal(e)
                         ? PRODUCER_TXN_RETRY
                         : PRODUCER_TXN_FAILED;
            rd_kafka_error_destroy(e);
            return;
        }
        if (j->fence_conf)
            fence_other_id(j);
    } else {
        /* A commit that timed out may still complete at the coordinator: it
         * is called again until its outcome is known. Aborting it then
         * fails ("a conflicting commit is in progress") and would have the
         * rows produced again although the commit went through. */
        e = txn_call(j, j->rk, rd_kafka_commit_transaction, true);
        if (e) {
            txn_fail(j, e, "commit_transaction");
            bool fatal = rd_kafka_error_is_fatal(e);
            rd_kafka_error_destroy(e);
            /* Given up while the coordinator does not answer: the abort
             * would wait on it too; the next instance's init aborts it. */
            if (fatal || j->abandon) {
                j->res = PRODUCER_TXN_FAILED;
                return;
            }
            /* Abortable (a produce failed, messages timed out), or the
             * producer is stopping: abort, so that nothing of this
             * transaction becomes visible, and produce the rows again. */
            j->res = PRODUCER_TXN_ABORTED;
            e = txn_call(j, j->rk, rd_kafka_abort_transaction, false);
            if (e) {
                txn_fail(j, e, "abort_transaction");
                j->res = PRODUCER_TXN_FAILED;
                rd_kafka_error_destroy(e);
                return;
            }
        }
    }
    e = rd_kafka_begin_transaction(j->rk);
    if (e) {
        txn_fail(j, e, "begin_transaction");
        j->res = PRODUCER_TXN_FAILED;
        rd_kafka_error_destroy(e);
    }
}

/* Back on the loop thread. */
static void txn_after(uv_work_t *w, int status)
{
    (void)status;
    struct txn_job *j = w->data;
    struct producer *p = j->p;
    p->job = NULL;
    if (j->fence_conf) /* the own init failed first */
        rd_kafka_conf_destroy(j->fence_conf);
    if (j->spare != PRODUCER_SPARE_UNTRIED)
        p->spare = j->spare;
    if (j->stop_pending) {
        /* The relay is gone or replaced this instance: nobody waits for the answer. */
        producer_destroy(p);
        free(j);
        return;
    }
    if (j->op == TXN_COMMIT && p->owner.stats) {
        stats_settle_published(p->owner.stats, j->res == PRODUCER_TXN_DONE);
        p->owner.stats->kafka_committing = false;
    }
    if (p->owner.stats && (j->res == PRODUCER_TXN_DONE || j->res == PRODUCER_TXN_ABORTED)) {
        p->owner.stats->kafka_answered = true; /* the coordinator is a broker that answered */
        p->owner.stats->kafka_ack_clock = stats_mono();
        p->owner.stats->kafka_owed = false;
    }
    switch (j->res) {
    case PRODUCER_TXN_DONE:
    case PRODUCER_TXN_ABORTED:
        p->txn = PRODUCER_TXN_OPEN;
        p->txn_gen++;
        p->txn_msgs = 0;
        p->txn_doomed = false;
        break;
    case PRODUCER_TXN_RETRY:
        p->txn = p->refused ? PRODUCER_TXN_DEAD : PRODUCER_TXN_UNINIT;
        p->txn_retry_ms = uv_now(p->loop) + TXN_INIT_RETRY_MS;
        break;
    case PRODUCER_TXN_FAILED:
        p->txn = PRODUCER_TXN_DEAD;
        if (!p->fatal_code)
            p->fatal_code = j->code;
        producer_set_fatal(p);
        break;
    }
    /* The outcome first: reports served later must find their batches settled. */
    j->cb(j->arg, j->gen, j->res, j->why);
    free(j);
}

static int txn_start(struct producer *p, enum txn_op op, bool fence_other, producer_txn_cb cb, void *arg)
{
    struct txn_job *j = calloc(1, sizeof(*j));
    if (!j)
        return -ENOMEM;
    j->p = p;
    j->rk = p->rk;
    j->op = op;
    j->gen = p->txn_gen;
    j->cb = cb;
    j->arg = arg;
    j->work.data = j;
    if (fence_other) {
        char err[256];
        j->fence_conf = producer_conf_other_id(p, err, sizeof err);
        if (!j->fence_conf)
            j->spare = PRODUCER_SPARE_FAILED;
    }
    int rc = uv_queue_work(p->loop, &j->work, txn_work, txn_after);
    if (rc < 0) {
        if (j->fence_conf)
            rd_kafka_conf_destroy(j->fence_conf);
        free(j);
        return rc;
    }
    p->job = j;
    p->txn = PRODUCER_TXN_BUSY;
    if (p->owner.stats) {
        /* Every message may be acknowledged and the coordinator hung; an
         * init that is not answered leaves nothing in flight at all. */
        stats_kafka_wait_begins(p->owner.stats, stats_mono());
        if (op == TXN_COMMIT)
            p->owner.stats->kafka_committing = true;
        else
            p->owner.stats->kafka_owed = true;
    }
    return 0;
}

/* A refused instance is replaced, not initialised: a running call stops retrying. */
void producer_txn_give_up(struct producer *p)
{
    if (p->job)
        p->job->cancel = 1;
    else if (p->txn != PRODUCER_TXN_OFF)
        p->txn = PRODUCER_TXN_DEAD;
}

bool producer_txn_defer_stop(struct producer *p)
{
    if (!p->job)
        return false;
    /* librdkafka is blocked in a transaction call on a worker thread:
     * destroy the instance when the call has returned. */
    p->job->cancel = 1;
    p->job->stop_pending = true;
    return true;
}

bool producer_txn_committing(const struct producer *p)
{
    return p->job && p->job->op == TXN_COMMIT;
}

void producer_txn_abandon(struct producer *p)
{
    if (p->abandoned)
        return;
    p->abandoned = true;
    /* Nothing of the open transaction is committed by this instance now:
     * what waits in its queues and in flight is reported failed at once (not
     * the rows' fault: the instance is fatal), rather than when the requests
     * to the silent broker are cut. A running commit returns within a call
     * (TXN_CALL_MS) and ends the transaction's state itself; else the
     * batches are settled as aborted at once. */
    producer_set_fatal(p);
    producer_purge(p);
    if (p->job) {
        p->job->abandon = 1;
        p->job->cancel = 1;
    } else if (p->txn != PRODUCER_TXN_OFF) {
        p->txn = PRODUCER_TXN_DEAD;
    }
}

enum producer_txn_state producer_txn_state(const struct producer *p)
{
    return p->txn;
}

unsigned producer_txn_gen(const struct producer *p)
{
    return p->txn_gen;
}

bool producer_txn_doomed(const struct producer *p)
{
    return p->txn_doomed;
}

bool producer_txn_empty(const struct producer *p)
{
    return p->txn_msgs == 0;
}

int producer_txn_init(struct producer *p, bool fence_other, producer_txn_cb cb, void *arg)
{
    if (p->txn != PRODUCER_TXN_UNINIT)
        return -EALREADY;
    if (uv_now(p->loop) < p->txn_retry_ms)
        return -EAGAIN;
    return txn_start(p, TXN_INIT, fence_other, cb, arg);
}

int producer_txn_commit(struct producer *p, producer_txn_cb cb, void *arg)
{
    if (p->txn != PRODUCER_TXN_OPEN)
        return -EALREADY;
    return txn_start(p, TXN_COMMIT, false, cb, arg);
}

