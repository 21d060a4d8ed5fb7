/* standby_watch.h — does the leader a standby waits for make progress?
 *
 * A standby sees the table, not the leader: rows waiting (the oldest unsent
 * row's age) and the table's count of updated and deleted rows, which grows
 * with every mark or delete of a sent row. Rows that wait while that count
 * stands still for longer than the limit mean nobody relays them — a leader
 * that hangs, or a lock kept by a session that is no relay — and the standby
 * says so instead of standing by silently for ever. No I/O: fed by the daemon
 * after each holder query, unit-tested in tests/unit/test_standby_watch.c. */
#ifndef OUTBOX_STANDBY_WATCH_H
#define OUTBOX_STANDBY_WATCH_H

#include <stdbool.h>
#include <stdint.h>

struct standby_watch {
    bool watching;         /* rows wait and the count has been seen */
    int64_t progress;      /* the table's updated + deleted rows when last changed */
    double since;          /* when rows waited with that count (seconds, any clock) */
    double oldest_age;     /* the oldest waiting row's age at the last observation */
};

/** Starts over: nothing seen. */
void standby_watch_reset(struct standby_watch *w);

/** One observation at @p now: @p oldest_age is the oldest waiting row's age
 *  in seconds, negative when no row waits; @p progress the table's updated +
 *  deleted rows (negative: not known, which ends the watch). */
void standby_watch_feed(struct standby_watch *w, double now, double oldest_age, int64_t progress);

/** @return how long rows have waited with no progress at @p now, 0 when not watching. */
double standby_watch_stalled_for(const struct standby_watch *w, double now);

/** @return whether that is at least @p limit_s (a limit <= 0 never trips). */
bool standby_watch_stalled(const struct standby_watch *w, double now, double limit_s);

#endif
