/* server_watch.h — which PostgreSQL server the relay is on, and what a new
 * session's server means after the last one: the same server, a failover (a
 * standby promoted: the same system, a later timeline), another cluster, or
 * a stale primary (the same system on an earlier timeline than one the relay
 * already saw: an old primary that came back writable after a promotion,
 * split brain). The last is refused: its rows are on a fork of the history
 * that the promoted server does not have, and publishing them would put
 * events in Kafka for commits that a rewind of that server discards.
 *
 * Also what operators see of the connection: since when it is down, and the
 * connects tried meanwhile. No I/O: fed by the daemon at each connect, loss
 * and session check, unit-tested in tests/unit/test_server_watch.c; what it
 * decides is written to struct stats_server for /status and /metrics. */
#ifndef OUTBOX_SERVER_WATCH_H
#define OUTBOX_SERVER_WATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/stats.h"

struct server_watch {
    uint64_t system_id;    /* of the server last identified; 0 = none yet */
    uint32_t max_timeline; /* the latest timeline seen of that system */
    bool down;             /* no session since the last loss (or since the start) */
    int said;              /* the enum server_change logged last */
};

enum server_change {
    SERVER_UNKNOWN,        /* the server did not say (a standby has no timeline) */
    SERVER_FIRST,          /* the first server this process identified */
    SERVER_SAME,           /* the same system and timeline as before */
    SERVER_FAILOVER,       /* the same system on a later timeline: a promotion */
    SERVER_OTHER_SYSTEM,   /* another system identifier: another cluster */
    SERVER_STALE,          /* the same system on an earlier timeline: refused */
};

/** What to log and show about a session's server. */
struct server_news {
    enum server_change change;
    bool refuse;           /* relay nothing on this session (SERVER_STALE) */
    const char *say;       /* a line to log now, or NULL */
    int level;             /* ... at this level (base/log.h) */
};

/** Starts down, nothing known; @p shown zeroed but for the disconnection's
 *  start, @p now (unix seconds). */
void server_watch_init(struct server_watch *w, struct stats_server *shown, double now);

/** A session was lost (or a connect failed) at @p now: down from then on,
 *  unless it already was. */
void server_watch_lost(struct server_watch *w, struct stats_server *shown, double now);

/** A connect is tried while down (each round through the host list). */
void server_watch_attempt(struct server_watch *w, struct stats_server *shown);

/** A session connected to @p host and @p port at @p now: up, the server's
 *  identity not read yet. */
void server_watch_connected(struct server_watch *w, struct stats_server *shown, const char *host,
                            const char *port, double now);

/** The session's server said its @p system_id (decimal text, NULL or "" when
 *  not known) and @p walfile (its current WAL file's name, NULL on a server
 *  in recovery), at @p now: what it means. A stale primary is refused, and said once in
 *  a row; shown->problem says why until a session on another server. */
struct server_news server_watch_identified(struct server_watch *w, struct stats_server *shown,
                                           const char *system_id, const char *walfile, double now);

/** @return seconds the relay has been without a session at @p now, 0 while
 *  it has one. */
double server_watch_down_for(const struct stats_server *shown, double now);

#endif
