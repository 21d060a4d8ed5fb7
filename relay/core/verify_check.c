/* verify_check.c — matching messages to outbox rows and counting what is
 * wrong. Pure logic; verify.c does the reading. See verify_check.h. */
#include "core/verify_check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hex.h"

#define FNV_PRIME 0x100000001b3ULL
#define ROW_REPORTED_MISMATCH 0x1u

uint64_t vcheck_hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* A length prefix keeps ("ab", "c") and ("a", "bc") apart; a NULL gets a
 * length no real byte string has. */
static uint64_t hash_field(uint64_t h, const void *p, size_t n)
{
    uint64_t len = p ? (uint64_t)n : UINT64_MAX;
    h = vcheck_hash(h, &len, sizeof len);
    return p ? vcheck_hash(h, p, n) : h;
}

uint64_t vcheck_digest_bytes(const void *p, size_t n)
{
    return hash_field(VCHECK_SEED, p, n);
}

uint64_t vcheck_digest_header(uint64_t h, const char *name, size_t name_len, const void *value,
                              size_t value_len)
{
    h = hash_field(h, name, name_len);
    return hash_field(h, value, value_len);
}

uint64_t vcheck_digest_timestamp(uint64_t h, int64_t timestamp_ms)
{
    return vcheck_hash(h, &timestamp_ms, sizeof timestamp_ms);
}

bool vcheck_uuid_parse(const char *text, size_t len, uint8_t out[16])
{
    if (!text || len != 36)
        return false;
    size_t o = 0;
    for (size_t i = 0; i < 36;) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (text[i] != '-')
                return false;
            i++;
            continue;
        }
        int hi = hex_value(text[i]), lo = hex_value(text[i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[o++] = (uint8_t)(hi << 4 | lo);
        i += 2;
    }
    return o == 16;
}

void vcheck_uuid_format(const uint8_t id[16], char out[37])
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hex[id[i] >> 4];
        out[o++] = hex[id[i] & 15];
    }
    out[o] = '\0';
}

const char *vcheck_problem_name(enum vcheck_problem p)
{
    static const char *const names[VCHECK_P_COUNT] = {"missing", "duplicates", "out_of_order",
                                                      "mismatched", "unknown"};
    return p < VCHECK_P_COUNT ? names[p] : "?";
}

void vcheck_init(struct vcheck *v, size_t max_examples)
{
    memset(v, 0, sizeof *v);
    v->max_examples = max_examples;
    v->own_lo = INT64_MIN;
    v->own_hi = INT64_MAX;
    v->own_unnumbered = true;
    v->window_lo_ms = INT64_MIN;
    v->window_hi_ms = INT64_MAX;
}

void vcheck_free(struct vcheck *v)
{
    free(v->rows);
    free(v->slots);
    for (size_t i = 0; i < v->n_topics; i++)
        free(v->topics[i].name);
    free(v->topics);
    for (int p = 0; p < VCHECK_P_COUNT; p++)
        free(v->examples[p]);
    free(v->absent);
    memset(v, 0, sizeof *v);
}

uint32_t vcheck_topic(struct vcheck *v, const char *name)
{
    uint64_t h = vcheck_hash(VCHECK_SEED, name, strlen(name));
    for (size_t i = 0; i < v->n_topics; i++)
        if (v->topics[i].hash == h && strcmp(v->topics[i].name, name) == 0)
            return (uint32_t)i;
    if (v->n_topics == v->cap_topics) {
        size_t cap = v->cap_topics ? 2 * v->cap_topics : 8;
        struct vcheck_topic *t = realloc(v->topics, cap * sizeof *t);
        if (!t)
            return UINT32_MAX;
        v->topics = t;
        v->cap_topics = cap;
    }
    struct vcheck_topic *t = &v->topics[v->n_topics];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name)
        return UINT32_MAX;
    t->hash = h;
    return (uint32_t)v->n_topics++;
}

void vcheck_slice_begin(struct vcheck *v, int64_t own_lo, int64_t own_hi, bool unnumbered,
                        int64_t lo_ms, int64_t hi_ms)
{
    v->n_rows = 0;
    v->own_lo = own_lo;
    v->own_hi = own_hi;
    v->own_unnumbered = unnumbered;
    v->window_lo_ms = lo_ms;
    v->window_hi_ms = hi_ms;
    if (v->slots)
        memset(v->slots, 0, v->n_slots * sizeof *v->slots);
}

