/* test_pgoutput.c — the replication stream's frames, pgoutput's messages and
 * which LSN may be confirmed, byte by byte as PostgreSQL sends them. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "core/pgoutput.h"

struct buf {
    uint8_t b[512];
    size_t n;
};

static void u(struct buf *w, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--)
        w->b[w->n++] = (uint8_t)(v >> (8 * i));
}

static void s(struct buf *w, const char *str)
{
    size_t len = strlen(str) + 1;
    memcpy(w->b + w->n, str, len);
    w->n += len;
}

static void relation(struct buf *w, uint32_t oid, const char *const *cols, int n)
{
    w->n = 0;
    u(w, 'R', 1);
    u(w, oid, 4);
    s(w, "public");
    s(w, "outbox");
    u(w, 'd', 1);
    u(w, (uint64_t)n, 2);
    for (int i = 0; i < n; i++) {
        u(w, i == 0, 1);
        s(w, cols[i]);
        u(w, 25, 4);
        u(w, (uint32_t)-1, 4);
    }
}

Test(pgoutput, frames_and_the_status_update)
{
    struct buf w = { .n = 0 };
    u(&w, 'w', 1);
    u(&w, 0x16B3748, 8);
    u(&w, 0x16B3800, 8);
    u(&w, 12345, 8);
    u(&w, 'B', 1);
    struct pgo_frame f;
    cr_assert_eq(pgo_frame_parse(w.b, w.n, &f), 0);
    cr_assert_eq(f.kind, PGO_XLOGDATA);
    cr_assert_eq(f.start_lsn, 0x16B3748);
    cr_assert_eq(f.end_lsn, 0x16B3800);
    cr_assert_eq(f.len, 1);
    cr_assert_eq(f.data[0], 'B');

    w.n = 0;
    u(&w, 'k', 1);
    u(&w, 0x20000, 8);
    u(&w, 7, 8);
    u(&w, 1, 1);
    cr_assert_eq(pgo_frame_parse(w.b, w.n, &f), 0);
    cr_assert_eq(f.kind, PGO_KEEPALIVE);
    cr_assert(f.reply_requested);
    cr_assert_eq(f.end_lsn, 0x20000);
    cr_assert_eq(pgo_frame_parse(w.b, w.n - 1, &f), -EINVAL, "a short keepalive was taken");
    cr_assert_eq(pgo_frame_parse((const uint8_t *)"x", 1, &f), -EINVAL);

    uint8_t r[PGO_STATUS_UPDATE_LEN];
    cr_assert_eq(pgo_status_update(r, 0, 0x0102030405060708ULL, 9, true), 34);
    cr_assert_eq(r[0], 'r');
    for (int k = 0; k < 3; k++)
        cr_assert_eq(memcmp(r + 1 + 8 * k, "\x01\x02\x03\x04\x05\x06\x07\x08", 8), 0,
                     "position %d is not the flushed LSN", k);
    cr_assert_eq(r[33], 1);
    /* What was read goes further than what may be forgotten: only "written" says so. */
    cr_assert_eq(pgo_status_update(r, 0x0102030405060709ULL, 0x0102030405060708ULL, 9, false), 34);
    cr_assert_eq(memcmp(r + 1, "\x01\x02\x03\x04\x05\x06\x07\x09", 8), 0, "written");
    cr_assert_eq(memcmp(r + 9, "\x01\x02\x03\x04\x05\x06\x07\x08", 8), 0, "flushed");
    cr_assert_eq(memcmp(r + 17, "\x01\x02\x03\x04\x05\x06\x07\x08", 8), 0, "applied");
    cr_assert_eq(r[33], 0);
}

Test(pgoutput, a_transaction_of_one_insert)
{
    struct pgo_relations rels = { 0 };
    struct pgo_msg m;
    struct buf w = { .n = 0 };
    u(&w, 'B', 1);
    u(&w, 0x500, 8);
    u(&w, 777, 8);
    u(&w, 42, 4);
    cr_assert_eq(pgo_decode(&rels, w.b, w.n, &m), 0);
    cr_assert_eq(m.kind, PGO_BEGIN);
    cr_assert_eq(m.lsn, 0x500);
    cr_assert_eq(m.xid, 42);

    static const char *const cols[] = { "id", "aggregate_id", "payload", "headers" };
    relation(&w, 16400, cols, 4);
    cr_assert_eq(pgo_decode(&rels, w.b, w.n, &m), 0);
    cr_assert_eq(m.kind, PGO_RELATION);
    cr_assert_str_eq(m.rel->relname, "outbox");
    cr_assert_eq(m.rel->ncols, 4);

    w.n = 0;
    u(&w, 'I', 1);
    u(&w, 16400, 4);
    u(&w, 'N', 1);
    u(&w, 4, 2);
    u(&w, 't', 1); u(&w, 2, 4); memcpy(w.b + w.n, "17", 2); w.n += 2;
    u(&w, 't', 1); u(&w, 3, 4); memcpy(w.b + w.n, "o-7", 3); w.n += 3;
    u(&w, 't', 1); u(&w, 9, 4); memcpy(w.b + w.n, "{\"a\": 1}x", 9); w.n += 9;
    u(&w, 'n', 1);
    cr_assert_eq(pgo_decode(&rels, w.b, w.n, &m), 0);
    cr_assert_eq(m.kind, PGO_INSERT);
    const struct pgo_value *v = pgo_column(&m, "aggregate_id");
    cr_assert_not_null(v);
    cr_assert_eq(v->len, 3);
    cr_assert_eq(memcmp(v->text, "o-7", 3), 0);
    cr_assert_null(pgo_column(&m, "headers")->text, "NULL read as a value");
    cr_assert_null(pgo_column(&m, "no_such_column"));
    cr_assert_eq(pgo_decode(&rels, w.b, w.n - 5, &m), -EINVAL, "a cut insert was taken");

    w.n = 0;
    u(&w, 'C', 1);
    u(&w, 0, 1);
    u(&w, 0x500, 8);
    u(&w, 0x530, 8);
    u(&w, 777, 8);
    cr_assert_eq(pgo_decode(&rels, w.b, w.n, &m), 0);
    cr_assert_eq(m.kind, PGO_COMMIT);
    cr_assert_eq(m.end_lsn, 0x530);
    pgo_relations_free(&rels);
}

