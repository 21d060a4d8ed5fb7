/* pg_attempt.h — one asynchronous connect that walks a conninfo's host list.
 *
 * PQconnectPoll does not enforce connect_timeout (only PQconnectdb does), and
 * while it walks a multi-host list it closes one host's socket and opens the
 * next, often under the same descriptor number. So the hosts are tried here
 * one at a time, each its own PGconn with only that host's host, hostaddr and
 * port, each under a timer of the conninfo's connect_timeout (a default when
 * it sets none: a host that accepts and never answers would hold the relay
 * for ever), each failure logged with the host and port and why. Within one
 * host libpq may still move between its addresses: the socket is checked
 * after every PQconnectPoll (pq_watch_set). Used by pg.c and repl.c. */
#ifndef OUTBOX_PG_ATTEMPT_H
#define OUTBOX_PG_ATTEMPT_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <uv.h>

#include "io/pq_watch.h"

/** Per host, when the conninfo sets no connect_timeout (seconds). */
#define PG_ATTEMPT_DEFAULT_TIMEOUT_S 10

/** The end of an attempt: @p conn connected (now the caller's; the watch
 *  still on its socket), or NULL with @p why (redacted) after every host
 *  failed. */
typedef void (*pg_attempt_cb)(PGconn *conn, const char *why, void *arg);

struct pg_attempt {
    uv_loop_t *loop;
    struct pq_watch *w;       /* the owner's: the socket of the host being tried */
    uv_timer_t *timer;        /* the host's connect_timeout */
    PGconn *conn;             /* the host being tried; NULL between attempts */
    const char *conninfo;     /* the owner's */
    bool replication;
    int host;                 /* index in the list */
    int n_hosts;              /* 1: the conninfo's hosts as they are */
    int pass;                 /* prefer-standby: standbys first, then any */
    int n_passes;
    unsigned timeout_ms;      /* per host */
    char label[160];          /* host:port being tried, for the logs */
    char why[512];            /* the last host's failure */
    pg_attempt_cb done;
    void *arg;
};

/** Prepares @p a for @p conninfo (kept by the caller) and the owner's watch
 *  @p w. @return 0 or -ENOMEM. */
int pg_attempt_init(struct pg_attempt *a, uv_loop_t *loop, struct pq_watch *w,
                    const char *conninfo, bool replication, pg_attempt_cb done, void *arg);

/** Starts with the first host. @return 0 (done follows, never from within
 *  this call), or -EIO when no host could even start (logged; done is not
 *  called). */
int pg_attempt_start(struct pg_attempt *a);

/** The watched socket is ready: PQconnectPoll, then the next direction, the
 *  next host, or done. */
void pg_attempt_step(struct pg_attempt *a);

/** Abandons the attempt: its connection closed, no callback. */
void pg_attempt_cancel(struct pg_attempt *a);

/** pg_attempt_cancel, then releases the timer. */
void pg_attempt_free(struct pg_attempt *a);

/** @return true while an attempt is under way. */
bool pg_attempt_running(const struct pg_attempt *a);

/** PQconnectStartParams of host @p host of @p conninfo's list (every host
 *  when -1), named "outbox-relay" in pg_stat_activity unless it sets
 *  application_name; with @p replication a logical replication connection
 *  (replication=database); @p tsa, when not NULL, in place of its
 *  target_session_attrs. NULL without memory. */
PGconn *pg_connect_start(const char *conninfo, bool replication, int host, const char *tsa);

#endif