int vcheck_row_add(struct vcheck *v, const struct vcheck_row *row)
{
    if (v->n_rows == v->cap_rows) {
        size_t cap = v->cap_rows ? 2 * v->cap_rows : 1024;
        struct vcheck_row *r = realloc(v->rows, cap * sizeof *r);
        if (!r)
            return -ENOMEM;
        v->rows = r;
        v->cap_rows = cap;
    }
    struct vcheck_row *r = &v->rows[v->n_rows++];
    *r = *row;
    r->first_partition = -1;
    r->first_offset = -1;
    r->deliveries = 0;
    r->flags = 0;
    return 0;
}

/* Uuids are usually random, but an application may write sequential ones:
 * mix before using the low bits. */
static uint64_t uuid_hash(const uint8_t id[16])
{
    uint64_t a, b;
    memcpy(&a, id, 8);
    memcpy(&b, id + 8, 8);
    uint64_t x = a ^ (b * 0x9e3779b97f4a7c15ULL);
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

int vcheck_slice_index(struct vcheck *v)
{
    size_t need = 16;
    while (need < 2 * v->n_rows)
        need *= 2;
    if (need > v->n_slots) {
        uint32_t *s = realloc(v->slots, need * sizeof *s);
        if (!s)
            return -ENOMEM;
        v->slots = s;
        v->n_slots = need;
    }
    memset(v->slots, 0, v->n_slots * sizeof *v->slots);
    size_t mask = v->n_slots - 1;
    for (size_t i = 0; i < v->n_rows; i++) {
        size_t k = uuid_hash(v->rows[i].event_id) & mask;
        while (v->slots[k])
            k = (k + 1) & mask;
        v->slots[k] = (uint32_t)(i + 1);
    }
    return 0;
}

static struct vcheck_row *find(const struct vcheck *v, const uint8_t id[16])
{
    if (!v->n_slots)
        return NULL;
    size_t mask = v->n_slots - 1;
    for (size_t k = uuid_hash(id) & mask; v->slots[k]; k = (k + 1) & mask) {
        struct vcheck_row *r = &v->rows[v->slots[k] - 1];
        if (memcmp(r->event_id, id, 16) == 0)
            return r;
    }
    return NULL;
}

static void example(struct vcheck *v, enum vcheck_problem p, const struct vcheck_example *e)
{
    if (v->n_examples[p] >= v->max_examples)
        return;
    if (!v->examples[p]) {
        v->examples[p] = calloc(v->max_examples, sizeof *v->examples[p]);
        if (!v->examples[p])
            return;
    }
    v->examples[p][v->n_examples[p]++] = *e;
}

/* Counts go to the topic and to the total alike. */
#define COUNT(v, t, field, n)                                                                      \
    do {                                                                                           \
        (v)->topics[t].c.field += (n);                                                             \
        (v)->total.field += (n);                                                                   \
    } while (0)

enum vcheck_verdict vcheck_observe(struct vcheck *v, const struct vcheck_msg *m)
{
    if (!m->has_event_id || m->topic >= v->n_topics)
        return VCHECK_IGNORED;
    struct vcheck_row *r = find(v, m->event_id);
    if (!r) {
        /* Judged by exactly one slice, and only inside the window: a message
         * of a row outside it (older, newer, replayed) is not unknown. */
        bool mine = m->has_outbox_id ? (m->outbox_id >= v->own_lo && m->outbox_id <= v->own_hi)
                                     : v->own_unnumbered;
        if (!mine || m->timestamp < v->window_lo_ms || m->timestamp > v->window_hi_ms)
            return VCHECK_IGNORED;
        COUNT(v, m->topic, messages, 1);
        COUNT(v, m->topic, unknown, 1);
        struct vcheck_example e = {.id = m->has_outbox_id ? m->outbox_id : 0, .topic = m->topic,
                                   .partition = m->partition, .offset = m->offset};
        memcpy(e.event_id, m->event_id, 16);
        example(v, VCHECK_P_UNKNOWN, &e);
        return VCHECK_UNKNOWN;
    }
    /* A replay sent elsewhere (replay --topic) is another stream's business. */
    if (m->replay && m->topic != r->topic)
        return VCHECK_IGNORED;

    COUNT(v, r->topic, messages, 1);
    if (m->replay)
        COUNT(v, r->topic, replayed, 1);
    if (r->deliveries < UINT16_MAX)
        r->deliveries++;
    if (r->first_partition < 0 && m->topic == r->topic) {
        r->first_partition = m->partition;
        r->first_offset = m->offset;
    }

    unsigned diff = (m->key != r->key ? VCHECK_DIFF_KEY : 0) |
                    (m->value != r->value ? VCHECK_DIFF_VALUE : 0) |
                    (m->headers != r->headers ? VCHECK_DIFF_HEADERS : 0) |
                    (m->topic != r->topic ? VCHECK_DIFF_TOPIC : 0);
    if (diff) {
        COUNT(v, r->topic, mismatched, 1);
        struct vcheck_example e = {.id = r->id, .topic = m->topic, .partition = m->partition,
                                   .offset = m->offset, .diff = diff};
        memcpy(e.event_id, r->event_id, 16);
        example(v, VCHECK_P_MISMATCH, &e);
        return VCHECK_MISMATCH;
    }
    return r->deliveries > 1 ? VCHECK_DUPLICATE : VCHECK_MATCH;
}

/* Groups first deliveries by (topic, partition, key); ids ascending within. */
static int cmp_order(const void *a, const void *b)
{
    const struct vcheck_row *x = a, *y = b;
    if (x->topic != y->topic)
        return x->topic < y->topic ? -1 : 1;
    if (x->first_partition != y->first_partition)
        return x->first_partition < y->first_partition ? -1 : 1;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* A row Kafka does not hold. Slices come in id order, and so do their rows here. */
static void absent_add(struct vcheck *v, int64_t id)
{
    if (v->n_absent == v->cap_absent) {
        size_t cap = v->cap_absent ? 2 * v->cap_absent : 256;
        int64_t *p = realloc(v->absent, cap * sizeof *p);
        if (!p) {
            v->absent_oom = true;
            return;
        }
        v->absent = p;
        v->cap_absent = cap;
    }
    v->absent[v->n_absent++] = id;
}

void vcheck_slice_end(struct vcheck *v)
{
    /* In id order first, so that the examples are the oldest rows. */
    for (size_t i = 0; i < v->n_rows; i++) {
        const struct vcheck_row *r = &v->rows[i];
        COUNT(v, r->topic, rows, 1);
        if (r->state == VCHECK_SENT)
            COUNT(v, r->topic, sent, 1);
        else if (r->state == VCHECK_DEAD)
            COUNT(v, r->topic, dead, 1);
        else
            COUNT(v, r->topic, pending, 1);
        struct vcheck_example e = {.id = r->id, .topic = r->topic,
                                   .partition = r->first_partition, .offset = r->first_offset,
                                   .deliveries = r->deliveries};
        memcpy(e.event_id, r->event_id, 16);
        if (v->want_absent && r->deliveries == 0 && r->state != VCHECK_DEAD)
            absent_add(v, r->id);
        if (r->state == VCHECK_SENT && r->deliveries == 0) {
            COUNT(v, r->topic, missing, 1);
            example(v, VCHECK_P_MISSING, &e);
        }
        if (r->deliveries > 1) {
            COUNT(v, r->topic, duplicates, 1);
            COUNT(v, r->topic, extra_deliveries, r->deliveries - 1u);
            example(v, VCHECK_P_DUPLICATE, &e);
        }
    }

    /* Order: within one partition, the first deliveries of one key must come
     * in id order. The rows are sorted in place (the index is done with). */
    qsort(v->rows, v->n_rows, sizeof *v->rows, cmp_order);
    size_t i = 0;
    while (i < v->n_rows) {
        size_t j = i + 1;
        while (j < v->n_rows && v->rows[j].topic == v->rows[i].topic &&
               v->rows[j].first_partition == v->rows[i].first_partition &&
               v->rows[j].key == v->rows[i].key)
            j++;
        if (v->rows[i].first_partition >= 0) {
            for (size_t k = i + 1; k < j; k++) {
                const struct vcheck_row *prev = &v->rows[k - 1], *r = &v->rows[k];
                if (r->first_offset < prev->first_offset) {
                    COUNT(v, r->topic, out_of_order, 1);
                    struct vcheck_example e = {.id = prev->id, .topic = r->topic,
                                               .partition = r->first_partition,
                                               .offset = prev->first_offset, .other_id = r->id,
                                               .other_offset = r->first_offset};
                    memcpy(e.event_id, prev->event_id, 16);
                    example(v, VCHECK_P_OUT_OF_ORDER, &e);
                    break; /* one per aggregate */
                }
            }
        }
        i = j;
    }
    v->n_rows = 0;
}

bool vcheck_ok(const struct vcheck *v)
{
    return v->total.missing == 0 && v->total.mismatched == 0 && v->total.out_of_order == 0;
}
