/* repl.h — a logical replication connection (replication=database) on the
 * libuv loop: connect, START_REPLICATION, then CopyData both ways.
 *
 * Each CopyData message from the server goes to on_data, which may decline
 * it (the producer cannot take more now): reading then stops, the message is
 * kept, and repl_resume() offers it again. While reading is stopped nothing
 * more is read from the socket, so a large transaction waits in the server's
 * walsender and the kernel's buffers, not in our memory. */
#ifndef OUTBOX_REPL_H
#define OUTBOX_REPL_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "io/pg_attempt.h"
#include "io/pq_watch.h"

struct repl_conn;

struct repl_callbacks {
    /** START_REPLICATION was accepted: CopyData follows. */
    void (*on_streaming)(struct repl_conn *rc, void *arg);
    /** One CopyData payload. @return true when taken, false to stop reading
     *  until repl_resume() (the same payload is offered again then). */
    bool (*on_data)(struct repl_conn *rc, const uint8_t *buf, size_t len, void *arg);
    /** What the socket held is read: a moment to act on what came (commit). */
    void (*on_idle)(struct repl_conn *rc, void *arg);
    /** The connection or the stream ended (never called after repl_close):
     *  @p why says why, @p sqlstate is the server's code or "". */
    void (*on_lost)(struct repl_conn *rc, const char *why, const char *sqlstate, void *arg);
    void *arg;
};

enum repl_state { REPL_OFF = 0, REPL_CONNECTING, REPL_STARTING, REPL_STREAMING, REPL_ENDING };

struct repl_conn {
    uv_loop_t *loop;
    PGconn *conn;
    struct pq_watch w;        /* its socket on the loop */
    struct pg_attempt att;    /* connecting: the hosts of the list in turn */
    uv_timer_t *kick;         /* resumes reading outside the caller's stack */
    enum repl_state state;
    bool stopped;             /* on_data declined: not reading */
    char *held;               /* the declined payload (libpq's buffer), offered again */
    int held_len;
    struct repl_callbacks cb;
    char *conninfo;
    char *start_sql;
};

/** Prepares @p rc; does not connect. @return 0 or -ENOMEM. */
int repl_init(struct repl_conn *rc, uv_loop_t *loop, const char *conninfo,
              const struct repl_callbacks *cb);

/** Connects with replication=database and sends @p start_sql (a
 *  START_REPLICATION command). @return 0 (on_streaming or on_lost follows),
 *  -EALREADY, -ENOMEM, -EIO (libpq could not start; on_lost is not called). */
int repl_start(struct repl_conn *rc, const char *start_sql);

/** Queues one CopyData message to the server and flushes what the socket
 *  takes. @return 0, -ENOTCONN, -EIO (the connection is then lost). */
int repl_send(struct repl_conn *rc, const uint8_t *buf, size_t len);

/** Ends the stream the way the protocol does (CopyDone), so that the server
 *  reads every status update sent before it: closing the socket with data
 *  unread would reset the connection and could lose the last one. What the
 *  server still sends is discarded; on_lost follows when it ended.
 *  @return 0, or -ENOTCONN when not streaming (nothing follows). */
int repl_end(struct repl_conn *rc);

/** Reading stopped by on_data goes on (soon, from the loop). */
void repl_resume(struct repl_conn *rc);

/** The same, @p ms from now (from on_data, which then declines the message). */
void repl_resume_after(struct repl_conn *rc, uint64_t ms);

/** Reading goes on, stopped or not, and on_idle follows once the socket is
 *  empty again: for an owner that took messages outside on_data (read
 *  ahead) and acts on_idle. Not from on_idle itself: that would never end. */
void repl_kick(struct repl_conn *rc);

/** Drops the connection; no callback follows. */
void repl_close(struct repl_conn *rc);

/** repl_close, then frees what repl_init allocated. */
void repl_free(struct repl_conn *rc);

#endif