Test(pgoutput, an_insert_into_an_unknown_relation_and_a_changed_one)
{
    struct pgo_relations rels = { 0 };
    struct pgo_msg m;
    struct buf w = { .n = 0 };
    u(&w, 'I', 1);
    u(&w, 99, 4);
    u(&w, 'N', 1);
    u(&w, 0, 2);
    cr_assert_eq(pgo_decode(&rels, w.b, w.n, &m), -ENOENT);

    static const char *const two[] = { "id", "payload" };
    static const char *const three[] = { "id", "payload", "topic" };
    relation(&w, 99, two, 2);
    cr_assert_eq(pgo_decode(&rels, w.b, w.n, &m), 0);
    relation(&w, 99, three, 3);
    cr_assert_eq(pgo_decode(&rels, w.b, w.n, &m), 0);
    cr_assert_eq(rels.n, 1, "a changed relation was kept twice");
    cr_assert_eq(rels.v[0].ncols, 3);
    cr_assert_str_eq(rels.v[0].colnames[2], "topic");
    pgo_relations_free(&rels);
}

Test(pgoutput, a_logical_message_and_what_is_skipped)
{
    struct pgo_relations rels = { 0 };
    struct pgo_msg m;
    struct buf w = { .n = 0 };
    u(&w, 'M', 1);
    u(&w, 1, 1);
    u(&w, 0x900, 8);
    s(&w, "outbox");
    u(&w, 2, 4);
    memcpy(w.b + w.n, "{}", 2);
    w.n += 2;
    cr_assert_eq(pgo_decode(&rels, w.b, w.n, &m), 0);
    cr_assert_eq(m.kind, PGO_MESSAGE);
    cr_assert(m.transactional);
    cr_assert_str_eq(m.prefix, "outbox");
    cr_assert_eq(m.content_len, 2);
    cr_assert_eq(memcmp(m.content, "{}", 2), 0);
    cr_assert_eq(pgo_decode(&rels, (const uint8_t *)"U", 1, &m), 0);
    cr_assert_eq(m.kind, PGO_OTHER);
    cr_assert_eq(pgo_decode(&rels, w.b, 0, &m), -EINVAL);
}

Test(pgoutput, only_what_kafka_acknowledged_in_order_is_confirmed)
{
    struct pgo_acks a = { 0 };
    uint64_t t1 = pgo_acks_begin(&a);
    pgo_acks_sent(&a, t1);
    pgo_acks_sent(&a, t1);
    pgo_acks_commit(&a, t1, 0x100);
    uint64_t t2 = pgo_acks_begin(&a);
    pgo_acks_sent(&a, t2);
    pgo_acks_commit(&a, t2, 0x200);
    cr_assert_eq(a.confirmed, 0, "confirmed before any acknowledgement");
    /* The later transaction acknowledged first: nothing may be confirmed yet. */
    cr_assert_eq(pgo_acks_done(&a, t2), 0);
    cr_assert_eq(pgo_acks_done(&a, t1), 0, "confirmed with a message of t1 in flight");
    cr_assert_eq(pgo_acks_done(&a, t1), 0x200, "both done: the newest end LSN");
    /* A transaction with nothing to relay confirms at its commit. */
    uint64_t t3 = pgo_acks_begin(&a);
    pgo_acks_commit(&a, t3, 0x300);
    cr_assert_eq(a.confirmed, 0x300);
    /* One entry per transaction however large: 200,000 messages, one slot. */
    uint64_t t4 = pgo_acks_begin(&a);
    for (int i = 0; i < 200000; i++)
        pgo_acks_sent(&a, t4);
    cr_assert_eq(a.n, 1);
    pgo_acks_commit(&a, t4, 0x400);
    for (int i = 0; i < 199999; i++)
        pgo_acks_done(&a, t4);
    cr_assert_eq(a.confirmed, 0x300, "confirmed with one message in flight");
    cr_assert_eq(pgo_acks_done(&a, t4), 0x400);
    pgo_acks_free(&a);
}
