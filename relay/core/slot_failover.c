/* slot_failover.c — relay.slot_failover = on judged from the primary's
 * answers. A failover slot is synchronised to the standbys that ask for it,
 * but it is safe only when the primary holds the logical slot back until
 * those standbys have the WAL (synchronized_standby_slots): otherwise Kafka
 * can receive an event that the promoted standby never had. */
#include "core/slot_failover.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What every standby that is to keep the slot needs; the primary cannot see it. */
static const char standby_needs[] =
    "each standby needs primary_slot_name = (one of synchronized_standby_slots), "
    "hot_standby_feedback = on, sync_replication_slots = on and a dbname in primary_conninfo";

enum slot_failover_verdict slot_failover_judge(const char *const v[FO_NCOLS], const char *slot,
                                               bool slot_made, char *out, size_t len)
{
    long version = v[FO_SERVER_VERSION] ? strtol(v[FO_SERVER_VERSION], NULL, 10) : 0;
    if (version < SLOT_FAILOVER_MIN_VERSION) {
        snprintf(out, len,
                 "relay.slot_failover = on needs PostgreSQL 17 or later (failover slots); the "
                 "server is %ld: set relay.slot_failover = off (a failover then takes "
                 "relay.slot_recovery)",
                 version);
        return SLOT_FAILOVER_REFUSE;
    }
    if (slot_made && v[FO_SLOT_FAILOVER] && v[FO_SLOT_FAILOVER][0] == 'f') {
        snprintf(out, len,
                 "the slot %s exists without failover (made while relay.slot_failover was off): "
                 "with no relay running, turn it on over a replication connection "
                 "(psql \"dbname=... replication=database\" -c 'ALTER_REPLICATION_SLOT \"%s\" "
                 "(FAILOVER true)'), then run migrate again",
                 slot, slot);
        return SLOT_FAILOVER_REFUSE;
    }
    const char *standby_slots = v[FO_STANDBY_SLOTS] ? v[FO_STANDBY_SLOTS] : "";
    if (!*standby_slots) {
        snprintf(out, len,
                 "synchronized_standby_slots is not set on the primary: the slot could then "
                 "confirm changes no standby has, and after a failover Kafka would hold events "
                 "the promoted server never committed; set it to the physical slots of the "
                 "standbys that keep the slot, and %s",
                 standby_needs);
        return SLOT_FAILOVER_REFUSE;
    }
    if (v[FO_STANDBY_MISSING] && *v[FO_STANDBY_MISSING]) {
        snprintf(out, len,
                 "synchronized_standby_slots names slots that are no physical slot of the "
                 "primary: %s (the relay's stream would wait for them): create them "
                 "(pg_create_physical_replication_slot) or correct the setting, and %s",
                 v[FO_STANDBY_MISSING], standby_needs);
        return SLOT_FAILOVER_REFUSE;
    }
    if (v[FO_STANDBY_INACTIVE] && *v[FO_STANDBY_INACTIVE]) {
        snprintf(out, len,
                 "no standby streams from %s yet: the relay's stream waits until one does; %s",
                 v[FO_STANDBY_INACTIVE], standby_needs);
        return SLOT_FAILOVER_WARN;
    }
    snprintf(out, len, "synchronized_standby_slots = %s; %s", standby_slots, standby_needs);
    return SLOT_FAILOVER_OK;
}
