/* pq_watch.c — a libpq socket on a uv_poll_t; see pq_watch.h. */
#include "io/pq_watch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

/* Reads of what is left on a failed socket before its error is reached. */
#define PQ_WATCH_FAILURE_READS 8

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
    /* What the server sent before the reset is read first (libuv reports
     * the error with the data still unread): the error comes behind it. */
    for (int i = 0; conn && i < PQ_WATCH_FAILURE_READS; i++) {
        if (!PQconsumeInput(conn)) {
            const char *why = PQerrorMessage(conn);
            if (why && *why)
                return why;
            break;
        }
    }
    int fd = conn ? PQsocket(conn) : -1, err = 0;
    socklen_t len = sizeof err;
    if (fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0)
        return strerror(err);
    return status == UV_EBADF ? "the connection's socket reported an error" : uv_strerror(status);
}
