/* relay_capture_dead.c — relay.capture = wal: an event that can never be
 * produced (an invalid topic, headers that are not an object of strings, a
 * message larger than Kafka takes, an envelope that is not one) is kept in
 * the outbox table as a dead row, as polling mode dead-letters a row, and the
 * stream goes on: only the event at fault is held back.
 *
 * Its source transaction is confirmed only once the dead row is committed
 * (one more pending message of that transaction in pgo_acks), so a crash
 * before that reads the event again and records it again (one more attempt).
 * The copy is inserted with dead_at set, which the stream skips; `outbox-relay
 * dead` lists it and `outbox-relay replay` sends it once fixed. A stream
 * cannot hold one aggregate back and relay the others, so hold_aggregate
 * dead-letters in this mode; halt stops the stream on the event. */
#include "daemon/relay_capture_int.h"

struct capture_dead {
    unsigned gen;              /* the stream it came from */
    uint64_t seq;              /* its source transaction */
    int64_t outbox_id;         /* 0 for a logical message */
    char *params[SQL_CAPTURE_DEAD_NPARAMS]; /* owned */
};

static void dead_free(struct capture_dead *d)
{
    sql_capture_dead_params_free(d->params);
    memset(d, 0, sizeof *d);
}

/* The oldest queued record goes first: records of one source transaction
 * are written in the stream's order. */
static void dead_pop(struct capture *c)
{
    dead_free(&c->dead[0]);
    memmove(&c->dead[0], &c->dead[1], (c->n_dead - 1) * sizeof c->dead[0]);
    c->n_dead--;
}

bool relay_capture_dead_queue(struct relay *r, const struct event_row *row, const char *event_id,
                              const char *why)
{
    struct capture *c = r->cap;
    if (c->n_dead == c->dead_cap) {
        size_t cap = c->dead_cap ? 2 * c->dead_cap : 8;
        struct capture_dead *v = realloc(c->dead, cap * sizeof *v);
        if (!v)
            return false;
        c->dead = v;
        c->dead_cap = cap;
    }
    struct capture_dead *d = &c->dead[c->n_dead];
    memset(d, 0, sizeof *d);
    d->outbox_id = row ? row->id : 0;
    if (sql_capture_dead_params(d->params, row, event_id, why) < 0)
        return false;
    c->n_dead++;
    capture_plan_dead_queued(&c->plan, &d->gen, &d->seq); /* its transaction waits for the record */
    return true;
}

bool relay_capture_dead_due(const struct relay *r)
{
    const struct capture *c = r->cap;
    return c->n_dead > 0 && !c->dead_sending && uv_now(r->loop) >= c->dead_retry_ms;
}

static void on_recorded(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    struct capture *c = r->cap;
    c->dead_sending = false;
    if (!res || c->n_dead == 0)
        return; /* the connection is gone: the record is sent again on the next */
    struct capture_dead *d = &c->dead[0];
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        const char *state = pg_sqlstate(res);
        log_error("cannot record an event that cannot be produced",
                  "event_id=%s error=%s", d->params[0], log_quote(PQresultErrorMessage(res)));
        if (capture_dead_refused(state, d->params[0], d->params[8], r->st.halt_reason,
                                 sizeof r->st.halt_reason)) {
            r->st.halted = true;
            log_error("relaying halted: an event can neither be produced nor kept as a dead row",
                      "event_id=%s reason=%s", d->params[0], log_quote(r->st.halt_reason));
            relay_notify_status(r);
        }
        c->dead_retry_ms = relay_now_ms(r) + 1000;
        relay_step(r);
        return;
    }
    r->st.dead_total++;
    static const char msg[] = "event dead-lettered; the stream goes on";
    if (log_limit_allow(&r->failures, stats_mono(), LOG_LVL_ERROR, msg, d->params[8], d->outbox_id))
        log_error(msg, "outbox_id=%" PRId64 " event_id=%s error=%s", d->outbox_id, d->params[0],
                  log_quote(d->params[8]));
    struct capture_env e = relay_capture_env(r);
    struct capture_acts a = capture_plan_dead_recorded(&c->plan, &e, d->gen, d->seq);
    dead_pop(c);
    relay_capture_carry(r, a);
}

void relay_capture_dead_record(struct relay *r)
{
    struct capture *c = r->cap;
    struct capture_dead *d = &c->dead[0];
    c->dead_sending = true;
    if (pg_query(&r->pg, c->sql.record_dead, SQL_CAPTURE_DEAD_NPARAMS, (const char *const *)d->params,
                 on_recorded, r) < 0)
        c->dead_sending = false;
}

void relay_capture_dead_clear(struct relay *r)
{
    struct capture *c = r->cap;
    while (c->n_dead > 0 && !c->dead_sending)
        dead_pop(c);
    /* one being written finishes; its stream's acknowledgement is ignored */
    for (size_t i = c->dead_sending ? 1 : 0; i < c->n_dead; i++)
        dead_free(&c->dead[i]);
    if (c->n_dead > 1)
        c->n_dead = 1;
}

void relay_capture_dead_free(struct relay *r)
{
    struct capture *c = r->cap;
    for (size_t i = 0; i < c->n_dead; i++)
        dead_free(&c->dead[i]);
    free(c->dead);
    c->dead = NULL;
    c->n_dead = c->dead_cap = 0;
}
