/* test_verify_check.c — the comparison behind `outbox-relay verify`, fed
 * rows and messages by hand: matches, each kind of problem, the slice and
 * window rules for unknown messages, and the digests. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/verify_check.h"

static struct vcheck V;
static uint32_t T0, T1;

static void setup(void)
{
    vcheck_init(&V, 3);
    T0 = vcheck_topic(&V, "outbox.order");
    T1 = vcheck_topic(&V, "outbox.customer");
}

static void teardown(void)
{
    vcheck_free(&V);
}

static void uuid_of(int64_t id, uint8_t out[16])
{
    memset(out, 0, 16);
    memcpy(out, &id, sizeof id);
    out[15] = 0x5a;
}

/* Row @p id of aggregate @p key in @p topic, value "v<id>". */
static struct vcheck_row row(int64_t id, const char *key, uint32_t topic, enum vcheck_state st)
{
    struct vcheck_row r = {.id = id, .topic = topic, .state = (uint8_t)st};
    uuid_of(id, r.event_id);
    char v[32];
    snprintf(v, sizeof v, "v%lld", (long long)id);
    r.key = vcheck_digest_bytes(key, strlen(key));
    r.value = vcheck_digest_bytes(v, strlen(v));
    r.headers = vcheck_digest_timestamp(VCHECK_SEED, 1000 + id);
    return r;
}

/* The message the relay would have written for row(id, key, topic). */
static struct vcheck_msg msg(int64_t id, const char *key, uint32_t topic, int32_t part,
                             int64_t offset)
{
    struct vcheck_row r = row(id, key, topic, VCHECK_SENT);
    struct vcheck_msg m = {.topic = topic, .partition = part, .offset = offset,
                           .timestamp = 1000 + id, .has_event_id = true, .has_outbox_id = true,
                           .outbox_id = id, .key = r.key, .value = r.value, .headers = r.headers};
    memcpy(m.event_id, r.event_id, 16);
    return m;
}

static void begin(void)
{
    vcheck_slice_begin(&V, INT64_MIN, INT64_MAX, true, INT64_MIN, INT64_MAX);
}

static void add(struct vcheck_row r)
{
    cr_assert_eq(vcheck_row_add(&V, &r), 0);
}

TestSuite(verify_check, .init = setup, .fini = teardown);

Test(verify_check, clean_run_is_ok)
{
    begin();
    for (int i = 1; i <= 100; i++)
        add(row(i, i % 2 ? "a" : "b", T0, VCHECK_SENT));
    cr_assert_eq(vcheck_slice_index(&V), 0);
    for (int i = 1; i <= 100; i++)
        cr_assert_eq(vcheck_observe(&V, &(struct vcheck_msg){0}), VCHECK_IGNORED);
    for (int i = 1; i <= 100; i++) {
        struct vcheck_msg m = msg(i, i % 2 ? "a" : "b", T0, i % 2, i);
        cr_assert_eq(vcheck_observe(&V, &m), VCHECK_MATCH);
    }
    vcheck_slice_end(&V);
    cr_assert(vcheck_ok(&V));
    cr_assert_eq(V.total.rows, 100);
    cr_assert_eq(V.total.sent, 100);
    cr_assert_eq(V.total.messages, 100);
    cr_assert_eq(V.total.missing + V.total.duplicates + V.total.out_of_order +
                     V.total.mismatched + V.total.unknown, 0);
    cr_assert_eq(V.topics[T0].c.rows, 100);
    cr_assert_eq(V.topics[T1].c.rows, 0);
}

Test(verify_check, sent_without_message_is_missing_pending_is_not)
{
    begin();
    add(row(1, "a", T0, VCHECK_SENT));
    add(row(2, "a", T0, VCHECK_SENT));
    add(row(3, "a", T1, VCHECK_PENDING));
    add(row(4, "a", T1, VCHECK_DEAD));
    vcheck_slice_index(&V);
    struct vcheck_msg m = msg(1, "a", T0, 0, 0);
    vcheck_observe(&V, &m);
    vcheck_slice_end(&V);
    cr_assert_not(vcheck_ok(&V));
    cr_assert_eq(V.total.missing, 1);
    cr_assert_eq(V.total.pending, 1);
    cr_assert_eq(V.total.dead, 1);
    cr_assert_eq(V.topics[T0].c.missing, 1);
    cr_assert_eq(V.topics[T1].c.missing, 0);
    cr_assert_eq(V.n_examples[VCHECK_P_MISSING], 1);
    cr_assert_eq(V.examples[VCHECK_P_MISSING][0].id, 2);
}

