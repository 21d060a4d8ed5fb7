/* server_watch.c — see server_watch.h. */
#include "core/server_watch.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "core/failover_watch.h"

void server_watch_init(struct server_watch *w, struct stats_server *shown, double now)
{
    memset(w, 0, sizeof(*w));
    memset(shown, 0, sizeof(*shown));
    w->down = true;
    shown->disconnected_since = now;
}

void server_watch_lost(struct server_watch *w, struct stats_server *shown, double now)
{
    if (w->down)
        return;
    w->down = true;
    shown->disconnected_since = now;
    shown->connected_since = 0;
}

void server_watch_attempt(struct server_watch *w, struct stats_server *shown)
{
    if (w->down)
        shown->reconnect_attempts_total++;
}

void server_watch_connected(struct server_watch *w, struct stats_server *shown, const char *host,
                            const char *port, double now)
{
    w->down = false;
    shown->disconnected_since = 0;
    shown->connected_since = now;
    snprintf(shown->host, sizeof shown->host, "%s", host ? host : "");
    snprintf(shown->port, sizeof shown->port, "%s", port ? port : "");
    shown->system_id[0] = '\0';
    shown->timeline = 0;
}

static enum server_change judge(const struct server_watch *w, uint64_t system_id, uint32_t timeline)
{
    if (system_id == 0 || timeline == 0)
        return SERVER_UNKNOWN;
    if (w->system_id == 0)
        return SERVER_FIRST;
    if (system_id != w->system_id)
        return SERVER_OTHER_SYSTEM;
    if (timeline > w->max_timeline)
        return SERVER_FAILOVER;
    return timeline < w->max_timeline ? SERVER_STALE : SERVER_SAME;
}

struct server_news server_watch_identified(struct server_watch *w, struct stats_server *shown,
                                           const char *system_id, const char *walfile, double now)
{
    struct server_news n = { .level = LOG_LVL_INFO };
    uint64_t sys = system_id && *system_id ? strtoull(system_id, NULL, 10) : 0;
    uint32_t tl = failover_timeline_of(walfile);
    snprintf(shown->system_id, sizeof shown->system_id, "%s", sys ? system_id : "");
    shown->timeline = tl;
    n.change = judge(w, sys, tl);
    if (n.change == SERVER_STALE) {
        n.refuse = true;
        snprintf(shown->problem, sizeof shown->problem,
                 "the server at host=%.80s port=%s is on timeline %" PRIu32 " of system %s, and "
                 "this relay saw timeline %" PRIu32 " of it: an old primary that came back "
                 "writable after a promotion (split brain); relaying nothing from it. Demote it "
                 "(standby.signal, or pg_rewind) or take it out of the conninfo",
                 shown->host, shown->port, tl, shown->system_id, w->max_timeline);
        if (w->said != SERVER_STALE) {
            n.say = "postgres server is a stale primary; relaying nothing from it";
            n.level = LOG_LVL_ERROR;
        }
        w->said = SERVER_STALE;
        return n;
    }
    shown->problem[0] = '\0';
    w->said = n.change;
    if (n.change == SERVER_UNKNOWN)
        return n;
    if (n.change == SERVER_FAILOVER) {
        shown->failovers_total++;
        shown->last_failover_time = now;
        n.say = "postgres failover: the server is on a later timeline";
        n.level = LOG_LVL_WARN;
    } else if (n.change == SERVER_OTHER_SYSTEM) {
        n.say = "postgres server is another cluster (another system identifier)";
        n.level = LOG_LVL_WARN;
    }
    w->system_id = sys;
    w->max_timeline = tl;
    return n;
}

double server_watch_down_for(const struct stats_server *shown, double now)
{
    if (shown->disconnected_since <= 0 || now < shown->disconnected_since)
        return 0;
    return now - shown->disconnected_since;
}
