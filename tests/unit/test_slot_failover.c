/* What relay.slot_failover = on needs of the primary, judged from the rows
 * the server answers (core/slot_failover.c). */
#include <string.h>

#include <criterion/criterion.h>

#include "core/slot_failover.h"

static enum slot_failover_verdict judge(const char *version, const char *standby_slots,
                                        const char *flag, const char *missing,
                                        const char *inactive, bool made, char *out, size_t len)
{
    const char *v[FO_NCOLS] = {[FO_SERVER_VERSION] = version, [FO_STANDBY_SLOTS] = standby_slots,
                               [FO_SLOT_FAILOVER] = flag, [FO_STANDBY_MISSING] = missing,
                               [FO_STANDBY_INACTIVE] = inactive};
    return slot_failover_judge(v, "outbox_relay", made, out, len);
}

Test(slot_failover, refused_before_postgresql_17)
{
    char why[1024];
    cr_assert_eq(judge("160011", "", NULL, NULL, NULL, false, why, sizeof why), SLOT_FAILOVER_REFUSE);
    cr_assert(strstr(why, "needs PostgreSQL 17 or later"), "%s", why);
    cr_assert(strstr(why, "160011"), "%s", why);
    cr_assert_eq(judge("170000", "s1", NULL, NULL, NULL, false, why, sizeof why), SLOT_FAILOVER_OK);
}

Test(slot_failover, names_what_the_primary_lacks)
{
    char why[1024];
    cr_assert_eq(judge("170007", "", NULL, NULL, NULL, false, why, sizeof why), SLOT_FAILOVER_REFUSE);
    cr_assert(strstr(why, "synchronized_standby_slots is not set"), "%s", why);
    cr_assert(strstr(why, "sync_replication_slots = on"), "%s", why);
    cr_assert(strstr(why, "hot_standby_feedback = on"), "%s", why);
    cr_assert(strstr(why, "primary_slot_name"), "%s", why);
    cr_assert(strstr(why, "dbname in primary_conninfo"), "%s", why);

    cr_assert_eq(judge("180001", "sb1, sb2", NULL, "sb2", NULL, false, why, sizeof why),
                 SLOT_FAILOVER_REFUSE);
    cr_assert(strstr(why, "no physical slot of the primary: sb2 "), "%s", why);

    cr_assert_eq(judge("180001", "sb1", "t", NULL, "sb1", true, why, sizeof why), SLOT_FAILOVER_WARN);
    cr_assert(strstr(why, "no standby streams from sb1 yet"), "%s", why);
}

Test(slot_failover, a_slot_made_without_failover_is_refused_once_it_exists)
{
    char why[1024];
    /* Before creation the flag of an older slot is not the question yet. */
    cr_assert_eq(judge("170007", "sb1", "f", NULL, NULL, false, why, sizeof why), SLOT_FAILOVER_OK);
    cr_assert_eq(judge("170007", "sb1", "f", NULL, NULL, true, why, sizeof why), SLOT_FAILOVER_REFUSE);
    cr_assert(strstr(why, "ALTER_REPLICATION_SLOT \"outbox_relay\" (FAILOVER true)"), "%s", why);
    cr_assert_eq(judge("170007", "sb1", "t", NULL, NULL, true, why, sizeof why), SLOT_FAILOVER_OK);
}
