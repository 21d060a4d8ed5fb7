/* test_capture_dead.c — core/capture_dead.c: the events waiting to be kept
 * as dead rows leave in the stream's order, one written at a time, a failed
 * write waits or halts, a lost stream drops all but the one being written;
 * and what such an event is called. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/capture_dead.h"
#include "core/event.h"
#include "core/wal_event.h"

static struct capture_dead *push(struct dead_queue *q, int64_t id)
{
    char event_id[32];
    snprintf(event_id, sizeof event_id, "e%lld", (long long)id);
    struct event_row row = {.id = id, .aggregate_type = "order", .aggregate_id = "7",
                            .event_type = "created", .payload = "{}", .payload_len = 2};
    return dead_queue_push(q, id ? &row : NULL, event_id, "invalid topic");
}

Test(capture_dead, the_oldest_leaves_first_and_the_queue_grows)
{
    struct dead_queue q = {0};
    for (int64_t id = 1; id <= 20; id++)
        cr_assert_not_null(push(&q, id));
    cr_assert_eq(q.n, 20);
    for (int64_t id = 1; id <= 20; id++) {
        char want[32];
        snprintf(want, sizeof want, "e%lld", (long long)id);
        cr_assert_eq(q.v[0].outbox_id, id);
        cr_assert_str_eq(q.v[0].params[0], want);
        cr_assert_str_eq(q.v[0].params[8], "invalid topic");
        dead_queue_pop(&q);
    }
    cr_assert_eq(q.n, 0);
    dead_queue_pop(&q); /* an empty queue stays empty */
    cr_assert_eq(q.n, 0);
    dead_queue_free(&q);
}

Test(capture_dead, a_logical_message_keeps_what_is_known)
{
    struct dead_queue q = {0};
    struct capture_dead *d = push(&q, 0);
    cr_assert_not_null(d);
    cr_assert_eq(d->outbox_id, 0);
    cr_assert_str_eq(d->params[1], "", "no aggregate type");
    cr_assert_null(d->params[5], "no payload");
    dead_queue_free(&q);
    cr_assert_eq(q.n, 0);
    cr_assert_null(q.v);
}

Test(capture_dead, one_is_written_at_a_time_and_a_failure_waits)
{
    struct dead_queue q = {0};
    cr_assert_not(dead_queue_due(&q, 0), "nothing queued");
    push(&q, 1);
    cr_assert(dead_queue_due(&q, 0));
    q.sending = true;
    cr_assert_not(dead_queue_due(&q, 0), "one being written");
    q.sending = false;
    q.retry_ms = 1000;
    cr_assert_not(dead_queue_due(&q, 999), "a failed write waits");
    cr_assert(dead_queue_due(&q, 1000));
    dead_queue_free(&q);
}

Test(capture_dead, a_lost_stream_drops_all_but_the_one_being_written)
{
    struct dead_queue q = {0};
    for (int64_t id = 1; id <= 3; id++)
        push(&q, id);
    q.sending = true;
    dead_queue_clear(&q);
    cr_assert_eq(q.n, 1);
    cr_assert_eq(q.v[0].outbox_id, 1, "the one being written finishes");
    cr_assert_str_eq(q.v[0].params[0], "e1");
    q.sending = false;
    push(&q, 4);
    dead_queue_clear(&q);
    cr_assert_eq(q.n, 0, "none being written: all go");
    dead_queue_free(&q);
}

Test(capture_dead, a_failed_write_waits_a_second_and_halts_only_when_it_will_not_pass)
{
    struct dead_queue q = {0};
    char reason[512] = "";
    push(&q, 1);
    q.sending = false;
    cr_assert_not(dead_queue_failed(&q, "08006", 5000, reason, sizeof reason), "a lost connection");
    cr_assert_not(dead_queue_due(&q, 5000 + CAPTURE_DEAD_RETRY_MS - 1));
    cr_assert(dead_queue_due(&q, 5000 + CAPTURE_DEAD_RETRY_MS));
    cr_assert_not(dead_queue_failed(&q, "40001", 6000, reason, sizeof reason), "a conflict");
    cr_assert(dead_queue_failed(&q, "42501", 7000, reason, sizeof reason), "no privilege");
    cr_assert(strstr(reason, "event e1 cannot be produced (invalid topic)"), "%s", reason);
    cr_assert(strstr(reason, "INSERT and UPDATE"), "%s", reason);
    cr_assert_eq(q.retry_ms, 7000 + CAPTURE_DEAD_RETRY_MS);
    dead_queue_free(&q);
}

Test(capture_dead, an_event_that_cannot_be_produced_is_named_by_its_id_or_its_lsn)
{
    struct capture_poison p;
    char halt[512];
    capture_poison_name(&p, "0190aa5e-0000-7000-8000-000000000001", 0x16B3748, "invalid topic");
    cr_assert_str_eq(p.at, "0/16B3748");
    cr_assert_str_eq(p.event_id, "0190aa5e-0000-7000-8000-000000000001");
    cr_assert_str_eq(p.reason, "invalid topic (at LSN 0/16B3748)");
    capture_poison_halt_reason(&p, 42, "invalid topic", halt, sizeof halt);
    cr_assert_str_eq(halt, "event at LSN 0/16B3748 (outbox_id 42, event_id "
                           "0190aa5e-0000-7000-8000-000000000001) cannot be produced: invalid topic");

    /* a logical message, or a row without an event id: the id its LSN gives */
    capture_poison_name(&p, "", 0x16B3748, "not an envelope");
    cr_assert_eq(p.event_id, p.lsn_id);
    char want[PGB_UUID_TEXT];
    wal_event_lsn_id(0x16B3748, want);
    cr_assert_str_eq(p.event_id, want);
    capture_poison_name(&p, NULL, 0x16B3748, "not an envelope");
    cr_assert_str_eq(p.event_id, want);
    capture_poison_halt_reason(&p, 0, "out of memory keeping it as a dead row", halt, sizeof halt);
    cr_assert(strstr(halt, "(outbox_id 0, event_id "), "%s", halt);
}
