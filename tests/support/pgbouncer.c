/* pgbouncer.c — Debian's real PgBouncer in front of the stack's PostgreSQL
 * (tests/support/pgbouncer.sh). */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "testlib.h"

#define PGBOUNCER "/usr/sbin/pgbouncer"

static const char *script(const struct e2e_env *env, char *path, size_t len)
{
    cr_assert(env->stack_sh, "OUTBOX_RELAY_TEST_STACK_SH is not set (run tests/run)");
    char copy[600];
    snprintf(copy, sizeof(copy), "%s", env->stack_sh);
    snprintf(path, len, "%s/pgbouncer.sh", dirname(copy));
    return path;
}

char *e2e_conninfo_value(const char *conninfo, const char *key)
{
    PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
    cr_assert_not_null(opts, "cannot parse %s", conninfo);
    char *v = NULL;
    for (PQconninfoOption *o = opts; o->keyword; o++)
        if (strcmp(o->keyword, key) == 0 && o->val)
            v = strdup(o->val);
    PQconninfoFree(opts);
    cr_assert_not_null(v, "%s not in %s", key, conninfo);
    return v;
}

void e2e_pgbouncer_start(const struct e2e_ctx *t, struct e2e_pgbouncer *b, const char *mode,
                         int pool_size)
{
    if (access(PGBOUNCER, X_OK) != 0) {
        cr_assert(!getenv("OUTBOX_RELAY_TEST_REQUIRED"),
                  PGBOUNCER " is missing: apt-get install pgbouncer (tests/support/deps.sh)");
        cr_skip_test(PGBOUNCER " is missing (Debian package pgbouncer)");
    }
    b->env = t->env;
    snprintf(b->dir, sizeof(b->dir), "%s/pgbouncer", t->logdir);
    char *pgport = e2e_conninfo_value(t->env->pg, "port");
    char *db = e2e_conninfo_value(t->env->pg, "dbname");
    snprintf(b->dbname, sizeof(b->dbname), "%s", db);
    char size[16], path[600];
    snprintf(size, sizeof(size), "%d", pool_size);
    const char *argv[] = {script(t->env, path, sizeof path), "start", b->dir, pgport, mode, size,
                          NULL};
    char *out = NULL, *err = NULL;
    int rc = e2e_run_cmd(argv, 30000, &out, &err);
    cr_assert_eq(rc, 0, "pgbouncer.sh start failed (%d): %s", rc, err ? err : "");
    b->port = atoi(out);
    cr_assert(b->port > 0, "no port from pgbouncer.sh: %s", out);
    fprintf(stderr, "e2e: PgBouncer pool_mode=%s default_pool_size=%d on port %d\n", mode,
            pool_size, b->port);
    free(pgport);
    free(db);
    free(out);
    free(err);
}

int e2e_pgbouncer_stop(struct e2e_pgbouncer *b)
{
    if (b->port <= 0)
        return 0;
    char path[600];
    const char *argv[] = {script(b->env, path, sizeof path), "stop", b->dir, NULL};
    b->port = 0;
    return e2e_run_cmd(argv, 20000, NULL, NULL);
}

void e2e_pgbouncer_conninfo(const struct e2e_pgbouncer *b, const char *extra, char *out,
                            size_t len)
{
    snprintf(out, len, "host=127.0.0.1 port=%d dbname=%s user=postgres%s%s", b->port, b->dbname,
             *extra ? " " : "", extra);
}
