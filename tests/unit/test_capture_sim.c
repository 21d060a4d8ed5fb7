/* test_capture_sim.c — the capture plan driven through whole runs of random events.
 *
 * A small model of the daemon around the plan: a server that streams a fixed
 * list of source transactions from the position confirmed last, a producer
 * whose reports come in any order and fail now and then, Kafka transactions
 * that commit or abort, keepalives, lost streams and leaderships, stops and
 * restarts of the process (a new plan from the slot's confirmed position).
 * After every event the model does what the plan answers, the way
 * relay/daemon/relay_capture.c does. Whatever the order of events, no
 * position is ever confirmed before every event of every transaction up to
 * it was acknowledged by Kafka (committed, with Kafka transactions), the
 * confirmed position never goes back, and once the faults stop every
 * transaction is relayed and confirmed. */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#include "core/capture_plan.h"

#define N_TX 60
#define MAX_EV 4
#define MAX_MSGS 4096
#define RUNS 150

struct msg {
    int tx, ev;
    uint64_t opaque;
    bool reported;
};

struct sim {
    uint64_t rng;
    bool transactional;
    bool faults;                /* failures, losses, stops happen */
    int n_ev[N_TX];             /* events of each source transaction */
    bool delivered[N_TX][MAX_EV]; /* Kafka holds it (committed, with transactions) */
    struct capture_plan p;
    struct capture_env e;
    uint64_t confirmed_seen;
    /* the server's stream */
    bool starting, streaming, ending;
    int tx, part;               /* the next frame: part 0 Begin, 1..n events, n+1 Commit */
    /* the producer */
    struct msg m[MAX_MSGS];     /* in flight: without transactions awaiting a report; with
                                   them, in the open (or committing) Kafka transaction */
    int n;
    int n_committing;           /* the first n_committing of m[] are being committed */
    bool commit_running, doomed;
    bool step_due;
};

static unsigned rnd(struct sim *s, unsigned n)
{
    s->rng = s->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(s->rng >> 33) % n;
}

static uint64_t end_of(int tx)
{
    return (uint64_t)(tx + 1) * 0x100;
}

/* The rule under test, after every call into the plan. */
static void check(struct sim *s)
{
    cr_assert_geq(s->p.confirmed, s->confirmed_seen, "the confirmed position went back");
    s->confirmed_seen = s->p.confirmed;
    for (int t = 0; t < N_TX && end_of(t) <= s->p.confirmed; t++)
        for (int k = 0; k < s->n_ev[t]; k++)
            cr_assert(s->delivered[t][k],
                      "LSN %llx confirmed before event %d of transaction %d is in Kafka ",
                      (unsigned long long)s->p.confirmed, k, t);
}

static void env_update(struct sim *s)
{
    s->e.txn = !s->transactional ? PRODUCER_TXN_OFF
             : s->commit_running ? PRODUCER_TXN_BUSY
                                 : PRODUCER_TXN_OPEN;
    s->e.txn_doomed = s->doomed;
    s->e.txn_empty = s->n == s->n_committing; /* nothing sent since the commit began */
    s->e.random = s->rng >> 20;
}

static void carry(struct sim *s, struct capture_acts a)
{
    check(s);
    if (a.what & CAP_DO_CLOSE)
        s->starting = s->streaming = s->ending = false;
    if (a.what & CAP_DO_COMMIT) {
        cr_assert(s->transactional && !s->commit_running);
        s->commit_running = true;
        s->n_committing = s->n;
    }
    if (a.what & CAP_DO_END) {
        env_update(s);
        s->ending = true;
        carry(s, capture_plan_ended(&s->p, &s->e, true));
    }
    if (a.what & CAP_DO_START) {
        cr_assert(!s->starting && !s->streaming);
        s->starting = true;
        s->tx = 0;
        while (s->tx < N_TX && end_of(s->tx) <= s->p.confirmed)
            s->tx++;
        s->part = 0;
        env_update(s);
        capture_plan_started(&s->p, &s->e, true);
    }
    if (a.what & CAP_DO_STEP)
        s->step_due = true;
}

/* The next frame of the stream, offered to the plan as relay_capture.c's take_frame does. */
static void frame(struct sim *s)
{
    if (!s->streaming || s->ending || s->tx >= N_TX)
        return;
    struct capture_acts a = { 0 };
    env_update(s);
    bool admitted = capture_plan_admit(&s->p, &s->e, &a);
    carry(s, a);
    if (!admitted)
        return;
    int t = s->tx, n = s->n_ev[t];
    if (s->part == 0) {
        cr_assert(capture_plan_begin(&s->p, t + 1));
    } else if (s->part <= n) {
        bool busy = s->transactional ? s->p.txn_msgs > 0 : s->p.unacked > 0;
        int rc = busy && s->n >= 6 ? -ENOBUFS : 0;
        uint64_t opaque = capture_plan_opaque(&s->p);
        bool too_large;
        struct capture_acts b = { 0 };
        enum capture_send v = capture_plan_sent(&s->p, &s->e, rc, &too_large, &b);
        cr_assert_neq(v, CAPTURE_SEND_POISON);
        if (v == CAPTURE_SENT) {
            cr_assert_lt(s->n, MAX_MSGS);
            s->m[s->n++] = (struct msg){ .tx = t, .ev = s->part - 1, .opaque = opaque };
        }
        carry(s, b);
        if (v != CAPTURE_SENT)
            return;
    } else {
        carry(s, capture_plan_commit_seen(&s->p, &s->e, end_of(t)));
        capture_plan_read(&s->p, end_of(t));
        s->tx++;
        s->part = 0;
        return;
    }
    capture_plan_read(&s->p, end_of(t) - 0x80 + (uint64_t)s->part);
    s->part++;
}

