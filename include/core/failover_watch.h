/* failover_watch.h — has the server under log-based capture changed under
 * the relay (a standby promoted: a new timeline)?
 *
 * Before PostgreSQL 17 a logical slot does not follow a failover: on the
 * promoted server it is missing, or it was created there afterwards and
 * starts where it was created, past events the relay never read. Streaming
 * from it would skip them without a word. The relay remembers the timeline
 * it streamed on and the last position it confirmed there; on another
 * timeline it streams again only from a slot that starts no later than that
 * position (a slot that followed), and otherwise names the gap. No I/O: fed
 * by the daemon after each slot query, unit-tested in
 * tests/unit/test_failover_watch.c. */
#ifndef OUTBOX_FAILOVER_WATCH_H
#define OUTBOX_FAILOVER_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A session's first slot query is awaited this long before a stream starts
 * without it (a query that fails must not stop capture for good). */
#define FAILOVER_FIRST_QUERY_WAIT_MS 5000

struct failover_watch {
    uint32_t timeline;     /* where this relay streams; 0 = not known yet */
    uint64_t confirmed;    /* the last position it confirmed there */
    bool checked;          /* a slot query answered on this session */
    bool blocked;          /* a failover left a gap: no stream until a restart */
    uint64_t connected_ms; /* when this session connected */
    int said;              /* the enum failover_verdict logged last */
};

enum failover_verdict {
    FAILOVER_NONE,         /* the same timeline (or none known): nothing changed */
    FAILOVER_FOLLOWED,     /* another timeline, and the slot starts at or before the position */
    FAILOVER_SLOT_MISSING, /* another timeline, no slot */
    FAILOVER_GAP,          /* another timeline, a slot that starts after the position */
};

/** What @p timeline (0: not known, a server in recovery) and the slot
 *  (@p slot_exists, its confirmed_flush_lsn @p slot_confirmed) mean for a
 *  relay that streamed as @p w says. */
enum failover_verdict failover_judge(const struct failover_watch *w, uint32_t timeline,
                                     bool slot_exists, uint64_t slot_confirmed);

/** The timeline in a WAL file name (its first 8 hex digits), 0 if @p walfile is not one. */
uint32_t failover_timeline_of(const char *walfile);

/** Says what @p v means for slot @p slot, naming the gap, into @p out ("" for
 *  FAILOVER_NONE). */
void failover_describe(enum failover_verdict v, const struct failover_watch *w, uint32_t timeline,
                       const char *slot, uint64_t slot_confirmed, char *out, size_t len);

/** A new session: its timeline is read before anything streams on it. */
void failover_watch_connected(struct failover_watch *w, uint64_t now_ms);

/** @return whether no stream may start: a failover left a gap, or the
 *  session's first slot query is awaited (FAILOVER_FIRST_QUERY_WAIT_MS at most). */
bool failover_watch_blocks(const struct failover_watch *w, uint64_t now_ms);

/** What a slot query's answer means, to say and to show. */
struct failover_news {
    enum failover_verdict verdict;
    bool gap;              /* no stream until a restart: readiness shows text */
    const char *say;       /* a line to log now (each verdict once in a row), or NULL */
    int level;             /* ... at this level (base/log.h) */
    char text[384];        /* failover_describe's, as long as readiness shows (stats_slot.problem) */
};

/** A slot query's answer: the server's current @p walfile, the slot
 *  (@p slot_exists, @p slot_confirmed) and what the relay confirmed
 *  (@p confirmed); a gap blocks the stream until a restart. */
struct failover_news failover_watch_seen(struct failover_watch *w, const char *walfile, bool slot_exists,
                                         uint64_t slot_confirmed, uint64_t confirmed, const char *slot);

/* How long before the last confirmed position a reconcile starts reading
 * rows: a row's created_at is its transaction's start, which may come well
 * before its commit, and the clocks of the relay and the server differ. Rows
 * Kafka already holds in that span are read, never sent again. */
#define FAILOVER_RECOVERY_MARGIN_S 900

/** Where a reconcile reads rows from (unix seconds): @p confirmed_at, when
 *  this relay last confirmed a position, else @p started_at (it confirmed
 *  nothing since it started: the slot's position then), less
 *  FAILOVER_RECOVERY_MARGIN_S. */
double failover_recovery_since(double confirmed_at, double started_at);

/** A reconcile closed the gap: the slot now on the server is streamed
 *  from; its timeline and position are taken from the next slot query. */
void failover_watch_recovered(struct failover_watch *w);

/** Can a failover's gap be closed from the outbox table alone? Only when
 *  every event is a row the table still holds: not with @p rows_deleted
 *  (relay.on_sent = delete), @p messages (logical messages are no rows) or
 *  @p app_table (the application decides how long its rows live).
 *  @return true, or false with the reason in @p why. */
bool failover_gap_provable(bool rows_deleted, bool messages, bool app_table, char *why, size_t len);

#endif
