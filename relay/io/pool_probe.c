/* pool_probe.c — see pool_probe.h. */
#include "io/pool_probe.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/sql.h"
#include "io/pg.h"

/* A transaction pooler alone with us hands out the server session released
 * last, so one round already shows it. Other clients of the pooler take
 * sessions in between and can hide that for a round; each connection also
 * keeps a session setting of its own, so a round is passed only if both
 * land back in their own sessions, which a busy pooler rarely does twice. */
#define PROBE_ROUNDS 6

#define POOLED_CAUSE                                                                        \
    "the connection to PostgreSQL is pooled per transaction or statement (e.g. PgBouncer " \
    "pool_mode=transaction), where the leader lock cannot elect one leader: "
#define POOLED_FIX "; connect the relay directly or through session pooling (pool_mode=session)"

struct probe_row {
    int pid;
    char setting[64];
};

/* One client connection of the probe and the server session it started in. */
struct probe_conn {
    PGconn *conn;
    int pid;
    char token[40];
};

static PGconn *probe_connect(const char *conninfo, char *why, size_t len)
{
    const char *keys[] = {"fallback_application_name", "dbname", NULL};
    const char *vals[] = {"outbox-relay", conninfo, NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (PQstatus(c) != CONNECTION_OK) {
        char clean[512]; /* libpq's message may quote the conninfo, password included */
        pg_error_text(conninfo, c ? PQerrorMessage(c) : "out of memory", clean, sizeof clean);
        snprintf(why, len, "cannot connect to probe the session: %s", clean);
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* One statement; @return 0 and its first row, or -1 with @p why. */
static int probe_query(PGconn *c, const char *sql, const char *param, struct probe_row *row,
                       char *why, size_t len)
{
    const char *params[] = {param};
    PGresult *res = PQexecParams(c, sql, param ? 1 : 0, NULL, params, NULL, NULL, 0);
    int rc = -1;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && PQnfields(res) == 2) {
        row->pid = atoi(PQgetvalue(res, 0, 0));
        snprintf(row->setting, sizeof row->setting, "%s",
                 PQgetisnull(res, 0, 1) ? "" : PQgetvalue(res, 0, 1));
        rc = 0;
    } else {
        snprintf(why, len, "session probe failed: %s", PQresultErrorMessage(res));
    }
    PQclear(res);
    return rc;
}

/* Marks the server session @p p runs in with a token of its own. */
static int probe_mark(struct probe_conn *p, unsigned salt, char *why, size_t len)
{
    snprintf(p->token, sizeof p->token, "%ld-%08x-%u", (long)getpid(),
             (unsigned)(time(NULL) ^ ((unsigned)rand() << 8)), salt);
    struct probe_row row;
    if (probe_query(p->conn, SQL_POOL_PROBE_SET, p->token, &row, why, len) < 0)
        return -1;
    p->pid = row.pid;
    return 0;
}

/* One statement of @p p: it must run in its own session and not in @p other's.
 * @return 1 if it did, 0 (SHARED, @p why says how) or -1 (failed). */
static int probe_check(const struct probe_conn *p, const struct probe_conn *other, char *why,
                       size_t len)
{
    struct probe_row row;
    if (probe_query(p->conn, SQL_POOL_PROBE_READ, NULL, &row, why, len) < 0)
        return -1;
    if (row.pid == other->pid || strcmp(row.setting, other->token) == 0) {
        snprintf(why, len, POOLED_CAUSE "a statement of one connection ran in another "
                 "connection's server session (backend %d)" POOLED_FIX, other->pid);
        return 0;
    }
    if (row.pid != p->pid || strcmp(row.setting, p->token) != 0) {
        snprintf(why, len, POOLED_CAUSE "between two statements of one connection the "
                 "server session changed (backend %d, then %d)" POOLED_FIX, p->pid, row.pid);
        return 0;
    }
    return 1;
}

/* The rounds, each connection first in turn: a pooler choosing sessions by
 * recency or in turn hands one of them the other's session sooner or later. */
static enum pool_probe_result probe_rounds(struct probe_conn *c, char *why, size_t len)
{
    for (int i = 0; i < PROBE_ROUNDS; i++) {
        for (int k = 0; k < 2; k++) {
            int who = (i + k) % 2;
            int rc = probe_check(&c[who], &c[1 - who], why, len);
            if (rc <= 0)
                return rc < 0 ? POOL_PROBE_UNKNOWN : POOL_PROBE_SHARED;
        }
    }
    return POOL_PROBE_OWN;
}

/* Statement pooling refuses a transaction block outright, whoever else uses
 * the pooler: the one verdict that depends on no choice of the pooler's.
 * PgBouncer closes the connection with an error that libpq, in the middle of
 * the statement, may report only as the closed connection (1.18 and 1.24). */
static bool probe_pooler_said(PGconn *c, const PGresult *res)
{
    return strstr(PQresultErrorMessage(res), "statement pooling") ||
           strstr(PQerrorMessage(c), "statement pooling");
}

static enum pool_probe_result probe_transaction(PGconn *c, char *why, size_t len)
{
    const char *sql[] = {SQL_POOL_PROBE_BEGIN, SQL_POOL_PROBE_ROLLBACK};
    for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++) {
        PGresult *res = PQexec(c, sql[i]);
        enum pool_probe_result verdict = POOL_PROBE_OWN;
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            verdict = probe_pooler_said(c, res) ? POOL_PROBE_SHARED : POOL_PROBE_UNKNOWN;
            if (verdict == POOL_PROBE_SHARED)
                snprintf(why, len, POOLED_CAUSE "the pooler refused a transaction block"
                         POOLED_FIX);
            else
                snprintf(why, len, "session probe failed: %s", PQresultErrorMessage(res));
        }
        PQclear(res);
        if (verdict != POOL_PROBE_OWN)
            return verdict;
    }
    return POOL_PROBE_OWN;
}

