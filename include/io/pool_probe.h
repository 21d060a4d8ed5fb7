/* pool_probe.h — before relaying: is this connection's server session its own?
 *
 * The leader lock is a session advisory lock; a pooler that hands one client
 * connection's statements to several server sessions (PgBouncer's
 * pool_mode=transaction or statement) cannot elect one leader, and two
 * relays behind it may both stand by for ever. A transaction pooler hands an
 * idle server session to the next client that asks, so a second connection
 * whose statement sees the first one's session state (or backend pid) proves
 * the sessions are shared. Session pooling and direct connections never do.
 * Which session a pooler hands out depends on its other clients, so that
 * proof can be missed; statement pooling is also known, whatever the timing,
 * by its refusal of a transaction block. */
#ifndef OUTBOX_POOL_PROBE_H
#define OUTBOX_POOL_PROBE_H

#include <stddef.h>

enum pool_probe_result {
    POOL_PROBE_UNKNOWN = -1,   /* could not connect or a statement failed: decided later */
    POOL_PROBE_OWN = 0,        /* the connection keeps a server session of its own */
    POOL_PROBE_SHARED = 1,     /* server sessions are shared between client connections */
};

/** Probes @p conninfo with two blocking connections (a transaction block,
 * then a few rounds of one statement each). Connections whose server
 * announces the backend it runs are direct and not probed further.
 * @return the verdict; for POOL_PROBE_SHARED and POOL_PROBE_UNKNOWN @p why
 * says what was seen (SHARED: the cause and the fix, one sentence). */
enum pool_probe_result pool_probe(const char *conninfo, char *why, size_t len);

#endif
