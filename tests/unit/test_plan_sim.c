/* test_plan_sim.c — the engine driven through whole runs of random events.
 *
 * A small model of the daemon around the engine: a table of rows, one
 * connection running one statement at a time (answered, or lost), delivery
 * reports that arrive in any order and fail now and then, ticks. After every
 * event the model asks plan_next what to do and does it the way the daemon (relay/daemon/relay_*.c)
 * does, with the engine's batch functions. Whatever the order of events:
 * a claim never takes a row of a batch still in flight, no row is delivered
 * twice, only delivered rows are marked, only a failure judged the row's own
 * costs it an attempt, and in the end every row is sent
 * or dead-lettered (on_poison = dead_letter), none left behind. Writers'
 * NOTIFYs come at random too: the relay takes and leaves the quiet lock on
 * the way, only while it leads, and never stalls in it. */
#include <string.h>

#include <criterion/criterion.h>

#include "core/batch.h"
#include "core/engine.h"
#include "core/plan.h"

#define N_ROWS 300
#define BATCH 16
#define MAX_ATTEMPTS 3
/* As the daemon has: the last one serves only the next Kafka transaction of a
 * backlog, so without transactions (as here) it stays empty. */
#define SLOTS (PLAN_TXN_BATCHES_MAX + 1)

struct row {
    bool sent, dead;
    int attempts;
    int delivered; /* acknowledged by Kafka, over the whole run */
    bool owes;     /* its last failure was judged its own: an attempt is due */
};

enum stmt { ST_NONE = 0, ST_SESSION, ST_SCHEMA, ST_PREPARE, ST_LOCK, ST_VERIFY, ST_BACKLOG,
            ST_LISTEN, ST_CLAIM, ST_MARK, ST_RECORD, ST_RETENTION, ST_TAKE_QUIET,
            ST_RELEASE_QUIET, ST_CHECK_QUIET };

struct sim {
    uint64_t rng;
    struct row rows[N_ROWS + 1];    /* ids 1..N_ROWS */
    struct batch b[SLOTS];
    struct plan_state s;
    bool connected;
    enum stmt running;              /* the statement in flight */
    int running_slot;
    struct plan_step claim;         /* the claim in flight */
    int64_t gaps[BATCH_GAPS_MAX];   /* its skip span's ids in no batch */
    int n_gaps;                     /* -1: unknown, nothing inside or above the span */
};

static unsigned rnd(struct sim *m, unsigned n)
{
    m->rng = m->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(m->rng >> 33) % n;
}

static void sim_init(struct sim *m, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->rng = seed;
    for (int k = 0; k < SLOTS; k++) {
        m->b[k].slot = k;
        cr_assert_eq(batch_reserve(&m->b[k], BATCH), 0);
    }
    m->s = (struct plan_state){ .n_hot = 2, .batch_size = BATCH, .txn = PRODUCER_TXN_OFF,
                                .b = m->b, .n_batches = SLOTS, .backlog_due_ms = UINT64_MAX };
}

static void sim_free(struct sim *m)
{
    for (int k = 0; k < SLOTS; k++)
        batch_free(&m->b[k]);
}

static void send(struct sim *m, enum stmt st, int slot)
{
    cr_assert_eq(m->running, ST_NONE, "one statement at a time");
    m->running = st;
    m->running_slot = slot;
    m->s.pg_ready = false;
}

/* What relay_poll_pipeline.c's relay_mark() and record_failures() do once a batch's marks are
 * written, or when it has none. */
static void after_marks(struct sim *m, struct batch *b)
{
    switch (batch_after_marks(b)) {
    case BATCH_RECORD:
        b->phase = PHASE_RECORDING;
        send(m, ST_RECORD, b->slot);
        return;
    case BATCH_RETRY_LATER:
        batch_clear(b);
        m->s.backoff = true;
        return;
    case BATCH_DONE:
        if (b->rescan_after_mark)
            m->s.wake = true;
        batch_clear(b);
        return;
    }
}

