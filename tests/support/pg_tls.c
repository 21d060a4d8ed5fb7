/* pg_tls.c — a PostgreSQL server that takes TCP only over TLS
 * (tests/support/pg_tls.sh): certificates made at start, a role that logs in
 * with SCRAM and one with a client certificate. The first test that needs
 * it starts it, in the stack's directory; the tests after use it too, and
 * the stack stops it (the other tests never pay for it). */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "testlib.h"

static void tls_run(struct e2e_pg_tls *s, const char *cmd, int timeout_ms)
{
    char tpl[600];
    /* The cluster initdb makes is the same every time: made once per stack. */
    snprintf(tpl, sizeof tpl, "%s/pg_tls_template", s->env->stack_dir);
    const char *argv[] = {"/bin/bash", s->script, cmd, s->dir, strcmp(cmd, "start") ? NULL : tpl,
                          NULL};
    char *out = NULL, *err = NULL;
    int rc = e2e_run_cmd(argv, timeout_ms, &out, &err);
    cr_assert_eq(rc, 0, "pg_tls.sh %s %s failed (%d): %s", cmd, s->dir, rc, err ? err : "");
    if (!strcmp(cmd, "start"))
        cr_assert_eq(sscanf(out ? out : "", "%d", &s->port), 1, "no port from pg_tls.sh: %s",
                     out ? out : "");
    free(out);
    free(err);
}

void e2e_pg_tls_start(const struct e2e_ctx *t, struct e2e_pg_tls *s)
{
    memset(s, 0, sizeof(*s));
    s->env = t->env;
    cr_assert(t->env->stack_sh && t->env->stack_dir,
              "OUTBOX_RELAY_TEST_STACK_SH or _DIR is not set (run tests/run)");
    char copy[600];
    snprintf(copy, sizeof(copy), "%s", t->env->stack_sh);
    snprintf(s->script, sizeof(s->script), "%s/pg_tls.sh", dirname(copy));
    snprintf(s->dir, sizeof(s->dir), "%s/pgtls", t->env->stack_dir);
    snprintf(s->tls, sizeof(s->tls), "%s/tls", s->dir);
    int64_t t0 = e2e_now_ms();
    tls_run(s, "start", 120000);
    s->up = true;
    fprintf(stderr, "e2e: TLS-only PostgreSQL on port %d, certificates in %s (%lld ms)\n",
            s->port, s->tls, (long long)(e2e_now_ms() - t0));
}

PGconn *e2e_pg_tls_admin(const struct e2e_pg_tls *s, const char *dbname)
{
    char ci[800];
    snprintf(ci, sizeof ci, "host=%s/s port=%d dbname=%s user=postgres", s->dir, s->port, dbname);
    PGconn *c = PQconnectdb(ci);
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
    e2e_exec(c, "SET client_min_messages = warning");
    return c;
}
