/* pgoutput.c — see pgoutput.h. All integers on the wire are big-endian. */
#include "core/pgoutput.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pgo_lsn_text(uint64_t lsn, char out[PGO_LSN_TEXT])
{
    snprintf(out, PGO_LSN_TEXT, "%X/%X", (unsigned)(lsn >> 32), (unsigned)(lsn & 0xffffffffu));
}

uint64_t pgo_lsn_parse(const char *s)
{
    unsigned hi = 0, lo = 0;
    return s && sscanf(s, "%X/%X", &hi, &lo) == 2 ? ((uint64_t)hi << 32) | lo : 0;
}

struct reader {
    const uint8_t *p, *end;
    bool bad;
};

static bool need(struct reader *r, size_t n)
{
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = true;
        return false;
    }
    return true;
}

static uint64_t get_u(struct reader *r, int bytes)
{
    if (!need(r, (size_t)bytes))
        return 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = v << 8 | r->p[i];
    r->p += bytes;
    return v;
}

/* A NUL-terminated string, in place. */
static const char *get_str(struct reader *r)
{
    const uint8_t *nul = r->bad ? NULL : memchr(r->p, '\0', (size_t)(r->end - r->p));
    if (!nul) {
        r->bad = true;
        return NULL;
    }
    const char *s = (const char *)r->p;
    r->p = nul + 1;
    return s;
}

static void put_u64(uint8_t *o, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        o[i] = (uint8_t)v;
}

int pgo_frame_parse(const uint8_t *buf, size_t len, struct pgo_frame *f)
{
    struct reader r = { buf + 1, buf + len, len == 0 };
    memset(f, 0, sizeof *f);
    if (len > 0 && buf[0] == 'w') {
        f->kind = PGO_XLOGDATA;
        f->start_lsn = get_u(&r, 8);
        f->end_lsn = get_u(&r, 8);
        f->send_time_us = (int64_t)get_u(&r, 8);
        f->data = r.p;
        f->len = r.bad ? 0 : (size_t)(r.end - r.p);
    } else if (len > 0 && buf[0] == 'k') {
        f->kind = PGO_KEEPALIVE;
        f->end_lsn = get_u(&r, 8);
        f->send_time_us = (int64_t)get_u(&r, 8);
        f->reply_requested = get_u(&r, 1) != 0;
    } else {
        return -EINVAL;
    }
    return r.bad ? -EINVAL : 0;
}

size_t pgo_status_update(uint8_t out[PGO_STATUS_UPDATE_LEN], uint64_t written, uint64_t flushed,
                         int64_t now_us, bool reply_requested)
{
    out[0] = 'r';
    put_u64(out + 1, written > flushed ? written : flushed);
    put_u64(out + 9, flushed);   /* flushed */
    put_u64(out + 17, flushed);  /* applied */
    put_u64(out + 25, (uint64_t)now_us);
    out[33] = reply_requested ? 1 : 0;
    return PGO_STATUS_UPDATE_LEN;
}

/* ---- relations ---- */

static void relation_clear(struct pgo_relation *rel)
{
    for (int i = 0; i < rel->ncols; i++)
        free(rel->colnames[i]);
    free(rel->colnames);
    free(rel->coltypes);
    free(rel->nspname);
    free(rel->relname);
    memset(rel, 0, sizeof *rel);
}

static struct pgo_relation *relation_find(struct pgo_relations *rels, uint32_t oid)
{
    for (size_t i = 0; i < rels->n; i++)
        if (rels->v[i].oid == oid)
            return &rels->v[i];
    return NULL;
}

static int decode_relation(struct pgo_relations *rels, struct reader *r, struct pgo_msg *m)
{
    uint32_t oid = (uint32_t)get_u(r, 4);
    const char *nsp = get_str(r), *name = get_str(r);
    (void)get_u(r, 1); /* replica identity */
    int ncols = (int)get_u(r, 2);
    if (r->bad)
        return -EINVAL;
    if (ncols > PGO_MAX_COLUMNS)
        return -E2BIG;
    struct pgo_relation fresh = { .oid = oid, .ncols = 0 };
    fresh.nspname = strdup(*nsp ? nsp : "pg_catalog");
    fresh.relname = strdup(name);
    fresh.colnames = calloc((size_t)(ncols ? ncols : 1), sizeof(char *));
    fresh.coltypes = calloc((size_t)(ncols ? ncols : 1), sizeof(uint32_t));
    int rc = fresh.nspname && fresh.relname && fresh.colnames && fresh.coltypes ? 0 : -ENOMEM;
    for (int i = 0; i < ncols && rc == 0; i++) {
        (void)get_u(r, 1); /* flags: part of the key */
        const char *col = get_str(r);
        fresh.coltypes[i] = (uint32_t)get_u(r, 4);
        (void)get_u(r, 4); /* type modifier */
        if (r->bad)
            rc = -EINVAL;
        else if (!(fresh.colnames[fresh.ncols++] = strdup(col)))
            rc = -ENOMEM;
    }
    struct pgo_relation *slot = relation_find(rels, oid);
    if (rc == 0 && !slot) {
        struct pgo_relation *grown = realloc(rels->v, (rels->n + 1) * sizeof *grown);
        if (!grown)
            rc = -ENOMEM;
        else {
            rels->v = grown;
            slot = &rels->v[rels->n++];
            memset(slot, 0, sizeof *slot);
        }
    }
    if (rc < 0) {
        relation_clear(&fresh);
        return rc;
    }
    relation_clear(slot);
    *slot = fresh;
    m->rel = slot;
    return 0;
}

