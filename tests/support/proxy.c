/* proxy.c — a TCP proxy on loopback in front of one port, whose connections
 * a test resets (RST, as a firewall or a load balancer that drops a session
 * does); see testlib.h. One thread forwards bytes and performs the resets,
 * so no descriptor is closed under its poll. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define MAX_PAIRS 16

struct e2e_proxy {
    int listen_fd;
    int target_port;
    int port;
    pthread_t th;
    atomic_bool stop;
    atomic_int resets_asked;
    atomic_int resets_done;
    int fd[MAX_PAIRS][2]; /* client side, server side; -1 when free */
};

static int connect_target(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Ends pair @p i; with @p reset the client side gets an RST instead of a FIN. */
static void end_pair(struct e2e_proxy *p, int i, bool reset)
{
    if (reset) {
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(p->fd[i][0], SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    close(p->fd[i][0]);
    close(p->fd[i][1]);
    p->fd[i][0] = p->fd[i][1] = -1;
}

static void accept_one(struct e2e_proxy *p)
{
    int c = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0)
        return;
    int s = connect_target(p->target_port);
    for (int i = 0; s >= 0 && i < MAX_PAIRS; i++)
        if (p->fd[i][0] < 0) {
            p->fd[i][0] = c;
            p->fd[i][1] = s;
            return;
        }
    close(c);
    if (s >= 0)
        close(s);
}

/* Copies what @p from has to @p to; @return false at its end or an error. */
static bool forward(int from, int to)
{
    char buf[16384];
    ssize_t n = read(from, buf, sizeof buf);
    for (ssize_t off = 0; n > 0 && off < n;) {
        ssize_t w = write(to, buf + off, (size_t)(n - off));
        if (w <= 0)
            return false;
        off += w;
    }
    return n > 0;
}

static void *proxy_main(void *arg)
{
    struct e2e_proxy *p = arg;
    while (!atomic_load(&p->stop)) {
        int asked = atomic_load(&p->resets_asked);
        if (asked != atomic_load(&p->resets_done)) {
            for (int i = 0; i < MAX_PAIRS; i++)
                if (p->fd[i][0] >= 0)
                    end_pair(p, i, true);
            atomic_store(&p->resets_done, asked);
        }
        struct pollfd pf[1 + 2 * MAX_PAIRS];
        int n = 0, at[1 + 2 * MAX_PAIRS];
        pf[n++] = (struct pollfd){.fd = p->listen_fd, .events = POLLIN};
        for (int i = 0; i < MAX_PAIRS; i++)
            for (int side = 0; side < 2 && p->fd[i][0] >= 0; side++) {
                at[n] = i * 2 + side;
                pf[n++] = (struct pollfd){.fd = p->fd[i][side], .events = POLLIN};
            }
        if (poll(pf, (nfds_t)n, 50) <= 0)
            continue;
        if (pf[0].revents)
            accept_one(p);
        for (int k = 1; k < n; k++) {
            int i = at[k] / 2, side = at[k] % 2;
            if (pf[k].revents && p->fd[i][0] >= 0 && !forward(p->fd[i][side], p->fd[i][!side]))
                end_pair(p, i, false);
        }
    }
    for (int i = 0; i < MAX_PAIRS; i++)
        if (p->fd[i][0] >= 0)
            end_pair(p, i, false);
    return NULL;
}

struct e2e_proxy *e2e_proxy_start(int target_port)
{
    struct e2e_proxy *p = calloc(1, sizeof *p);
    cr_assert_not_null(p);
    memset(p->fd, -1, sizeof p->fd);
    p->target_port = target_port;
    p->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    cr_assert(p->listen_fd >= 0 && bind(p->listen_fd, (struct sockaddr *)&a, sizeof a) == 0 &&
                  listen(p->listen_fd, 16) == 0 &&
                  getsockname(p->listen_fd, (struct sockaddr *)&a, &alen) == 0,
              "cannot listen for the proxy");
    p->port = ntohs(a.sin_port);
    atomic_init(&p->stop, false);
    atomic_init(&p->resets_asked, 0);
    atomic_init(&p->resets_done, 0);
    cr_assert_eq(pthread_create(&p->th, NULL, proxy_main, p), 0);
    return p;
}

int e2e_proxy_port(const struct e2e_proxy *p)
{
    return p->port;
}

void e2e_proxy_reset(struct e2e_proxy *p)
{
    int asked = atomic_fetch_add(&p->resets_asked, 1) + 1;
    int64_t deadline = e2e_now_ms() + 5000;
    while (atomic_load(&p->resets_done) != asked && e2e_now_ms() < deadline)
        e2e_sleep_ms(10);
    cr_assert_eq(atomic_load(&p->resets_done), asked, "the proxy did not reset its connections");
}

void e2e_proxy_stop(struct e2e_proxy *p)
{
    if (!p)
        return;
    atomic_store(&p->stop, true);
    pthread_join(p->th, NULL);
    close(p->listen_fd);
    free(p);
}