static void keepalive(struct sim *s)
{
    if (!s->streaming)
        return;
    /* what the server sent last: the end of a transaction, or a frame inside one */
    uint64_t lsn = s->part == 0 ? (s->tx > 0 ? end_of(s->tx - 1) : 0)
                                : end_of(s->tx) - 0x80 + (uint64_t)s->part;
    carry(s, capture_plan_keepalive(&s->p, lsn, rnd(s, 2)));
}

static void drop_msg(struct sim *s, int i)
{
    s->m[i] = s->m[--s->n];
}

/* One delivery report, of any message not reported yet. */
static void report(struct sim *s)
{
    int unreported = 0;
    for (int i = 0; i < s->n; i++)
        unreported += !s->m[i].reported;
    if (unreported == 0)
        return;
    int pick = (int)rnd(s, (unsigned)unreported), i = 0;
    for (;; i++)
        if (!s->m[i].reported && pick-- == 0)
            break;
    bool ok = !s->faults || rnd(s, 10) > 0;
    env_update(s);
    if (!s->transactional) {
        if (ok)
            s->delivered[s->m[i].tx][s->m[i].ev] = true;
        uint64_t opaque = s->m[i].opaque;
        drop_msg(s, i);
        carry(s, capture_plan_report(&s->p, &s->e, opaque, ok));
        return;
    }
    s->m[i].reported = true;
    s->doomed |= !ok;
    env_update(s);
    carry(s, capture_plan_report(&s->p, &s->e, s->m[i].opaque, ok));
}

/* The running Kafka transaction ends, once its messages are reported (a commit flushes). */
static void commit_ends(struct sim *s)
{
    if (!s->commit_running)
        return;
    for (int i = 0; i < s->n_committing; i++)
        if (!s->m[i].reported)
            return;
    bool ok = !s->doomed && (!s->faults || rnd(s, 8) > 0);
    for (int i = 0; i < s->n_committing && ok; i++)
        s->delivered[s->m[i].tx][s->m[i].ev] = true;
    memmove(s->m, s->m + s->n_committing, (size_t)(s->n - s->n_committing) * sizeof s->m[0]);
    s->n -= s->n_committing;
    s->n_committing = 0;
    s->commit_running = false;
    s->doomed = false; /* an abort ends the doomed transaction; the next one is clean */
    env_update(s);
    carry(s, capture_plan_committed(&s->p, &s->e, ok));
}

/* The process ends once the plan is settled and starts again from the slot. */
static void restart_process(struct sim *s)
{
    uint64_t slot = s->p.confirmed;
    capture_plan_free(&s->p);
    capture_plan_init(&s->p);
    s->p.confirmed = slot;
    s->e.stopping = false;
    s->starting = s->streaming = s->ending = false;
}

static void fault(struct sim *s)
{
    env_update(s);
    switch (rnd(s, 4)) {
    case 0:
        if (s->streaming || s->starting)
            s->starting = s->streaming = false, carry(s, capture_plan_lost(&s->p, &s->e, false));
        break;
    case 1: s->e.leader = !s->e.leader; break;
    case 2: s->e.stopping = true; break;
    case 3: s->e.now_ms += 40000; break; /* a long pause: status updates, back-offs over */
    }
}

static void event(struct sim *s)
{
    env_update(s);
    switch (rnd(s, s->faults ? 11 : 10)) {
    case 0: case 1: case 2: frame(s); break;
    case 3: case 4: report(s); break;
    case 5: commit_ends(s); break;
    case 6: keepalive(s); break;
    case 7: carry(s, capture_plan_idle(&s->p, &s->e)); break;
    case 8:
        if (s->starting && !s->ending)
            s->starting = false, s->streaming = true, carry(s, capture_plan_streaming(&s->p));
        else if (s->ending)
            s->ending = s->streaming = false, carry(s, capture_plan_lost(&s->p, &s->e, false));
        break;
    case 9: s->e.now_ms += rnd(s, 4000); s->step_due = true; break;
    case 10: fault(s); break;
    }
    if (s->step_due || rnd(s, 3) == 0) {
        s->step_due = false;
        env_update(s);
        carry(s, capture_plan_step(&s->p, &s->e));
    }
    if (s->e.stopping && capture_plan_settled(&s->p, &s->e) && s->n == 0)
        restart_process(s);
}

static void run(uint64_t seed, bool transactional)
{
    struct sim *s = calloc(1, sizeof *s);
    s->rng = seed;
    s->transactional = transactional;
    s->faults = true;
    for (int t = 0; t < N_TX; t++)
        s->n_ev[t] = (int)rnd(s, MAX_EV + 1);
    capture_plan_init(&s->p);
    s->e = (struct capture_env){ .now_ms = 1000, .leader = true };
    for (int i = 0; i < 3000; i++)
        event(s);
    /* Calm: a leader, no failure, no stop; everything gets through. */
    s->faults = false;
    s->e.leader = true;
    for (int i = 0; i < 200000 && s->p.confirmed < end_of(N_TX - 1); i++)
        event(s); /* a stop in progress finishes, and the process starts again */
    cr_assert_geq(s->p.confirmed, end_of(N_TX - 1),
                  "seed %llu (%s): stalled at %llx", (unsigned long long)seed,
                  transactional ? "transactional" : "plain", (unsigned long long)s->p.confirmed);
    capture_plan_free(&s->p);
    free(s);
}

Test(capture_sim, without_kafka_transactions_nothing_is_confirmed_before_kafka_has_it)
{
    for (uint64_t seed = 1; seed <= RUNS; seed++)
        run(seed, false);
}

Test(capture_sim, with_kafka_transactions_nothing_is_confirmed_before_the_commit)
{
    for (uint64_t seed = 1; seed <= RUNS; seed++)
        run(seed * 7919, true);
}
