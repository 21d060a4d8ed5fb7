/* test_kafka_stall.c — when the relay gives up on a producer whose
 * transaction waits on a broker that stopped answering. */
#include <criterion/criterion.h>

#include "core/kafka_stall.h"

#define T0 100000u /* the loop's clock, ms */
#define G KAFKA_STALL_GRACE_MS

Test(kafka_stall, a_transaction_that_moved_on_after_a_time_out_is_kept)
{
    struct kafka_stall s = {0};
    kafka_stall_count(&s, 0, T0);
    cr_assert_not(kafka_stall_give_up(&s, true, T0 - 60000, T0), "no request timed out: a slow broker is waited for");
    /* A produce request to the hung leader is cut at T0 and retried on the new
     * leader, which answers at once. */
    kafka_stall_count(&s, 1, T0);
    cr_assert_not(kafka_stall_give_up(&s, true, T0 - 10000, T0 + G - 1), "within the grace");
    cr_assert_not(kafka_stall_give_up(&s, true, T0 + 500, T0 + G), "an acknowledgement since");
    cr_assert_not(kafka_stall_give_up(&s, true, T0 + 500, T0 + G + 499));
    cr_assert_not(kafka_stall_give_up(&s, false, T0 - 10000, T0 + 9000), "nothing waits");
}

Test(kafka_stall, a_transaction_still_held_after_the_grace_is_given_up)
{
    struct kafka_stall s = {0};
    kafka_stall_count(&s, 2, T0 - 50000); /* an old instance's count is not news */
    s = (struct kafka_stall){0};
    kafka_stall_count(&s, 0, T0 - 10000);
    /* The request to the hung coordinator is cut; its lookup goes to the hung
     * broker again, and nothing is acknowledged. */
    kafka_stall_count(&s, 1, T0);
    cr_assert(kafka_stall_give_up(&s, true, T0 - 10000, T0 + G));
    /* The commit began after the cut (the produce went to the new leader),
     * and waits on the coordinator the instance still has. */
    cr_assert_not(kafka_stall_give_up(&s, true, T0 + 800, T0 + G));
    cr_assert(kafka_stall_give_up(&s, true, T0 + 800, T0 + G + 800));
}

Test(kafka_stall, a_time_out_long_past_is_not_about_this_wait)
{
    struct kafka_stall s = {0};
    kafka_stall_count(&s, 1, T0);
    cr_assert(kafka_stall_give_up(&s, true, T0, T0 + 25000));
    cr_assert_not(kafka_stall_give_up(&s, true, T0, T0 + 25001));
    /* The same count read again is no new time-out; a higher one is. */
    kafka_stall_count(&s, 1, T0 + 30000);
    cr_assert_not(kafka_stall_give_up(&s, true, T0, T0 + 40000));
    kafka_stall_count(&s, 3, T0 + 40000);
    cr_assert(kafka_stall_give_up(&s, true, T0 + 30000, T0 + 43000));
    /* A new instance counts from 0 again. */
    kafka_stall_count(&s, 0, T0 + 50000);
    cr_assert(kafka_stall_give_up(&s, true, T0 + 30000, T0 + 50000), "its predecessor's time-out is recent");
    kafka_stall_count(&s, 1, T0 + 60000);
    cr_assert_not(kafka_stall_give_up(&s, true, T0 + 30000, T0 + 60000 + G - 1));
}

/* The coordinator answers CONCURRENT_TRANSACTIONS until the last commit's
 * markers are written; librdkafka asks again every few tens of ms. */
static void retrying(struct kafka_stall *s, uint64_t *adds, uint64_t progress, uint64_t from, uint64_t to)
{
    for (uint64_t t = from; t <= to; t += 1000) {
        *adds += 40;
        kafka_stall_count_adds(s, *adds, progress, t);
    }
}

Test(kafka_stall, a_transaction_behind_a_commit_that_does_not_complete_takes_the_other_id)
{
    struct kafka_stall s = {0};
    uint64_t adds = 5;
    kafka_stall_count_adds(&s, adds, T0, T0);
    retrying(&s, &adds, T0, T0 + 1000, T0 + 11000);
    cr_assert_not(kafka_stall_behind_commit(&s, true, T0 + 11000), "Kafka's fencing takes up to 9 s");
    retrying(&s, &adds, T0, T0 + 12000, T0 + 12000);
    cr_assert(kafka_stall_behind_commit(&s, true, T0 + 12000));
    cr_assert_not(kafka_stall_behind_commit(&s, false, T0 + 12000), "nothing waits");
    cr_assert_not(kafka_stall_behind_commit(&s, true, T0 + 14501), "the retries stopped");
}

