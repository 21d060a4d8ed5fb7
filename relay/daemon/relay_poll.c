/* relay_poll.c — relay.capture = poll behind the capture interface
 * (relay_int.h): what polling adds to the relay's snapshot, the steps of its
 * own it carries out (the hot statements, LISTEN, the backlog count, the
 * claim, the mark, retention), its timers' part, its batches' life. The
 * rows' way itself is relay_poll_pipeline.c's, the quiet lock relay_quiet.c's. */
#include "daemon/relay_poll_int.h"

/* ---- the backlog count -------------------------------------------------- */

static void on_backlog(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    r->poll->backlog_took_ms = relay_now_ms(r) - r->poll->backlog_sent_ms;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        r->st.backlog_known = true;
        r->st.backlog_rows = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        r->st.oldest_unsent_age = strtod(PQgetvalue(res, 0, 1), NULL);
        r->st.dead_rows = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
        r->st.backlog_time = stats_now();
        r->st.backlog_published = r->st.published_total;
    } else {
        log_warn("backlog query failed", "error=%s", log_quote(PQresultErrorMessage(res)));
    }
    relay_notify_status(r);
    relay_step(r);
}

/* With SQL_FLOOR the count starts from the relay's floor and saves it. */
static void relay_backlog_query(struct relay *r)
{
    if (!r->poll->floor_mode) {
        pg_query(&r->pg, r->sql.backlog, 0, NULL, on_backlog, r);
        return;
    }
    char floor_id[24];
    const char *params[4];
    relay_floor_params(r, floor_id, params);
    pg_query(&r->pg, r->sql.backlog, 4, params, on_backlog, r);
}

/* ---- LISTEN ------------------------------------------------------------ */

static void on_listen(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        log_error("LISTEN failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        r->backoff = true;
        return;
    }
    r->poll->listening = true;
    r->poll->wake = true;
    relay_step(r);
}

/* ---- the hot statements ------------------------------------------------- */

/* The statements of the hot path are parsed and planned once per
 * connection, not once per batch. */
static const struct {
    const char *name;
    size_t offset;
    int nparams;
} hot_statements[] = {
    { "claim", offsetof(struct sql_statements, claim), -1 }, /* sql.claim_nparams */
    { "mark", offsetof(struct sql_statements, mark_sent), 1 },
};
#define N_HOT (int)(sizeof(hot_statements) / sizeof(hot_statements[0]))

static void on_prepared(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        log_error("preparing a statement failed", "statement=%s error=%s",
                  hot_statements[r->poll->prepared].name, log_quote(PQresultErrorMessage(res)));
        relay_session_evidence(r, res, hot_statements[r->poll->prepared].name);
        r->backoff = true;
        return;
    }
    r->poll->prepared++;
    relay_step(r);
}

static void prepare(struct relay *r, int i)
{
    const char *sql = *(char *const *)((const char *)&r->sql + hot_statements[i].offset);
    int nparams = hot_statements[i].nparams;
    if (nparams < 0) /* decided with the statement's text */
        nparams = r->sql.claim_nparams;
    pg_prepare(&r->pg, hot_statements[i].name, sql, nparams, on_prepared, r);
}

/* ---- the interface ------------------------------------------------------ */

/* A claim reads from the floor unless it reads through a view (debezium). */
static unsigned poll_sql_flags(const struct relay_config *cfg, const char *claim)
{
    return strcmp(claim, cfg->table) == 0 ? SQL_FLOOR : 0;
}

static int poll_start(struct relay *r)
{
    char claim[CONFIG_RELATION_MAX];
    struct poll_capture *pc = calloc(1, sizeof *pc);
    if (!pc) {
        log_error("out of memory", "batch_size=%d", r->cfg->batch_size);
        return EXIT_SOFTWARE;
    }
    pc->relay = r;
    pc->floor_mode = poll_sql_flags(r->cfg, config_claim_relation(r->cfg, claim)) & SQL_FLOOR;
    r->poll = pc;
    for (int k = 0; k < N_BATCHES; k++) {
        r->poll->b[k].slot = k;
        if (batch_reserve(&r->poll->b[k], r->cfg->batch_size) < 0) {
            log_error("out of memory", "batch_size=%d", r->cfg->batch_size);
            return EXIT_SOFTWARE;
        }
    }
    return EXIT_OK;
}