/* relay_step.c's carry_out. @return true to plan again. */
static bool carry_out(struct sim *m, const struct plan_step *p)
{
    if (p->queue_drained)
        m->s.queue_full = false;
    switch (p->act) {
    case PLAN_WAIT: return false;
    case PLAN_FINISH: cr_assert_fail("nothing stops the relay here");
    case PLAN_CHECK_SESSION: send(m, ST_SESSION, -1); return false;
    case PLAN_CHECK_SCHEMA: send(m, ST_SCHEMA, -1); return false;
    case PLAN_PREPARE: send(m, ST_PREPARE, -1); return false;
    case PLAN_TAKE_LOCK: m->s.lock_due = false; send(m, ST_LOCK, -1); return false;
    case PLAN_VERIFY_LOCK: m->s.lock_due = false; send(m, ST_VERIFY, -1); return false;
    case PLAN_READY: m->s.ready_sent = true; return true;
    case PLAN_COUNT_BACKLOG: m->s.backlog_due_ms = p->at_ms; send(m, ST_BACKLOG, -1); return false;
    case PLAN_LISTEN: send(m, ST_LISTEN, -1); return false;
    case PLAN_RETENTION: m->s.retention_due = false; send(m, ST_RETENTION, -1); return false;
    case PLAN_TAKE_QUIET: send(m, ST_TAKE_QUIET, -1); return false;
    case PLAN_RELEASE_QUIET: send(m, ST_RELEASE_QUIET, -1); return false;
    case PLAN_CHECK_QUIET: send(m, ST_CHECK_QUIET, -1); return false;
    case PLAN_MARK: {
        struct batch *b = &m->b[p->slot];
        if (batch_marks_due(b)) {
            for (int k = 0; k < SLOTS; k++)
                if (k == p->slot || (p->with & (1u << k))) {
                    cr_assert(batch_marks_due(&m->b[k]), "slot %d marked along with nothing to mark", k);
                    m->b[k].phase = PHASE_MARKING;
                }
            send(m, ST_MARK, p->slot);
        } else {
            after_marks(m, b);
        }
        return false;
    }
    case PLAN_CLAIM: {
        struct batch *b = &m->b[p->slot];
        for (int k = 0; k < SLOTS; k++)
            if (p->rescan & (1u << k))
                m->b[k].rescan_after_mark = true;
        b->alone = p->alone;
        b->claim_gen = m->s.truncations;
        m->s.wake = false;
        m->s.notifies = 0;
        b->phase = PHASE_CLAIMING;
        m->claim = *p;
        m->n_gaps = batch_gaps_within(m->b, SLOTS, p->rescan, p->skip, m->gaps, BATCH_GAPS_MAX);
        send(m, ST_CLAIM, p->slot);
        return false;
    }
    default: cr_assert_fail("unexpected %s", plan_act_name(p->act));
    }
    return false;
}

static void step(struct sim *m)
{
    struct plan_step p;
    do
        p = plan_next(&m->s);
    while (carry_out(m, &p));
}

static bool sim_gap(const struct sim *m, int64_t id)
{
    for (int i = 0; i < m->n_gaps; i++)
        if (m->gaps[i] == id)
            return true;
    return false;
}

/* The claim statement: the oldest unsent rows outside the skip span or in
 * its gaps; with the gaps unknown, none inside or above the span. */
static void claimed(struct sim *m, struct batch *b)
{
    int n = 0;
    for (int64_t id = 1; id <= N_ROWS && n < m->claim.limit; id++) {
        struct row *r = &m->rows[id];
        if (m->n_gaps < 0 && id >= m->claim.skip.lo)
            break;
        if (r->sent || r->dead ||
            (id >= m->claim.skip.lo && id <= m->claim.skip.hi && !sim_gap(m, id)))
            continue;
        for (int k = 0; k < SLOTS; k++) {
            const struct batch *o = &m->b[k];
            for (int i = 0; o != b && i < o->n_rows; i++)
                cr_assert_neq(o->ids[i], id, "row %lld claimed while in another batch", (long long)id);
        }
        r->owes = false; /* a lost record: claimed again, judged afresh */
        b->ids[n] = id;
        b->created_ms[n++] = 0;
    }
    struct claim_verdict v = plan_claimed(&m->s, b, n, n ? b->ids[0] : 0);
    if (v.isolation_over) {
        m->s.isolating = false;
        m->s.isolate_until_id = 0;
    }
    b->alone = v.alone;
    m->s.quiet_wanted |= v.quiet_wanted;
    m->s.quiet_idle = v.quiet_idle;
    if (v.use != CLAIM_PRODUCE) {
        batch_clear(b);
        m->s.wake |= v.use == CLAIM_STALE;
        return;
    }
    if (v.more)
        m->s.wake = true;
    batch_loaded(b, n);
    for (int i = 0; i < n; i++)
        b->state[i] = ROW_PENDING;
    b->n_outstanding = n;
    b->phase = PHASE_PRODUCING;
}

