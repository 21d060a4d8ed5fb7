/* failover_watch.c — see failover_watch.h. */
#include "core/failover_watch.h"

#include <stdio.h>
#include <string.h>

#include "core/pgoutput.h"

enum failover_verdict failover_judge(const struct failover_watch *w, uint32_t timeline,
                                     bool slot_exists, uint64_t slot_confirmed)
{
    if (w->timeline == 0 || timeline == 0 || timeline == w->timeline)
        return FAILOVER_NONE;
    if (!slot_exists)
        return FAILOVER_SLOT_MISSING;
    return slot_confirmed <= w->confirmed ? FAILOVER_FOLLOWED : FAILOVER_GAP;
}

uint32_t failover_timeline_of(const char *walfile)
{
    if (!walfile || strlen(walfile) < 24)
        return 0;
    uint32_t tl = 0;
    for (int i = 0; i < 8; i++) {
        char c = walfile[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return 0;
        tl = tl << 4 | (uint32_t)d;
    }
    return tl;
}

void failover_describe(enum failover_verdict v, const struct failover_watch *w, uint32_t timeline,
                       const char *slot, uint64_t slot_confirmed, char *out, size_t len)
{
    char at[PGO_LSN_TEXT], from[PGO_LSN_TEXT];
    pgo_lsn_text(w->confirmed, at);
    pgo_lsn_text(slot_confirmed, from);
    switch (v) {
    case FAILOVER_SLOT_MISSING:
        snprintf(out, len,
                 "failover: the server is on timeline %u, this relay streamed on %u; replication "
                 "slot \"%s\" is not on it (before PostgreSQL 17 a slot does not follow a "
                 "failover): events committed after %s were not relayed. Create the slot "
                 "(`outbox-relay migrate`), `outbox-relay verify` and `replay` what is missing, "
                 "then restart the relay",
                 timeline, w->timeline, slot, at);
        return;
    case FAILOVER_GAP:
        snprintf(out, len,
                 "failover: the server is on timeline %u, this relay streamed on %u up to %s; "
                 "replication slot \"%s\" starts at %s: the events between were never relayed. "
                 "`outbox-relay verify` and `replay` what is missing, then restart the relay to "
                 "stream from the slot",
                 timeline, w->timeline, at, slot, from);
        return;
    case FAILOVER_FOLLOWED:
        snprintf(out, len,
                 "failover: the server is on timeline %u, this relay streamed on %u; replication "
                 "slot \"%s\" followed (it starts at %s, this relay confirmed %s)",
                 timeline, w->timeline, slot, from, at);
        return;
    case FAILOVER_NONE:
    default:
        if (len)
            out[0] = '\0';
        return;
    }
}
