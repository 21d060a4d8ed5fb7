/* batch.c — the rows of one claim in flight; see batch.h. No I/O. */
#include "core/batch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int grow(void **p, size_t n, size_t size)
{
    void *q = realloc(*p, n * size);
    if (!q)
        return -ENOMEM;
    *p = q;
    return 0;
}

int batch_reserve(struct batch *b, int n)
{
    if (n <= b->cap)
        return 0;
    if (grow((void **)&b->ids, (size_t)n, sizeof(*b->ids)) < 0 ||
        grow((void **)&b->created_ms, (size_t)n, sizeof(*b->created_ms)) < 0 ||
        grow((void **)&b->state, (size_t)n, sizeof(*b->state)) < 0 ||
        grow((void **)&b->limit, (size_t)n, sizeof(*b->limit)) < 0 ||
        grow((void **)&b->reason, (size_t)n, sizeof(*b->reason)) < 0 ||
        grow((void **)&b->agg, (size_t)n, sizeof(*b->agg)) < 0)
        return -ENOMEM;
    for (int i = b->cap; i < n; i++)
        b->reason[i] = b->agg[i] = NULL;
    b->cap = n;
    return 0;
}

void batch_clear(struct batch *b)
{
    for (int i = 0; i < b->n_rows; i++) {
        free(b->reason[i]);
        free(b->agg[i]);
        b->reason[i] = b->agg[i] = NULL;
    }
    b->phase = PHASE_EMPTY;
    b->n_rows = 0;
    b->n_outstanding = 0;
    b->n_delivered = 0;
    b->n_suspects = 0;
    b->alone = false;
    b->marked = false;
    b->rescan_after_mark = false;
    b->record_each = false;
    b->record_lost = false;
    b->committed = false;
    b->aborted = false;
    b->unpublished = false;
    b->held = NULL;
}

void batch_free(struct batch *b)
{
    batch_clear(b);
    free(b->ids);
    free(b->created_ms);
    free(b->state);
    free(b->limit);
    free(b->reason);
    free(b->agg);
    memset(b, 0, sizeof(*b));
}

void batch_loaded(struct batch *b, int n)
{
    b->n_rows = n;
    for (int i = 0; i < n; i++)
        b->state[i] = ROW_SKIPPED;
    b->span = id_span_of(b->ids, n);
}

void batch_cut_at(struct batch *b, int i)
{
    b->span = id_span_of(b->ids, i);
}

/* A reason cut to fit its buffer may end inside a UTF-8 character; as
 * last_error that would make the failure record itself fail. */
static void utf8_trim_partial(char *s)
{
    size_t n = strlen(s), k = n;
    while (k > 0 && ((unsigned char)s[k - 1] & 0xC0) == 0x80 && n - k < 3)
        k--;
    if (k == 0 || (unsigned char)s[k - 1] < 0xC0)
        return; /* ends in ASCII or complete continuation bytes only */
    unsigned char lead = (unsigned char)s[k - 1];
    size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    if (n - (k - 1) < want)
        s[k - 1] = '\0';
}

bool batch_row_failed(struct batch *b, int i, enum attempt_limit limit, const char *why)
{
    b->state[i] = ROW_FAILED;
    b->limit[i] = (unsigned char)limit;
    free(b->reason[i]);
    b->reason[i] = why ? strdup(why) : NULL;
    if (b->reason[i])
        utf8_trim_partial(b->reason[i]);
    return why != NULL;
}

bool batch_reported(struct batch *b, int i, const struct failure_verdict *v, const char *why)
{
    if (!v) {
        b->state[i] = ROW_DELIVERED;
        b->n_delivered++;
    } else {
        batch_row_failed(b, i, v->limit, v->charged ? why : NULL);
        b->n_suspects += v->suspect;
    }
    if (--b->n_outstanding > 0)
        return false;
    b->phase = PHASE_DELIVERED;
    return true;
}

int batch_failures_to_record(const struct batch *b)
{
    int n = 0;
    for (int i = 0; i < b->n_rows; i++)
        n += b->state[i] == ROW_FAILED && b->reason[i];
    return n;
}

int batch_failures_uncharged(const struct batch *b)
{
    int n = 0;
    for (int i = 0; i < b->n_rows; i++)
        n += b->state[i] == ROW_FAILED && !b->reason[i];
    return n;
}

int batch_first_failure(const struct batch *b)
{
    for (int i = 0; i < b->n_rows; i++)
        if (b->state[i] == ROW_FAILED && b->reason[i])
            return i;
    return 0;
}