/* The transaction block on a connection of its own; one that is closed
 * without a word is tried once more, as a server going away would not do
 * twice in a row at the same statement. @p c is replaced when it was closed. */
static enum pool_probe_result probe_transaction_twice(const char *conninfo, PGconn **c,
                                                      char *why, size_t len)
{
    enum pool_probe_result verdict = probe_transaction(*c, why, len);
    if (verdict != POOL_PROBE_UNKNOWN || PQstatus(*c) == CONNECTION_OK)
        return verdict;
    PQfinish(*c);
    *c = probe_connect(conninfo, why, len);
    if (!*c)
        return POOL_PROBE_UNKNOWN;
    verdict = probe_transaction(*c, why, len);
    if (verdict == POOL_PROBE_UNKNOWN && PQstatus(*c) != CONNECTION_OK) {
        snprintf(why, len, POOLED_CAUSE "the pooler closed the connection at a transaction "
                 "block, twice" POOLED_FIX);
        verdict = POOL_PROBE_SHARED;
    }
    return verdict;
}

enum pool_probe_result pool_probe(const char *conninfo, char *why, size_t len)
{
    struct probe_conn c[2] = {{.conn = probe_connect(conninfo, why, len)}};
    if (!c[0].conn)
        return POOL_PROBE_UNKNOWN;
    enum pool_probe_result verdict = POOL_PROBE_UNKNOWN;
    if (probe_mark(&c[0], 0, why, len) < 0)
        goto done;
    /* A server that announced the backend it runs is no pooler's. */
    if (PQbackendPID(c[0].conn) == c[0].pid) {
        verdict = POOL_PROBE_OWN;
        goto done;
    }
    c[1].conn = probe_connect(conninfo, why, len);
    if (!c[1].conn)
        goto done;
    /* Before the second connection marks a session: statement pooling drops it. */
    verdict = probe_transaction_twice(conninfo, &c[1].conn, why, len);
    if (verdict != POOL_PROBE_OWN)
        goto done;
    verdict = POOL_PROBE_UNKNOWN;
    if (probe_mark(&c[1], 1, why, len) < 0)
        goto done;
    verdict = probe_rounds(c, why, len);
done:;
    /* A pooled server session outlives us: leave nothing of ours in it. */
    bool pooled = PQbackendPID(c[0].conn) != c[0].pid;
    for (int i = 0; i < 2; i++) {
        if (pooled && PQstatus(c[i].conn) == CONNECTION_OK && c[i].token[0]) {
            struct probe_row ignored;
            char scratch[8];
            (void)probe_query(c[i].conn, SQL_POOL_PROBE_SET, "", &ignored, scratch,
                              sizeof scratch);
        }
        PQfinish(c[i].conn);
    }
    return verdict;
}