static int decode_insert(struct pgo_relations *rels, struct reader *r, struct pgo_msg *m)
{
    m->rel = relation_find(rels, (uint32_t)get_u(r, 4));
    if (get_u(r, 1) != 'N' || r->bad)
        return -EINVAL;
    if (!m->rel)
        return -ENOENT;
    int ncols = (int)get_u(r, 2);
    if (ncols > PGO_MAX_COLUMNS)
        return -E2BIG;
    for (int i = 0; i < ncols && !r->bad; i++) {
        struct pgo_value *v = &m->cols[i];
        switch (get_u(r, 1)) {
        case 'n': case 'u':
            v->text = NULL;
            v->len = 0;
            break;
        case 't': case 'b':
            v->len = (size_t)get_u(r, 4);
            if (need(r, v->len)) {
                v->text = (const char *)r->p;
                r->p += v->len;
            }
            break;
        default:
            r->bad = true;
        }
    }
    m->ncols = ncols;
    return r->bad ? -EINVAL : 0;
}

int pgo_decode(struct pgo_relations *rels, const uint8_t *p, size_t len, struct pgo_msg *m)
{
    memset(m, 0, sizeof *m);
    struct reader r = { p + 1, p + len, len == 0 };
    switch (len ? p[0] : 0) {
    case 'B':
        m->kind = PGO_BEGIN;
        m->lsn = get_u(&r, 8);
        m->commit_time_us = (int64_t)get_u(&r, 8);
        m->xid = (uint32_t)get_u(&r, 4);
        break;
    case 'C':
        m->kind = PGO_COMMIT;
        (void)get_u(&r, 1); /* flags */
        m->lsn = get_u(&r, 8);
        m->end_lsn = get_u(&r, 8);
        m->commit_time_us = (int64_t)get_u(&r, 8);
        break;
    case 'R':
        m->kind = PGO_RELATION;
        return decode_relation(rels, &r, m);
    case 'I':
        m->kind = PGO_INSERT;
        return decode_insert(rels, &r, m);
    case 'M':
        m->kind = PGO_MESSAGE;
        m->transactional = get_u(&r, 1) & 1;
        m->lsn = get_u(&r, 8);
        m->prefix = get_str(&r);
        m->content_len = (size_t)get_u(&r, 4);
        if (need(&r, m->content_len))
            m->content = (const char *)r.p;
        break;
    default:
        m->kind = PGO_OTHER; /* Type, Origin, Update, Delete, Truncate: not ours */
        return len ? 0 : -EINVAL;
    }
    return r.bad ? -EINVAL : 0;
}

const struct pgo_value *pgo_column(const struct pgo_msg *m, const char *name)
{
    if (m->kind != PGO_INSERT || !m->rel)
        return NULL;
    for (int i = 0; i < m->rel->ncols && i < m->ncols; i++)
        if (!strcmp(m->rel->colnames[i], name))
            return &m->cols[i];
    return NULL;
}

uint32_t pgo_column_type(const struct pgo_msg *m, const char *name)
{
    if (m->kind != PGO_INSERT || !m->rel)
        return 0;
    for (int i = 0; i < m->rel->ncols; i++)
        if (!strcmp(m->rel->colnames[i], name))
            return m->rel->coltypes[i];
    return 0;
}

void pgo_relations_free(struct pgo_relations *rels)
{
    for (size_t i = 0; i < rels->n; i++)
        relation_clear(&rels->v[i]);
    free(rels->v);
    memset(rels, 0, sizeof *rels);
}

/* ---- what may be confirmed ---- */

/* Sequence numbers are consecutive from head to tail: the entry is found by
 * arithmetic, whatever the number of transactions in flight. */
static struct pgo_txn *txn_of(struct pgo_acks *a, uint64_t seq)
{
    if (a->n == 0)
        return NULL;
    uint64_t first = a->v[a->head].seq;
    if (seq < first || seq - first >= a->n)
        return NULL;
    return &a->v[(a->head + (size_t)(seq - first)) % a->cap];
}

/* The oldest transactions done: committed and all acknowledged. */
static uint64_t advance(struct pgo_acks *a)
{
    while (a->n > 0) {
        struct pgo_txn *t = &a->v[a->head];
        if (!t->committed || t->pending > 0)
            break;
        a->confirmed = t->end_lsn;
        a->head = (a->head + 1) % a->cap;
        a->n--;
    }
    return a->confirmed;
}

uint64_t pgo_acks_begin(struct pgo_acks *a)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 16;
        struct pgo_txn *v = malloc(cap * sizeof *v);
        if (!v)
            return 0;
        for (size_t i = 0; i < a->n; i++)
            v[i] = a->v[(a->head + i) % a->cap];
        free(a->v);
        a->v = v;
        a->cap = cap;
        a->head = 0;
    }
    struct pgo_txn *t = &a->v[(a->head + a->n++) % a->cap];
    *t = (struct pgo_txn){ .seq = ++a->next_seq };
    return t->seq;
}

void pgo_acks_sent(struct pgo_acks *a, uint64_t seq)
{
    struct pgo_txn *t = txn_of(a, seq);
    if (t)
        t->pending++;
}

void pgo_acks_commit(struct pgo_acks *a, uint64_t seq, uint64_t end_lsn)
{
    struct pgo_txn *t = txn_of(a, seq);
    if (!t)
        return;
    t->committed = true;
    t->end_lsn = end_lsn;
    advance(a);
}

uint64_t pgo_acks_done(struct pgo_acks *a, uint64_t seq)
{
    return pgo_acks_done_n(a, seq, 1);
}

uint64_t pgo_acks_done_n(struct pgo_acks *a, uint64_t seq, long n)
{
    struct pgo_txn *t = txn_of(a, seq);
    if (t)
        t->pending = t->pending > n ? t->pending - n : 0;
    return advance(a);
}

void pgo_acks_free(struct pgo_acks *a)
{
    free(a->v);
    memset(a, 0, sizeof *a);
}