bool batch_holds(const struct batch *batches, int n, const char *key)
{
    for (int k = 0; k < n; k++) {
        const struct batch *b = &batches[k];
        for (int j = 0; j < b->n_rows; j++)
            if (b->agg[j] && strcmp(b->agg[j], key) == 0)
                return true;
    }
    return false;
}

int batch_outstanding(const struct batch *batches, int n)
{
    int sum = 0;
    for (int k = 0; k < n; k++)
        sum += batches[k].n_outstanding;
    return sum;
}

bool batch_any_in(const struct batch *batches, int n, enum phase ph)
{
    for (int k = 0; k < n; k++)
        if (batches[k].phase == ph)
            return true;
    return false;
}

bool batch_lost(struct batch *b)
{
    switch (b->phase) {
    case PHASE_CLAIMING:
    case PHASE_RECORDING:
        return true;
    case PHASE_MARKING:
        b->phase = PHASE_DELIVERED;
        return false;
    default:
        return false;
    }
}

bool batch_marks_due(const struct batch *b)
{
    return !b->marked && b->n_delivered > 0;
}

bool batch_whole(const struct batch *b, int size)
{
    return b->n_rows >= size && b->n_rows > 0 && b->span.hi >= b->ids[b->n_rows - 1];
}

enum batch_next batch_after_marks(const struct batch *b)
{
    if (batch_failures_to_record(b) > 0)
        return BATCH_RECORD;
    int uncounted = batch_failures_uncharged(b);
    /* Suspects are produced alone next, at once; anything else failed for
     * Kafka's sake, and retrying at once would only fail again. */
    if (uncounted > 0 && b->n_delivered == 0 && b->n_suspects < uncounted)
        return BATCH_RETRY_LATER;
    return BATCH_DONE;
}

bool batch_txn_ended(struct batch *batches, int n, unsigned gen, enum producer_txn_result res)
{
    for (int k = 0; k < n; k++) {
        struct batch *b = &batches[k];
        if ((b->phase != PHASE_PRODUCING && b->phase != PHASE_DELIVERED) || b->txn_gen != gen ||
            b->committed || b->held)
            continue;
        if (res == PRODUCER_TXN_DONE)
            b->committed = true;
        else if (res != PRODUCER_TXN_RETRY)
            b->aborted = true;
    }
    return res == PRODUCER_TXN_ABORTED || res == PRODUCER_TXN_FAILED;
}

enum record_retry batch_record_failed(const struct batch *b)
{
    if (b->record_each)
        return RECORD_NEXT;
    return batch_failures_to_record(b) > 1 ? RECORD_EACH : RECORD_GIVE_UP;
}

enum row_end batch_row_end(const struct batch *b, int i)
{
    if (b->state[i] == ROW_DELIVERED)
        return ROW_END_SENT;
    if (b->state[i] == ROW_FAILED && b->reason[i])
        return ROW_END_CHARGED;
    return ROW_END_CLAIMABLE;
}

int batch_gaps_within(const struct batch *batches, int n, unsigned mask, struct id_span span,
                      int64_t *gaps, int max)
{
    int at[sizeof(unsigned) * 8] = { 0 }; /* a cursor per batch: one bit of @p mask each */
    int found = 0;
    int64_t next = span.lo; /* the lowest id not yet known to be held */
    if (span.lo > span.hi)
        return 0;
    for (;;) {
        /* The lowest id of the batches' next ones: a merge of ascending lists. */
        int take = -1;
        for (int k = 0; k < n && k < (int)(sizeof at / sizeof at[0]); k++) {
            if (!(mask & (1u << k)) || at[k] >= batches[k].n_rows)
                continue;
            const int64_t *ids = batches[k].ids;
            if (at[k] > 0 && ids[at[k]] <= ids[at[k] - 1])
                return -1;
            if (take < 0 || ids[at[k]] < batches[take].ids[at[take]])
                take = k;
        }
        int64_t id = take < 0 ? span.hi + 1 : batches[take].ids[at[take]++];
        if (id < span.lo || id < next)
            continue; /* below the span, or held by two batches */
        if (id > span.hi + 1)
            id = span.hi + 1;
        for (; next < id; next++) {
            if (found == max)
                return -1;
            gaps[found++] = next;
        }
        next = id + 1;
        if (take < 0 || next > span.hi)
            return found;
    }
}
