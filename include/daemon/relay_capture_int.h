/* relay_capture_int.h — relay.capture = wal's own state, private to
 * relay_capture*.c (the stream, the slot's queries, dead rows, a failover's
 * recovery): the rest of the daemon reaches it through the interface in
 * relay_int.h only. */
#ifndef OUTBOX_RELAY_CAPTURE_INT_H
#define OUTBOX_RELAY_CAPTURE_INT_H

#include "daemon/relay_int.h"

#include "core/capture_ahead.h"
#include "core/capture_dead.h"
#include "core/capture_plan.h"
#include "core/capture_recover.h"
#include "core/capture_slot.h"
#include "core/failover_watch.h"
#include "core/pgoutput.h"
#include "core/sql_capture.h"
#include "core/wal_event.h"
#include "io/repl.h"

struct capture_recovery;

/* relay.capture = wal: the stream's rules are the plan's (core/capture_plan.h);
 * what is here carries them out. */
struct capture {
    struct sql_capture sql;     /* its statements */
    struct capture_plan plan;   /* what was read, sent, acknowledged, confirmed */
    struct repl_conn repl;
    struct pgo_relations rels;
    struct wal_event ev;
    struct wal_columns cols;    /* relay.column_*: what an Insert is read from */
    struct event_placement placement;
    struct failover_watch failover; /* has the server changed under the stream? */
    struct capture_recover rec; /* relay.slot_recovery: may a gap be closed, and when */
    struct capture_recovery *recovery; /* a reconcile running, off the loop */
    struct dead_queue dead;     /* events to keep as dead rows (relay_capture_dead.c) */
    struct capture_ahead ahead; /* read while a commit runs */
};

/* relay_capture.c (its side of the interface: relay_int.h) */
struct capture_env relay_capture_env(const struct relay *r);
void relay_capture_carry(struct relay *r, struct capture_acts a);

/* relay_capture_slot.c */
void relay_capture_heartbeat(struct relay *r);
void relay_capture_slot_query(struct relay *r);
void relay_capture_retention(struct relay *r);
void relay_capture_take_over(struct relay *r);

/* relay_capture_recover.c */
void relay_capture_recover(struct relay *r);
void relay_capture_recover_drop(struct relay *r);

/* relay_capture_dead.c */
bool relay_capture_dead_queue(struct relay *r, const struct event_row *row, const char *event_id,
                              const char *why);
void relay_capture_dead_record(struct relay *r);

#endif
