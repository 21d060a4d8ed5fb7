/* relay_quiet.c — the quiet lock (schema/004): taken while writers keep the
 * leader busy, so that they send no NOTIFY, and left with a last check. */
#include "daemon/relay_int.h"

/* ---- the quiet lock ----------------------------------------------------- */

static void quiet_set(struct relay *r, enum plan_quiet q)
{
    r->quiet = q;
    r->st.quiet = q == PLAN_QUIET_ON;
}

void relay_quiet_reset(struct relay *r)
{
    quiet_set(r, PLAN_QUIET_OFF);
    r->quiet_wanted = false;
    r->quiet_idle = false;
    uv_timer_stop(&r->quiet_timer);
}

/* A quiet-lock statement's one boolean; -1 (logged, back-off) on failure. */
static int quiet_answer(struct relay *r, PGresult *res, const char *what)
{
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        log_error("the quiet lock's statement failed", "statement=%s error=%s", what,
                  log_quote(PQresultErrorMessage(res)));
        relay_session_evidence(r, res, what);
        r->backoff = true;
        return -1;
    }
    return PQgetvalue(res, 0, 0)[0] == 't';
}

void relay_on_quiet_on(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    r->quiet_wanted = false;
    if (quiet_answer(r, res, "quiet_on") == 1) {
        quiet_set(r, PLAN_QUIET_ON);
        r->quiet_idle = false;
        uv_timer_stop(&r->quiet_timer); /* a check while leaving is moot */
        r->ops->wake(r); /* from now on no NOTIFY says so */
        log_debug("quiet: writers send no NOTIFY while claims find rows", "");
    }
    relay_step(r);
}

void relay_on_quiet_off(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (quiet_answer(r, res, "quiet_off") < 0)
        return;
    quiet_set(r, PLAN_QUIET_LEAVING);
    r->quiet_check_at_ms = relay_now_ms(r);
    r->quiet_backoff_ms = 0;
    relay_step(r);
}

static void on_quiet_timer(uv_timer_t *t)
{
    struct relay *r = t->data;
    r->ops->wake(r);
    relay_step(r);
}

void relay_on_quiet_check(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    int none_open = quiet_answer(r, res, "quiet_check");
    if (none_open < 0)
        return;
    if (none_open) {
        /* Every row whose writer sent no NOTIFY is committed: one last claim. */
        quiet_set(r, PLAN_QUIET_OFF);
        r->quiet_wanted = false; /* from claims before: the next ones decide afresh */
        r->ops->wake(r);
        log_debug("quiet: writers notify again", "");
    } else {
        /* Claim what the ones that ended wrote, and look again later. */
        r->quiet_backoff_ms =
            plan_quiet_check_wait(r->quiet_backoff_ms, (uint64_t)r->cfg->poll_interval_ms);
        r->quiet_check_at_ms = relay_now_ms(r) + r->quiet_backoff_ms;
        uv_timer_start(&r->quiet_timer, on_quiet_timer, r->quiet_backoff_ms, 0);
        r->ops->wake(r);
    }
    relay_step(r);
}