Test(kafka_stall, one_transaction_begun_after_a_quiet_spell_is_no_retry_loop)
{
    struct kafka_stall s = {0};
    kafka_stall_count_adds(&s, 10, T0 - 60000, T0 - 60000);
    /* Nothing to relay for a minute, then a row: one AddPartitionsToTxn. */
    kafka_stall_count_adds(&s, 11, T0 - 60000, T0);
    cr_assert_not(kafka_stall_behind_commit(&s, true, T0));
    kafka_stall_count_adds(&s, 11 + KAFKA_STALL_BEHIND_RETRIES - 2, T0 - 60000, T0 + 1000);
    cr_assert_not(kafka_stall_behind_commit(&s, true, T0 + 1000));
}

Test(kafka_stall, progress_starts_the_count_again)
{
    struct kafka_stall s = {0};
    uint64_t adds = 0;
    kafka_stall_count_adds(&s, adds, T0, T0);
    retrying(&s, &adds, T0, T0 + 1000, T0 + 8000);
    /* The markers were written once the stopped broker was fenced: acknowledged. */
    retrying(&s, &adds, T0 + 8500, T0 + 9000, T0 + 9000);
    retrying(&s, &adds, T0 + 8500, T0 + 10000, T0 + 20000);
    cr_assert(kafka_stall_behind_commit(&s, true, T0 + 20500));
    cr_assert_not(kafka_stall_behind_commit(&s, true, T0 + 20499),
                  "12 s from the last progress, not from the first retry");
    /* Jitter of the caller's clock is no progress. */
    kafka_stall_count_adds(&s, adds + 40, T0 + 8650, T0 + 21000);
    cr_assert(kafka_stall_behind_commit(&s, true, T0 + 21000));
    /* A new instance counts from 0. */
    kafka_stall_count_adds(&s, 3, T0 + 8650, T0 + 22000);
    cr_assert_not(kafka_stall_behind_commit(&s, true, T0 + 22000));
}

/* Two of three brokers down: the commit's markers cannot be written for want
 * of in-sync replicas, and the coordinator answers as for a held commit.
 * Another id would wait the same. */
Test(kafka_stall, brokers_lost_during_the_wait_are_no_held_commit)
{
    struct kafka_stall s = {0};
    uint64_t adds = 0;
    for (int32_t b = 1; b <= 3; b++)
        kafka_stall_broker(&s, b, true, T0 - 60000);
    kafka_stall_broker(&s, 4, false, T0 - 60000); /* never connected to */
    kafka_stall_count_adds(&s, adds, T0, T0);
    kafka_stall_broker(&s, 2, false, T0 - 500); /* killed just before the last acknowledgement */
    kafka_stall_broker(&s, 3, false, T0 + 1500);
    retrying(&s, &adds, T0, T0 + 1000, T0 + 30000);
    cr_assert_not(kafka_stall_behind_commit(&s, true, T0 + 30000));
    /* Back: a held commit again, as far as the relay can tell. */
    kafka_stall_broker(&s, 2, true, T0 + 30000);
    kafka_stall_broker(&s, 3, true, T0 + 30000);
    cr_assert(kafka_stall_behind_commit(&s, true, T0 + 30000));
}

Test(kafka_stall, a_connection_lost_long_before_the_wait_is_no_outage)
{
    struct kafka_stall s = {0};
    uint64_t adds = 0;
    kafka_stall_broker(&s, 1, true, T0 + 700000);
    kafka_stall_broker(&s, 2, true, T0 + 700000);
    /* The bootstrap broker leads nothing the relay writes: it closed the idle connection. */
    kafka_stall_broker(&s, 2, false, T0 + 800000);
    kafka_stall_count_adds(&s, adds, T0 + 1400000, T0 + 1400000);
    retrying(&s, &adds, T0 + 1400000, T0 + 1401000, T0 + 1412000);
    cr_assert(kafka_stall_behind_commit(&s, true, T0 + 1412000));
    kafka_stall_broker(&s, 1, false, T0 + 1412000);
    cr_assert_not(kafka_stall_behind_commit(&s, true, T0 + 1412000), "a broker lost during the wait");
}
