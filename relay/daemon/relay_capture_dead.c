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
 * dead-letters in this mode; halt stops the stream on the event. The queue
 * itself is core/capture_dead.c's. */
#include "daemon/relay_capture_int.h"

bool relay_capture_dead_queue(struct relay *r, const struct event_row *row, const char *event_id,
                              const char *why)
{
    struct capture *c = r->cap;
    struct capture_dead *d = dead_queue_push(&c->dead, row, event_id, why);
    if (d) /* its transaction waits for the record */
        capture_plan_dead_queued(&c->plan, &d->gen, &d->seq);
    return d != NULL;
}

static void on_recorded(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    struct capture *c = r->cap;
    c->dead.sending = false;
    if (!res || c->dead.n == 0)
        return; /* the connection is gone: the record is sent again on the next */
    struct capture_dead *d = &c->dead.v[0];
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        log_error("cannot record an event that cannot be produced",
                  "event_id=%s error=%s", d->params[0], log_quote(PQresultErrorMessage(res)));
        if (dead_queue_failed(&c->dead, pg_sqlstate(res), relay_now_ms(r), r->st.halt_reason,
                              sizeof r->st.halt_reason)) {
            r->st.halted = true;
            log_error("relaying halted: an event can neither be produced nor kept as a dead row",
                      "event_id=%s reason=%s", d->params[0], log_quote(r->st.halt_reason));
            relay_notify_status(r);
        }
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
    dead_queue_pop(&c->dead);
    relay_capture_carry(r, a);
}

void relay_capture_dead_record(struct relay *r)
{
    struct dead_queue *q = &r->cap->dead;
    q->sending = true; /* before the query: a failed send may answer at once */
    if (pg_query(&r->pg, r->cap->sql.record_dead, SQL_CAPTURE_DEAD_NPARAMS,
                 (const char *const *)q->v[0].params, on_recorded, r) < 0)
        q->sending = false;
}
