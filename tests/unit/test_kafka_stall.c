/* test_kafka_stall.c — when the relay gives up on a producer whose
 * transaction waits on a broker that stopped answering. */
#include <criterion/criterion.h>

#include "core/kafka_stall.h"

#define T0 100000u /* the loop's clock, ms */

Test(kafka_stall, a_transaction_that_moved_on_after_a_time_out_is_kept)
{
    struct kafka_stall s = {0};
    kafka_stall_count(&s, 0, T0);
    cr_assert_not(kafka_stall_give_up(&s, true, T0 - 60000, T0), "no request timed out: a slow broker is waited for");
    /* A produce request to the hung leader is cut at T0 and retried on the new
     * leader, which answers at once. */
    kafka_stall_count(&s, 1, T0);
    cr_assert_not(kafka_stall_give_up(&s, true, T0 - 10000, T0 + 2999), "within the grace");
    cr_assert_not(kafka_stall_give_up(&s, true, T0 + 500, T0 + 3000), "an acknowledgement since");
    cr_assert_not(kafka_stall_give_up(&s, true, T0 + 500, T0 + 3499));
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
    cr_assert(kafka_stall_give_up(&s, true, T0 - 10000, T0 + 3000));
    /* The commit began after the cut (the produce went to the new leader),
     * and waits on the coordinator the instance still has. */
    cr_assert_not(kafka_stall_give_up(&s, true, T0 + 800, T0 + 3000));
    cr_assert(kafka_stall_give_up(&s, true, T0 + 800, T0 + 3800));
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
    cr_assert_not(kafka_stall_give_up(&s, true, T0 + 30000, T0 + 62000));
}
