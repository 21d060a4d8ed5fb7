/* relay_failover.c — relay.capture = wal: a failover under the stream (a
 * standby promoted, a new timeline) noticed by the slot query before a
 * stream starts on the new server, and the gap it leaves named instead of
 * skipped; the decisions are core/failover_watch.c's. */
#include "daemon/relay_int.h"

/* A session's first slot query is awaited this long before a stream starts
 * without it (a query that fails must not stop capture for good). */
#define FAILOVER_FIRST_QUERY_WAIT_MS 5000

void relay_failover_connected(struct relay *r)
{
    if (!r->cap.on)
        return;
    r->failover.checked = false;
    r->failover.connected_ms = relay_now_ms(r);
    r->cap.slot_query_ms = 0; /* the timeline is read before anything streams */
}

bool relay_failover_blocks(const struct relay *r)
{
    const struct relay_failover *f = &r->failover;
    return f->blocked ||
           (!f->checked &&
            relay_now_ms((struct relay *)r) < f->connected_ms + FAILOVER_FIRST_QUERY_WAIT_MS);
}

void relay_failover_slot_seen(struct relay *r, const char *walfile, bool slot_exists,
                              uint64_t slot_confirmed)
{
    struct relay_failover *f = &r->failover;
    uint32_t timeline = failover_timeline_of(walfile);
    f->checked = true;
    enum failover_verdict v = failover_judge(&f->w, timeline, slot_exists, slot_confirmed);
    if (v == FAILOVER_NONE) {
        if (timeline && !f->blocked) {
            /* Where the stream is: what it confirmed, or the slot it starts from. */
            f->w.timeline = timeline;
            uint64_t at = slot_exists && slot_confirmed > r->cap.confirmed ? slot_confirmed
                                                                          : r->cap.confirmed;
            if (at > f->w.confirmed)
                f->w.confirmed = at;
        }
        return;
    }
    char text[sizeof r->st.slot.problem];
    failover_describe(v, &f->w, timeline, r->cfg->slot, slot_confirmed, text, sizeof text);
    if (v == FAILOVER_FOLLOWED) {
        log_warn("postgres failover; the replication slot followed", "detail=%s",
                 log_quote(text));
        f->w.timeline = timeline;
        f->blocked = false;
        f->said = FAILOVER_NONE;
        return;
    }
    /* Missing or behind: nothing streams in this process any more; /readyz
     * and /status say why until the relay is restarted. */
    f->blocked = true;
    snprintf(r->st.slot.problem, sizeof r->st.slot.problem, "%s", text);
    if (f->said != v)
        log_error("postgres failover; events may be missing", "slot=%s detail=%s", r->cfg->slot,
                  log_quote(text));
    f->said = v;
}
