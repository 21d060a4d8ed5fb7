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

/* A transaction pooler reuses the server session released last, so one
 * round already shows it; a few more catch a pooler that picks otherwise. */
#define PROBE_ROUNDS 4

#define POOLED_CAUSE                                                                        \
    "the connection to PostgreSQL is pooled per transaction or statement (e.g. PgBouncer " \
    "pool_mode=transaction), where the leader lock cannot elect one leader: "
#define POOLED_FIX "; connect the relay directly or through session pooling (pool_mode=session)"

struct probe_row {
    int pid;
    char setting[64];
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

/* The rounds: the second connection must never land in the first one's
 * server session, and the first must stay in its own. */
static enum pool_probe_result probe_rounds(PGconn *first, PGconn *second, int pid,
                                           const char *token, char *why, size_t len)
{
    struct probe_row row;
    for (int i = 0; i < PROBE_ROUNDS; i++) {
        if (probe_query(second, SQL_POOL_PROBE_READ, NULL, &row, why, len) < 0)
            return POOL_PROBE_UNKNOWN;
        if (row.pid == pid || strcmp(row.setting, token) == 0) {
            snprintf(why, len, POOLED_CAUSE "a second connection's statement ran in the first "
                     "connection's server session (backend %d)" POOLED_FIX, pid);
            return POOL_PROBE_SHARED;
        }
        if (probe_query(first, SQL_POOL_PROBE_READ, NULL, &row, why, len) < 0)
            return POOL_PROBE_UNKNOWN;
        if (row.pid != pid || strcmp(row.setting, token) != 0) {
            snprintf(why, len, POOLED_CAUSE "between two statements of one connection the "
                     "server session changed (backend %d, then %d)" POOLED_FIX, pid, row.pid);
            return POOL_PROBE_SHARED;
        }
    }
    return POOL_PROBE_OWN;
}

enum pool_probe_result pool_probe(const char *conninfo, char *why, size_t len)
{
    PGconn *first = probe_connect(conninfo, why, len);
    if (!first)
        return POOL_PROBE_UNKNOWN;
    char token[40];
    snprintf(token, sizeof token, "%ld-%08x", (long)getpid(),
             (unsigned)(time(NULL) ^ ((unsigned)rand() << 8)));
    struct probe_row row;
    enum pool_probe_result verdict = POOL_PROBE_UNKNOWN;
    if (probe_query(first, SQL_POOL_PROBE_SET, token, &row, why, len) < 0)
        goto done;
    /* A server that announced the backend it runs is no pooler's. */
    if (PQbackendPID(first) == row.pid) {
        verdict = POOL_PROBE_OWN;
        goto done;
    }
    PGconn *second = probe_connect(conninfo, why, len);
    if (!second)
        goto done;
    verdict = probe_rounds(first, second, row.pid, token, why, len);
    PQfinish(second);
    /* A pooled server session outlives us: leave nothing of ours in it. */
    struct probe_row ignored;
    char scratch[8];
    (void)probe_query(first, SQL_POOL_PROBE_SET, "", &ignored, scratch, sizeof scratch);
done:
    PQfinish(first);
    return verdict;
}
