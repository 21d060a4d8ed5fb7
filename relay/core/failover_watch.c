/* failover_watch.c — see failover_watch.h. */
#include "core/failover_watch.h"

#include <stdio.h>
#include <string.h>

#include "base/log.h"
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

void failover_watch_connected(struct failover_watch *w, uint64_t now_ms)
{
    w->checked = false;
    w->connected_ms = now_ms;
}

bool failover_watch_blocks(const struct failover_watch *w, uint64_t now_ms)
{
    return w->blocked || (!w->checked && now_ms < w->connected_ms + FAILOVER_FIRST_QUERY_WAIT_MS);
}

struct failover_news failover_watch_seen(struct failover_watch *w, const char *walfile, bool slot_exists,
                                         uint64_t slot_confirmed, uint64_t confirmed, const char *slot)
{
    struct failover_news n = { 0 };
    uint32_t timeline = failover_timeline_of(walfile);
    w->checked = true;
    /* Slot queries are periodic; what the relay confirmed after the last one
     * moved the slot too, and a standby that synchronises the slot may hold
     * it there when promoted: that position is not a gap. */
    if (w->timeline && !w->blocked && confirmed > w->confirmed)
        w->confirmed = confirmed;
    enum failover_verdict v = n.verdict = failover_judge(w, timeline, slot_exists, slot_confirmed);
    failover_describe(v, w, timeline, slot, slot_confirmed, n.text, sizeof n.text);
    if (v == FAILOVER_NONE) {
        if (timeline && !w->blocked) {
            /* Where the stream is: what it confirmed, or the slot it starts from. */
            w->timeline = timeline;
            uint64_t at = slot_exists && slot_confirmed > confirmed ? slot_confirmed : confirmed;
            if (at > w->confirmed)
                w->confirmed = at;
        }
        return n;
    }
    if (v == FAILOVER_FOLLOWED) {
        w->timeline = timeline;
        w->blocked = false;
        w->said = FAILOVER_NONE;
        n.say = "postgres failover; the replication slot followed";
        n.level = LOG_LVL_WARN;
        return n;
    }
    /* Missing or behind: nothing streams in this process any more. */
    w->blocked = n.gap = true;
    if (w->said != (int)v)
        n.say = "postgres failover; events may be missing";
    n.level = LOG_LVL_ERROR;
    w->said = (int)v;
    return n;
}

bool failover_gap_provable(bool rows_deleted, bool messages, bool app_table, char *why, size_t len)
{
    const char *no = rows_deleted ? "relay.on_sent = delete removes rows once relayed, so the "
                                    "table cannot show what Kafka lacks"
                     : messages   ? "relay.message_prefix is set: logical messages are not rows, "
                                    "and those in the gap are gone with the old slot"
                     : app_table  ? "relay.profile = debezium: the application decides how long "
                                    "its rows stay in the table"
                                  : NULL;
    if (len)
        snprintf(why, len, "%s", no ? no : "");
    return no == NULL;
}

double failover_recovery_since(double confirmed_at, double started_at)
{
    double at = confirmed_at > 0 ? confirmed_at : started_at;
    return at - FAILOVER_RECOVERY_MARGIN_S;
}

void failover_watch_recovered(struct failover_watch *w)
{
    w->blocked = false;
    w->timeline = 0;
    w->said = FAILOVER_NONE;
}