Test(verify_check, duplicates_count_event_ids_and_are_not_failures)
{
    begin();
    add(row(1, "a", T0, VCHECK_SENT));
    add(row(2, "a", T0, VCHECK_SENT));
    vcheck_slice_index(&V);
    struct vcheck_msg a = msg(1, "a", T0, 0, 0), b = msg(2, "a", T0, 0, 1);
    cr_assert_eq(vcheck_observe(&V, &a), VCHECK_MATCH);
    cr_assert_eq(vcheck_observe(&V, &b), VCHECK_MATCH);
    /* a replay of both, in order, later in the partition */
    a.offset = 2, b.offset = 3, a.replay = b.replay = true;
    cr_assert_eq(vcheck_observe(&V, &a), VCHECK_DUPLICATE);
    cr_assert_eq(vcheck_observe(&V, &b), VCHECK_DUPLICATE);
    a.offset = 4;
    vcheck_observe(&V, &a);
    vcheck_slice_end(&V);
    cr_assert(vcheck_ok(&V));
    cr_assert_eq(V.total.duplicates, 2);
    cr_assert_eq(V.total.extra_deliveries, 3);
    cr_assert_eq(V.total.replayed, 3);
    cr_assert_eq(V.total.out_of_order, 0, "a replay is not a first delivery");
    cr_assert_eq(V.examples[VCHECK_P_DUPLICATE][0].deliveries, 3);
}

Test(verify_check, out_of_order_first_deliveries_of_one_key)
{
    begin();
    add(row(1, "a", T0, VCHECK_SENT));
    add(row(2, "b", T0, VCHECK_SENT));
    add(row(3, "a", T0, VCHECK_SENT));
    add(row(4, "b", T0, VCHECK_SENT));
    add(row(5, "c", T0, VCHECK_SENT));
    add(row(6, "c", T0, VCHECK_SENT));
    vcheck_slice_index(&V);
    /* a: 3 before 1 in partition 0 (wrong); b: 2 and 4 in order across
     * keys interleaved; c: in different partitions (not comparable). */
    struct vcheck_msg ms[] = {msg(3, "a", T0, 0, 0), msg(2, "b", T0, 0, 1), msg(1, "a", T0, 0, 2),
                              msg(4, "b", T0, 0, 3), msg(6, "c", T0, 1, 0), msg(5, "c", T0, 2, 0)};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        vcheck_observe(&V, &ms[i]);
    vcheck_slice_end(&V);
    cr_assert_eq(V.total.out_of_order, 1);
    cr_assert_not(vcheck_ok(&V));
    const struct vcheck_example *e = &V.examples[VCHECK_P_OUT_OF_ORDER][0];
    cr_assert_eq(e->id, 1);
    cr_assert_eq(e->offset, 2);
    cr_assert_eq(e->other_id, 3);
    cr_assert_eq(e->other_offset, 0);
}

