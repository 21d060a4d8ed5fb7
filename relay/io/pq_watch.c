/* pq_watch.c — a libpq socket on a uv_poll_t; see pq_watch.h. */
#include "io/pq_watch.h"

#include <errno.h>
#include <stdlib.h>

static void close_free_cb(uv_handle_t *h)
{
    free(h);
}

void pq_watch_init(struct pq_watch *w, uv_loop_t *loop, uv_poll_cb cb, void *data)
{
    w->loop = loop;
    w->poll = NULL;
    w->fd = -1;
    w->events = 0;
    w->cb = cb;
    w->data = data;
}

void pq_watch_drop(struct pq_watch *w)
{
    if (w->poll) {
        uv_poll_stop(w->poll);
        uv_close((uv_handle_t *)w->poll, close_free_cb);
        w->poll = NULL;
    }
    w->fd = -1;
    w->events = 0;
}

int pq_watch_set(struct pq_watch *w, PGconn *conn, int events)
{
    int fd = PQsocket(conn);
    if (fd < 0)
        return -EBADF;
    if (w->poll && fd != w->fd)
        pq_watch_drop(w);
    if (!w->poll) {
        w->poll = malloc(sizeof(*w->poll));
        if (!w->poll)
            return -ENOMEM;
        int rc = uv_poll_init(w->loop, w->poll, fd);
        if (rc < 0) {
            free(w->poll);
            w->poll = NULL;
            return rc;
        }
        w->poll->data = w->data;
        w->fd = fd;
        w->events = 0;
    }
    if (events == w->events)
        return 0;
    int rc = events ? uv_poll_start(w->poll, events, w->cb) : uv_poll_stop(w->poll);
    if (rc == 0)
        w->events = events;
    return rc;
}