static void poll_connected(struct relay *r)
{
    r->poll->listening = false;
    r->poll->prepared = 0;
    r->poll->halt_pending = false; /* its record may be lost: the row is claimed and fails again */
}

static void poll_leading(struct relay *r)
{
    r->poll->wake = true; /* catch up: notifications were not heard before */
    r->poll->claim_first = !r->st.halted; /* a halted relay claims nothing */
    r->poll->claim_first_until = relay_now_ms(r) + 2000;
}

static void poll_tick(struct relay *r)
{
    r->poll->wake = true;
    if (plan_retention_due(r->retention_s, relay_now_ms(r), r->last_retention_ms))
        r->retention_due = true;
}

static void poll_status(const struct relay *r, struct plan_state *s)
{
    s->n_hot = N_HOT;
    s->prepared = r->poll->prepared;
    s->listening = r->poll->listening;
    s->wake = r->poll->wake;
    s->claim_full = r->poll->claim_full;
    s->halt_pending = r->poll->halt_pending;
    s->queue_full = r->poll->queue_full;
    s->isolating = r->poll->isolating;
    s->isolate_until_id = r->poll->isolate_until_id;
    s->truncations = r->poll->truncations;
    s->batch_size = r->cfg->batch_size;
    s->backlog_due_ms = r->poll->backlog_due_ms;
    s->backlog_took_ms = r->poll->backlog_took_ms;
    s->claim_first = r->poll->claim_first;
    s->claim_first_until = r->poll->claim_first_until;
    s->b = r->poll->b;
    s->n_batches = N_BATCHES;
}

static int poll_act(struct relay *r, const struct plan_step *p)
{
    if (p->queue_drained)
        r->poll->queue_full = false;
    switch (p->act) {
    case PLAN_PREPARE: prepare(r, p->index); break;
    case PLAN_MARK: relay_mark(r, &r->poll->b[p->slot], p->with); break;
    case PLAN_COUNT_BACKLOG:
        r->poll->backlog_due_ms = p->at_ms;
        r->poll->backlog_sent_ms = relay_now_ms(r);
        relay_backlog_query(r);
        break;
    case PLAN_LISTEN: pg_query(&r->pg, r->sql.listen, 0, NULL, on_listen, r); break;
    case PLAN_CLAIM: relay_claim(r, p); break;
    case PLAN_RETENTION: relay_retention(r); break;
    default: return -1;
    }
    return 0;
}

static void poll_step(struct relay *r)
{
    (void)r; /* every step of polling is plan_next's */
}

static int poll_in_flight(const struct relay *r)
{
    return relay_in_flight(r);
}

static bool poll_producing(const struct relay *r)
{
    return relay_any_phase(r, PHASE_PRODUCING);
}

static void poll_stop(struct relay *r)
{
    (void)r; /* the quiet lock's timer closes with the loop's */
}

static void poll_free(struct relay *r)
{
    if (!r->poll)
        return; /* its start failed before it had any */
    for (int k = 0; k < N_BATCHES; k++) {
        relay_batch_reset(&r->poll->b[k]); /* the claim result a batch may hold */
        batch_free(&r->poll->b[k]);
    }
    for (size_t i = 0; i < sizeof(r->poll->params) / sizeof(r->poll->params[0]); i++)
        strbuf_free(&r->poll->params[i]);
    free(r->poll);
    r->poll = NULL;
}

static void poll_wake(struct relay *r)
{
    r->poll->wake = true;
}



const struct capture_ops relay_poll_ops = {
    .name = "poll",
    .sql_flags = poll_sql_flags,
    .start = poll_start,
    .connected = poll_connected,
    .leading = poll_leading,
    .tick = poll_tick,
    .status = poll_status,
    .act = poll_act,
    .step = poll_step,
    .on_report = relay_poll_on_report,
    .in_flight = poll_in_flight,
    .producing = poll_producing,
    .stop = poll_stop,
    .free = poll_free,
    .wake = poll_wake,
    .txn_settle = relay_poll_txn_settle,
    .txn_ended = relay_poll_txn_ended,
};