static void answer(struct sim *m)
{
    enum stmt st = m->running;
    struct batch *b = m->running_slot >= 0 ? &m->b[m->running_slot] : NULL;
    m->running = ST_NONE;
    m->s.pg_ready = true;
    switch (st) {
    case ST_SESSION: m->s.session_checked = true; break;
    case ST_SCHEMA: m->s.schema_checked = true; break;
    case ST_PREPARE: m->s.prepared++; break;
    case ST_LOCK:
        m->s.role = STATS_ROLE_LEADER;
        m->s.wake = true;
        break;
    case ST_LISTEN:
        m->s.listening = true;
        m->s.wake = true;
        break;
    case ST_CLAIM: claimed(m, b); break;
    /* As relay_quiet.c's relay_on_quiet_*: the lock is free, or a writer's probe holds
     * it this instant; a writer that sent no NOTIFY is still open, or not. */
    case ST_TAKE_QUIET:
        m->s.quiet_wanted = false;
        if (rnd(m, 4)) {
            m->s.quiet = PLAN_QUIET_ON;
            m->s.quiet_idle = false;
            m->s.wake = true;
        }
        break;
    case ST_RELEASE_QUIET:
        m->s.quiet = PLAN_QUIET_LEAVING;
        m->s.quiet_check_at_ms = m->s.now_ms;
        break;
    case ST_CHECK_QUIET:
        if (rnd(m, 2)) {
            m->s.quiet = PLAN_QUIET_OFF;
            m->s.quiet_wanted = false;
        } else {
            m->s.quiet_check_at_ms = m->s.now_ms + 5; /* the timer wakes it then */
        }
        m->s.wake = true;
        break;
    case ST_MARK:
        /* One statement for the batches marked together (relay_poll_pipeline.c's on_marked):
         * each is DELIVERED and marked after it, the lead goes on at once. */
        for (int k = 0; k < SLOTS; k++) {
            struct batch *x = &m->b[k];
            if (x->phase != PHASE_MARKING)
                continue;
            for (int i = 0; i < x->n_rows; i++) {
                if (x->state[i] != ROW_DELIVERED)
                    continue;
                cr_assert_eq(m->rows[x->ids[i]].delivered, 1, "row %lld", (long long)x->ids[i]);
                m->rows[x->ids[i]].sent = true; /* conditional: writing it again changes nothing */
            }
            x->phase = PHASE_DELIVERED;
            x->marked = true;
        }
        after_marks(m, b);
        break;
    case ST_RECORD:
        for (int i = 0; i < b->n_rows; i++) {
            struct row *r = &m->rows[b->ids[i]];
            cr_assert_eq(batch_row_end(b, i) == ROW_END_CHARGED, r->owes,
                         "row %lld is charged exactly when its failure was its own",
                         (long long)b->ids[i]);
            r->owes = false;
            if (batch_row_end(b, i) != ROW_END_CHARGED)
                continue;
            cr_assert(!r->sent, "a delivered row is never charged");
            r->attempts++;
            bool exhausted = b->limit[i] == LIMIT_ONE || r->attempts >= MAX_ATTEMPTS;
            r->dead = poison_outcome_of(poison_rules_of(POISON_DEAD_LETTER), exhausted, exhausted,
                                        false) == OUTCOME_DEAD_LETTERED;
        }
        if (b->rescan_after_mark)
            m->s.wake = true;
        batch_clear(b);
        break;
    default: break;
    }
}

/* A delivery report for a random row in flight: mostly acknowledged, now
 * and then an outage, now and then an error that may be the row's. */
static void report(struct sim *m, struct batch *b)
{
    int i;
    do
        i = (int)rnd(m, (unsigned)b->n_rows);
    while (b->state[i] != ROW_PENDING);
    unsigned dice = rnd(m, 20);
    bool last;
    if (dice < 17) {
        m->rows[b->ids[i]].delivered++;
        last = batch_reported(b, i, NULL, NULL);
    } else {
        enum kafka_fault f = dice == 17 ? KAFKA_FAULT_OUTAGE : KAFKA_FAULT_PERMANENT;
        struct failure_verdict v = engine_judge_failure(f, b->alone);
        last = batch_reported(b, i, &v, "an error");
        m->rows[b->ids[i]].owes = v.charged;
        if (v.suspect) {
            m->s.isolating = m->s.wake = true;
            if (b->ids[i] > m->s.isolate_until_id)
                m->s.isolate_until_id = b->ids[i];
        }
    }
    if (last)
        m->s.queue_full = false;
}

