/* pq_watch.h — a libpq connection's socket watched on the libuv loop.
 *
 * libpq says which direction it waits for; the owner asks for those events
 * here. libpq may replace the socket (another host of a multi-host conninfo,
 * a reconnect), and uv refuses to watch a new fd with an old handle, so a
 * changed fd gets a new handle; handles are allocated and freed in their
 * close callback, so a closing one is never reused. Shared by pg.c (the
 * statements' connection) and repl.c (the replication stream). */
#ifndef OUTBOX_PQ_WATCH_H
#define OUTBOX_PQ_WATCH_H

#include <libpq-fe.h>
#include <uv.h>

struct pq_watch {
    uv_loop_t *loop;
    uv_poll_t *poll;      /* NULL while nothing is watched */
    int fd;
    int events;
    uv_poll_cb cb;        /* called with poll->data = data */
    void *data;
};

/** Prepares @p w; watches nothing yet. */
void pq_watch_init(struct pq_watch *w, uv_loop_t *loop, uv_poll_cb cb, void *data);

/** Watches @p conn's current socket for @p events (UV_READABLE,
 *  UV_WRITABLE; 0 stops watching but keeps the handle).
 *  @return 0, -EBADF without a socket, or a uv error. */
int pq_watch_set(struct pq_watch *w, PGconn *conn, int events);

/** Stops and releases the handle. */
void pq_watch_drop(struct pq_watch *w);

/** @return true when @p h is the handle of @p w (a late callback of a
 *  dropped one is not). */
static inline int pq_watch_is(const struct pq_watch *w, const uv_poll_t *h)
{
    return w->poll == h;
}

#endif
