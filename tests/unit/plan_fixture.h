/* plan_fixture.h — what the engine's step-by-step tests share: the batch
 * slots, a leader's state, batches loaded in a phase, and the answer of a
 * step's statement. Static: each test file is its own program. */
#ifndef OUTBOX_TEST_PLAN_FIXTURE_H
#define OUTBOX_TEST_PLAN_FIXTURE_H

#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>
#include <librdkafka/rdkafka.h>

#include "core/batch.h"
#include "core/engine.h"
#include "core/plan.h"

#define BATCH_SIZE 100

#define SLOTS (PLAN_TXN_BATCHES_MAX + 1)

static struct batch slots[SLOTS];

static void setup(void)
{
    memset(slots, 0, sizeof slots);
    for (int k = 0; k < SLOTS; k++) {
        slots[k].slot = k;
        cr_assert_eq(batch_reserve(&slots[k], BATCH_SIZE), 0);
    }
}

static void teardown(void)
{
    for (int k = 0; k < SLOTS; k++)
        batch_free(&slots[k]);
}

TestSuite(plan, .init = setup, .fini = teardown);

/* A connected leader, every check done, nothing due. */
__attribute__((unused)) static struct plan_state leader(void)
{
    return (struct plan_state){
        .now_ms = 100000,
        .pg_ready = true,
        .session_checked = true,
        .schema_checked = true,
        .prepared = 2,
        .n_hot = 2,
        .listening = true,
        .role = STATS_ROLE_LEADER,
        .ready_sent = true,
        .batch_size = BATCH_SIZE,
        .backlog_due_ms = 105000,
        .txn = PRODUCER_TXN_OFF,
        .b = slots,
        .n_batches = 2,
    };
}

/* Slot @p k holds the rows first..first+n-1, in phase @p ph. */
__attribute__((unused)) static struct batch *load(int k, int64_t first, int n, enum phase ph)
{
    struct batch *b = &slots[k];
    for (int i = 0; i < n; i++) {
        b->ids[i] = first + i;
        b->created_ms[i] = 0;
    }
    batch_loaded(b, n);
    b->phase = ph;
    return b;
}

/* Every report of @p b is in and every row was delivered. */
__attribute__((unused)) static void delivered(struct batch *b)
{
    for (int i = 0; i < b->n_rows; i++)
        b->state[i] = ROW_DELIVERED;
    b->n_delivered = b->n_rows;
    b->n_outstanding = 0;
    b->phase = PHASE_DELIVERED;
}

__attribute__((unused)) static void producing(struct batch *b)
{
    for (int i = 0; i < b->n_rows; i++)
        b->state[i] = ROW_PENDING;
    b->n_outstanding = b->n_rows;
    b->phase = PHASE_PRODUCING;
}

/* The step the daemon would carry out now is @p want. */
#define assert_act(s, want)                                                                   \
    do {                                                                                      \
        struct plan_step got_ = plan_next(s);                                                 \
        cr_assert_eq(got_.act, (want), "expected %s, got %s", plan_act_name(want),            \
                     plan_act_name(got_.act));                                                \
    } while (0)

/* What the daemon sees once the statement of @p p has answered. */
__attribute__((unused)) static void answered(struct plan_state *s, struct plan_step p)
{
    switch (p.act) {
    case PLAN_CHECK_SESSION: s->session_checked = true; break;
    case PLAN_CHECK_SCHEMA: s->schema_checked = true; break;
    case PLAN_PREPARE: s->prepared++; break;
    case PLAN_TAKE_LOCK:
        s->role = STATS_ROLE_LEADER;
        s->lock_due = false;
        s->wake = true;
        break;
    case PLAN_READY: s->ready_sent = true; break;
    case PLAN_COUNT_BACKLOG: s->backlog_due_ms = p.at_ms; break;
    case PLAN_LISTEN: s->listening = true; break;
    default: cr_assert_fail("no answer modelled for %s", plan_act_name(p.act));
    }
}

#endif