static void lose_connection(struct sim *m)
{
    if (m->running == ST_MARK) {
        for (int k = 0; k < SLOTS; k++)
            (void)batch_lost(&m->b[k]); /* every batch of the statement: DELIVERED, unmarked */
    } else if (m->running != ST_NONE && m->running_slot >= 0 && batch_lost(&m->b[m->running_slot])) {
        batch_clear(&m->b[m->running_slot]);
    }
    m->running = ST_NONE;
    m->connected = m->s.pg_ready = false;
    m->s.role = STATS_ROLE_UNKNOWN;
    /* The session ends, and the quiet lock with it. */
    m->s.quiet = PLAN_QUIET_OFF;
    m->s.quiet_wanted = m->s.quiet_idle = false;
}

static void reconnect(struct sim *m)
{
    m->connected = m->s.pg_ready = true;
    m->s.session_checked = m->s.schema_checked = m->s.listening = false;
    m->s.prepared = 0;
    m->s.backoff = false;
}

static bool drained(const struct sim *m)
{
    for (int id = 1; id <= N_ROWS; id++)
        if (!m->rows[id].sent && !m->rows[id].dead)
            return false;
    for (int k = 0; k < SLOTS; k++)
        if (m->b[k].phase != PHASE_EMPTY)
            return false;
    return true;
}

static bool run(uint64_t seed)
{
    struct sim m;
    sim_init(&m, seed);
    int events = 0;
    bool quiet_seen = false;
    for (; !drained(&m) && events < 200000; events++) {
        unsigned dice = rnd(&m, 100);
        struct batch *producing = NULL;
        for (int k = 0; k < SLOTS; k++)
            if (m.b[k].phase == PHASE_PRODUCING && (!producing || rnd(&m, 2)))
                producing = &m.b[k];
        if (!m.connected) {
            if (dice < 30)
                reconnect(&m);
            else if (producing)
                report(&m, producing);
        } else if (dice < 2) {
            lose_connection(&m);
        } else if (dice < 6) {
            m.s.backoff = false; /* the tick */
            m.s.lock_due = m.s.wake = true;
            m.s.now_ms += 1000;
        } else if (dice < 12) {
            /* A writer's NOTIFY, when the relay is not quiet; the quiet
             * check's timer otherwise. */
            if (m.s.quiet == PLAN_QUIET_OFF) {
                m.s.wake = true;
                m.s.notifies += 1 + (int)rnd(&m, 4); /* a few writers at once, now and then */
            }
            else if (m.s.quiet == PLAN_QUIET_LEAVING && m.s.now_ms + 5 >= m.s.quiet_check_at_ms) {
                m.s.now_ms = m.s.quiet_check_at_ms;
                m.s.wake = true;
            }
        } else if (producing && (dice < 60 || m.running == ST_NONE)) {
            report(&m, producing);
        } else if (m.running != ST_NONE) {
            answer(&m);
        }
        step(&m);
        cr_assert(m.s.quiet != PLAN_QUIET_ON || m.s.role == STATS_ROLE_LEADER ||
                      m.running == ST_RELEASE_QUIET,
                  "seed %llu: a relay that does not lead holds the quiet lock",
                  (unsigned long long)seed);
        quiet_seen |= m.s.quiet == PLAN_QUIET_ON;
        cr_assert(m.b[SLOTS - 1].phase == PHASE_EMPTY,
                  "seed %llu: a batch beyond a transaction's without one to wait for",
                  (unsigned long long)seed);
    }
    cr_assert(drained(&m), "seed %llu: rows left after %d events", (unsigned long long)seed, events);
    int sent = 0, dead = 0;
    for (int id = 1; id <= N_ROWS; id++) {
        struct row *r = &m.rows[id];
        cr_assert(r->sent != r->dead, "row %d ends one way", id);
        cr_assert_eq(r->delivered, r->sent ? 1 : 0, "row %d delivered %d times", id, r->delivered);
        sent += r->sent;
        dead += r->dead;
    }
    cr_assert_gt(sent, N_ROWS / 2, "seed %llu: most rows get through", (unsigned long long)seed);
    cr_assert_eq(sent + dead, N_ROWS);
    sim_free(&m);
    return quiet_seen;
}

Test(plan_sim, every_row_ends_once_whatever_the_order_of_events)
{
    int quiet_runs = 0;
    for (uint64_t seed = 1; seed <= 200; seed++)
        quiet_runs += run(seed);
    /* The runs went through the quiet lock's states, not around them. */
    cr_assert_gt(quiet_runs, 100, "only %d of 200 runs took the quiet lock", quiet_runs);
}