Test(verify_check, mismatch_names_what_differs)
{
    begin();
    add(row(1, "a", T0, VCHECK_SENT));
    add(row(2, "a", T0, VCHECK_SENT));
    add(row(3, "a", T0, VCHECK_SENT));
    vcheck_slice_index(&V);
    struct vcheck_msg m1 = msg(1, "a", T0, 0, 0), m2 = msg(2, "a", T0, 0, 1),
                      m3 = msg(3, "a", T1, 0, 0);
    m1.value = vcheck_digest_bytes(NULL, 0); /* a tombstone where the row has a value */
    m2.key = vcheck_digest_bytes("b", 1);
    m2.headers ^= 1;
    cr_assert_eq(vcheck_observe(&V, &m1), VCHECK_MISMATCH);
    cr_assert_eq(vcheck_observe(&V, &m2), VCHECK_MISMATCH);
    cr_assert_eq(vcheck_observe(&V, &m3), VCHECK_MISMATCH);
    vcheck_slice_end(&V);
    cr_assert_eq(V.total.mismatched, 3);
    cr_assert_eq(V.total.missing, 0, "a mismatched message is still a delivery");
    cr_assert_eq(V.examples[VCHECK_P_MISMATCH][0].diff, VCHECK_DIFF_VALUE);
    cr_assert_eq(V.examples[VCHECK_P_MISMATCH][1].diff, VCHECK_DIFF_KEY | VCHECK_DIFF_HEADERS);
    cr_assert_eq(V.examples[VCHECK_P_MISMATCH][2].diff, VCHECK_DIFF_TOPIC);
    cr_assert_eq(V.topics[T0].c.mismatched, 3, "counted under the row's topic");
}

Test(verify_check, replay_to_another_topic_is_ignored)
{
    begin();
    add(row(1, "a", T0, VCHECK_SENT));
    vcheck_slice_index(&V);
    struct vcheck_msg m = msg(1, "a", T1, 0, 0);
    m.replay = true;
    cr_assert_eq(vcheck_observe(&V, &m), VCHECK_IGNORED);
    vcheck_slice_end(&V);
    cr_assert_eq(V.total.missing, 1);
    cr_assert_eq(V.total.mismatched, 0);
}

Test(verify_check, unknown_only_inside_the_slice_and_window)
{
    /* This slice owns outbox ids 10..19 and timestamps 1000..1100. */
    vcheck_slice_begin(&V, 10, 19, false, 1000, 1100);
    add(row(12, "a", T0, VCHECK_SENT));
    vcheck_slice_index(&V);
    struct vcheck_msg gone = msg(11, "a", T0, 0, 0);     /* deleted by retention */
    struct vcheck_msg older = msg(5, "a", T0, 0, 1);     /* another slice's */
    struct vcheck_msg late = msg(13, "a", T0, 0, 2);
    late.timestamp = 2000;                               /* outside the window */
    struct vcheck_msg anon = msg(14, "a", T0, 0, 3);
    anon.has_outbox_id = false;                          /* judged by the first slice only */
    struct vcheck_msg foreign = msg(15, "a", T0, 0, 4);
    foreign.has_event_id = false;
    struct vcheck_msg ours = msg(12, "a", T0, 0, 5);
    cr_assert_eq(vcheck_observe(&V, &gone), VCHECK_UNKNOWN);
    cr_assert_eq(vcheck_observe(&V, &older), VCHECK_IGNORED);
    cr_assert_eq(vcheck_observe(&V, &late), VCHECK_IGNORED);
    cr_assert_eq(vcheck_observe(&V, &anon), VCHECK_IGNORED);
    cr_assert_eq(vcheck_observe(&V, &foreign), VCHECK_IGNORED);
    cr_assert_eq(vcheck_observe(&V, &ours), VCHECK_MATCH);
    vcheck_slice_end(&V);
    cr_assert(vcheck_ok(&V), "unknown messages are not failures");
    cr_assert_eq(V.total.unknown, 1);
    cr_assert_eq(V.examples[VCHECK_P_UNKNOWN][0].id, 11);
}

Test(verify_check, slices_accumulate_and_examples_are_bounded)
{
    for (int s = 0; s < 3; s++) {
        vcheck_slice_begin(&V, s * 10 + 1, s * 10 + 10, s == 0, INT64_MIN, INT64_MAX);
        for (int i = s * 10 + 1; i <= s * 10 + 10; i++)
            add(row(i, "k", T0, VCHECK_SENT)); /* none delivered */
        vcheck_slice_index(&V);
        vcheck_slice_end(&V);
    }
    cr_assert_eq(V.total.rows, 30);
    cr_assert_eq(V.total.missing, 30);
    cr_assert_eq(V.n_examples[VCHECK_P_MISSING], 3);
    cr_assert_eq(V.examples[VCHECK_P_MISSING][2].id, 3, "the oldest rows are the examples");
}

