/* pg_pair.c — a PostgreSQL primary and its synchronous standby of one test's
 * own (tests/support/pg_pair.sh), for failovers; and sockets that refuse or
 * never answer, for hosts of a conninfo that do not work. */
#include <arpa/inet.h>
#include <libgen.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "testlib.h"

static void pair_run(struct e2e_pg_pair *p, const char *cmd, int timeout_ms)
{
    char path[600], tpl[600];
    snprintf(path, sizeof path, "%s", p->script);
    /* The cluster initdb makes is the same every time: made once per stack. */
    const char *base = p->env->stack_dir ? p->env->stack_dir : "/tmp";
    snprintf(tpl, sizeof tpl, "%s/pg_pair_template", base);
    const char *argv[] = {"/bin/bash", path, cmd, p->dir, strcmp(cmd, "start") ? NULL : tpl, NULL};
    char *out = NULL, *err = NULL;
    int rc = e2e_run_cmd(argv, timeout_ms, &out, &err);
    cr_assert_eq(rc, 0, "pg_pair.sh %s %s failed (%d): %s", cmd, p->dir, rc, err ? err : "");
    if (!strcmp(cmd, "start")) {
        int n = sscanf(out ? out : "", "%d %d", &p->primary_port, &p->standby_port);
        cr_assert_eq(n, 2, "no ports from pg_pair.sh: %s", out ? out : "");
    }
    free(out);
    free(err);
}

void e2e_pg_pair_start(const struct e2e_ctx *t, struct e2e_pg_pair *p)
{
    memset(p, 0, sizeof(*p));
    p->env = t->env;
    cr_assert(t->env->stack_sh, "OUTBOX_RELAY_TEST_STACK_SH is not set (run tests/run)");
    char copy[600];
    snprintf(copy, sizeof(copy), "%s", t->env->stack_sh);
    snprintf(p->script, sizeof(p->script), "%s/pg_pair.sh", dirname(copy));
    snprintf(p->dir, sizeof(p->dir), "%s/pair", t->logdir);
    int64_t t0 = e2e_now_ms();
    pair_run(p, "start", 120000);
    p->up = true;
    fprintf(stderr, "e2e: primary on port %d, synchronous standby on port %d (%lld ms)\n",
            p->primary_port, p->standby_port, (long long)(e2e_now_ms() - t0));
}

void e2e_pg_pair_stop_primary(struct e2e_pg_pair *p)
{
    pair_run(p, "stop-primary", 60000);
}

void e2e_pg_pair_stop_primary_fast(struct e2e_pg_pair *p)
{
    pair_run(p, "stop-primary-fast", 90000);
}

void e2e_pg_pair_rejoin(struct e2e_pg_pair *p)
{
    pair_run(p, "rejoin", 90000);
}

void e2e_pg_pair_start_old_primary(struct e2e_pg_pair *p)
{
    pair_run(p, "start-old-primary", 90000);
}

void e2e_pg_pair_promote(struct e2e_pg_pair *p)
{
    pair_run(p, "promote", 90000);
}

void e2e_pg_pair_stop(struct e2e_pg_pair *p)
{
    if (p->up)
        pair_run(p, "stop", 60000);
    p->up = false;
}

void e2e_pg_pair_conninfo(const struct e2e_pg_pair *p, int which, const char *extra, char *out,
                          size_t len)
{
    if (which == E2E_PAIR_BOTH)
        snprintf(out, len, "host=127.0.0.1,127.0.0.1 port=%d,%d dbname=postgres user=postgres%s%s",
                 p->primary_port, p->standby_port, *extra ? " " : "", extra);
    else
        snprintf(out, len, "host=127.0.0.1 port=%d dbname=postgres user=postgres%s%s",
                 which == E2E_PAIR_PRIMARY ? p->primary_port : p->standby_port,
                 *extra ? " " : "", extra);
}

void e2e_pg_pair_use(struct e2e_ctx *t, const struct e2e_pg_pair *p, int which)
{
    char conninfo[256];
    e2e_pg_pair_conninfo(p, which, "", conninfo, sizeof conninfo);
    PQfinish(t->conn);
    t->conn = PQconnectdb(conninfo);
    cr_assert_eq(PQstatus(t->conn), CONNECTION_OK, "%s", PQerrorMessage(t->conn));
    e2e_exec(t->conn, "SET client_min_messages = warning");
}

void e2e_pg_pair_up(struct e2e_ctx *t, struct e2e_pg_pair *p)
{
    e2e_pg_pair_start(t, p);
    e2e_pg_pair_conninfo(p, E2E_PAIR_BOTH, "target_session_attrs=read-write connect_timeout=2",
                         t->pg_conninfo, sizeof t->pg_conninfo);
    e2e_pg_pair_use(t, p, E2E_PAIR_PRIMARY);
}

int e2e_dead_port(bool accepting, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0, "socket");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0, "bind");
    /* Bound, not listening: a connect is refused. Listening, never
     * accepted: the kernel completes the handshake and nobody answers. */
    if (accepting)
        cr_assert(listen(fd, 16) == 0, "listen");
    socklen_t alen = sizeof a;
    cr_assert(getsockname(fd, (struct sockaddr *)&a, &alen) == 0, "getsockname");
    *port = ntohs(a.sin_port);
    return fd;
}
