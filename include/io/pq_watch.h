/* pq_watch.h — a libpq connection's socket watched on the libuv loop.
 *
 * libpq says which direction it waits for; the owner asks for those events
 * here. libpq may replace the socket (another address of a host while it
 * connects, a reconnect), perhaps under the same descriptor number, which
 * epoll forgot when the old socket closed; and uv refuses to watch a new fd
 * with an old handle. So a socket is known by its number and its inode, and
 * a changed one gets a new handle, the old one stopped and closed first;
 * handles are allocated and freed in their close callback, so a closing one
 * is never reused. Shared by pg.c (the statements' connection), repl.c (the
 * replication stream) and pg_attempt.c (connecting). */
#ifndef OUTBOX_PQ_WATCH_H
#define OUTBOX_PQ_WATCH_H

#include <libpq-fe.h>
#include <sys/types.h>
#include <uv.h>

struct pq_watch {
    uv_loop_t *loop;
    uv_poll_t *poll;      /* NULL while nothing is watched */
    int fd;
    dev_t dev;            /* with ino: which socket fd is */
    ino_t ino;
    int events;
    uv_poll_cb cb;        /* called with poll->data = data */
    void *data;
};

/** Prepares @p w; watches nothing yet. */
void pq_watch_init(struct pq_watch *w, uv_loop_t *loop, uv_poll_cb cb, void *data);

/** Watches @p conn's current socket for @p events (UV_READABLE,
 *  UV_WRITABLE; 0 stops watching but keeps the handle); call it after every
 *  PQconnectPoll, the socket may be another.
 *  @return 1 when that is a socket not watched before, 0 when it is the same,
 *  -EBADF without a socket, or a uv error. */
int pq_watch_set(struct pq_watch *w, PGconn *conn, int events);

/** Why @p conn's socket failed when the loop reported @p status for it:
 *  libuv puts any error on a socket (a reset, say) as UV_EBADF, which says
 *  nothing of the cause; libpq reading the socket does (behind what the
 *  server sent before the error), else the socket's pending error.
 *  @return libpq's message, the socket's error, or a plain sentence. */
const char *pq_watch_failure(PGconn *conn, int status);

/** Stops and releases the handle. */
void pq_watch_drop(struct pq_watch *w);

/** @return true when @p h is the handle of @p w (a late callback of a
 *  dropped one is not). */
static inline int pq_watch_is(const struct pq_watch *w, const uv_poll_t *h)
{
    return w->poll == h;
}

#endif