Test(verify_check, many_rows_index)
{
    begin();
    for (int i = 1; i <= 50000; i++)
        add(row(i, "k", T0, VCHECK_SENT));
    vcheck_slice_index(&V);
    for (int i = 50000; i >= 1; i--) {
        struct vcheck_msg m = msg(i, "k", T0, 0, 50000 - i);
        vcheck_observe(&V, &m);
    }
    vcheck_slice_end(&V);
    cr_assert_eq(V.total.missing, 0);
    cr_assert_eq(V.total.out_of_order, 1, "one aggregate, reversed: counted once");
}

Test(verify_check, digests_and_uuids)
{
    cr_assert_neq(vcheck_digest_bytes(NULL, 0), vcheck_digest_bytes("", 0));
    uint64_t ab_c = vcheck_digest_header(VCHECK_SEED, "ab", 2, "c", 1);
    uint64_t a_bc = vcheck_digest_header(VCHECK_SEED, "a", 1, "bc", 2);
    cr_assert_neq(ab_c, a_bc);
    uint64_t h1 = vcheck_digest_header(vcheck_digest_header(VCHECK_SEED, "x", 1, "1", 1), "y", 1, "2", 1);
    uint64_t h2 = vcheck_digest_header(vcheck_digest_header(VCHECK_SEED, "y", 1, "2", 1), "x", 1, "1", 1);
    cr_assert_neq(h1, h2, "header order matters");
    cr_assert_neq(vcheck_digest_header(VCHECK_SEED, "x", 1, NULL, 0),
                  vcheck_digest_header(VCHECK_SEED, "x", 1, "", 0));

    uint8_t id[16];
    const char *text = "0A1b2C3d-4e5F-6789-abcd-ef0123456789";
    cr_assert(vcheck_uuid_parse(text, strlen(text), id));
    char back[37];
    vcheck_uuid_format(id, back);
    cr_assert_str_eq(back, "0a1b2c3d-4e5f-6789-abcd-ef0123456789");
    cr_assert_not(vcheck_uuid_parse("0a1b2c3d4e5f6789abcdef0123456789", 32, id));
    cr_assert_not(vcheck_uuid_parse("0a1b2c3d-4e5f-6789-abcd-ef012345678g", 36, id));
    cr_assert_not(vcheck_uuid_parse("0a1b2c3d-4e5f-6789-abcd+ef0123456789", 36, id));
}

/* A failover's recovery publishes the rows Kafka does not hold, sent or not
 * (the relay marks none in capture = wal), never a dead one, in id order. */
Test(verify_check, absent_rows_are_listed_in_id_order_dead_ones_aside)
{
    V.want_absent = true;
    begin();
    add(row(1, "a", T0, VCHECK_PENDING));
    add(row(2, "b", T0, VCHECK_PENDING));
    add(row(3, "a", T1, VCHECK_SENT));
    add(row(4, "a", T1, VCHECK_DEAD));
    add(row(5, "b", T0, VCHECK_PENDING));
    vcheck_slice_index(&V);
    struct vcheck_msg m = msg(2, "b", T0, 0, 0);
    vcheck_observe(&V, &m);
    vcheck_slice_end(&V);
    begin();
    add(row(6, "a", T0, VCHECK_PENDING));
    vcheck_slice_index(&V);
    vcheck_slice_end(&V);
    cr_assert_eq(V.n_absent, 4);
    int64_t want[] = {1, 3, 5, 6};
    for (size_t i = 0; i < 4; i++)
        cr_assert_eq(V.absent[i], want[i]);
    cr_assert_not(V.absent_oom);
}

Test(verify_check, absent_rows_are_not_listed_unless_asked)
{
    begin();
    add(row(1, "a", T0, VCHECK_PENDING));
    vcheck_slice_index(&V);
    vcheck_slice_end(&V);
    cr_assert_eq(V.n_absent, 0);
}
