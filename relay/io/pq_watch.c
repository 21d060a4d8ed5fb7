/* pq_watch.c — a libpq socket on a uv_poll_t; see pq_watch.h. */
#include "io/pq_watch.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

static void close_free_cb(uv_handle_t *h)
{
    free(h);
}

void pq_watch_init(struct pq_watch *w, uv_loop_t *loop, uv_poll_cb cb, void *data)
{
    w->loop = loop;
    w->poll = NULL;
    w->fd = -1;
    w->dev = 0;
    w->ino = 0;
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
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return -EBADF;
    /* The number alone does not tell: libpq may have closed the socket and
     * opened another under it, which epoll then no longer watches. The inode
     * names the socket itself. */
    if (w->poll && (fd != w->fd || st.st_dev != w->dev || st.st_ino != w->ino))
        pq_watch_drop(w);
    int renewed = 0;
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
        w->dev = st.st_dev;
        w->ino = st.st_ino;
        w->events = 0;
        renewed = 1;
    }
    if (events == w->events)
        return renewed;
    int rc = events ? uv_poll_start(w->poll, events, w->cb) : uv_poll_stop(w->poll);
    if (rc == 0)
        w->events = events;
    return rc < 0 ? rc : renewed;
}

const char *pq_watch_failure(PGconn *conn, int status)
{
    if (conn && !PQconsumeInput(conn)) {
        const char *why = PQerrorMessage(conn);
        if (why && *why)
            return why;
    }
    return uv_strerror(status);
}
