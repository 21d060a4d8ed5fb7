/* relay_capture.c — relay.capture = wal: the outbox read from a logical
 * replication slot through pgoutput, relayed in commit order, and the slot
 * confirmed only up to what Kafka holds.
 *
 * Only the leader streams (the slot admits one reader anyway). Each Insert
 * into the outbox table, and each logical message with relay.message_prefix,
 * becomes the same Kafka message a claimed row would; nothing is written to
 * the table. What the stream may do — produce, commit to Kafka, confirm,
 * restart, stop — is the capture plan's (core/capture_plan.c): this file
 * hands it the stream's events and carries out its answers.
 *
 * The main connection (relay.c) keeps the leader lock and runs what the
 * capture asks of it through the plan: heartbeats, the slot query, retention. */
#include "daemon/relay_capture_int.h"

static bool take_frame(struct relay *r, const uint8_t *buf, size_t len);

struct capture_env relay_capture_env(const struct relay *r)
{
    const struct producer *p = &r->prod;
    const struct capture *c = r->cap;
    return (struct capture_env){
        .now_ms = uv_now(r->loop),
        .leader = r->st.role == STATS_ROLE_LEADER,
        .stopping = r->stopping,
        .halted = r->st.halted,
        .refused = r->st.refused,
        .finished = r->finished,
        /* A producer to be replaced (a refused topic) takes nothing more either. */
        .producer_fatal = producer_fatal(p) || r->renew_producer || r->producer_down,
        .txn = producer_txn_state(p),
        .txn_doomed = producer_txn_doomed(p),
        .txn_empty = producer_txn_empty(p),
        .n_dead = c->dead.n,
        .ahead_left = capture_ahead_left(&c->ahead),
        .server_gap = failover_watch_blocks(&c->failover, uv_now(r->loop)),
        .random = (uint64_t)rand(),
    };
}

/* ---- confirming ---------------------------------------------------------- */

/* The standby status update: what the slot may forget. */
static void send_status(struct relay *r)
{
    struct capture *c = r->cap;
    uint8_t msg[PGO_STATUS_UPDATE_LEN];
    size_t n = capture_plan_status_update(&c->plan, stats_now(), msg);
    if (repl_send(&c->repl, msg, n) == 0) {
        char at[PGO_LSN_TEXT];
        pgo_lsn_text(c->plan.confirmed, at);
        capture_plan_status_sent(&c->plan, relay_now_ms(r));
        r->st.slot.flushed_lsn = c->plan.confirmed;
        log_debug("confirmed", "lsn=%s", at);
    }
}

/* Offers the frames read while a commit ran, oldest first. @return true when none is left. */
static bool ahead_drain(struct relay *r)
{
    struct capture *c = r->cap;
    const uint8_t *buf;
    size_t len;
    while (c->plan.state == CAPTURE_STREAMING && capture_ahead_peek(&c->ahead, &buf, &len) &&
           take_frame(r, buf, len))
        capture_ahead_pop(&c->ahead);
    return !capture_ahead_left(&c->ahead);
}

/* ---- carrying out the plan's answers -------------------------------------- */

static void on_txn_ended(void *arg, unsigned gen, enum producer_txn_result res, const char *why)
{
    (void)gen;
    struct relay *r = arg;
    bool ok = res == PRODUCER_TXN_DONE;
    if (ok) {
        log_debug("transaction committed", "messages=%ld ms=%" PRIu64, r->cap->plan.done_msgs,
                  relay_now_ms(r) - r->txn_start_ms);
    } else {
        r->st.txn_aborted_total++;
        log_warn("kafka transaction aborted; the stream restarts from the confirmed position",
                 "error=%s", log_quote(why));
    }
    struct capture_env e = relay_capture_env(r);
    relay_capture_carry(r, capture_plan_committed(&r->cap->plan, &e, ok));
}

static void start(struct relay *r)
{
    struct capture *c = r->cap;
    pgo_relations_free(&c->rels);
    dead_queue_clear(&c->dead); /* unconfirmed: the new stream reads those events again */
    capture_ahead_clear(&c->ahead);
    char *cmd = sql_capture_start_replication(r->cfg->slot, r->cfg->publication, c->plan.confirmed);
    struct capture_env e = relay_capture_env(r);
    capture_plan_started(&c->plan, &e, cmd && repl_start(&c->repl, cmd) == 0);
    free(cmd);
}

void relay_capture_carry(struct relay *r, struct capture_acts a)
{
    struct capture *c = r->cap;
    struct capture_env e;
    if (a.what & CAP_DO_CLOSE) {
        if (a.why)
            log_info("replication stream stopped", "reason=%s", log_quote(a.why));
        repl_close(&c->repl);
        r->st.slot.streaming = false;
        r->st.slot.lag_seconds = 0;
    }
    if (a.what & CAP_DO_COMMIT) {
        r->txn_start_ms = relay_now_ms(r);
        e = relay_capture_env(r);
        if (producer_txn_commit(&r->prod, on_txn_ended, r) < 0)
            relay_capture_carry(r, capture_plan_commit_refused(&c->plan, &e));
    }
    r->st.published_total += (uint64_t)a.published;
    if (a.what & CAP_DO_CONFIRMED)
        r->st.slot.last_commit_time = stats_now();
    if (a.what & CAP_DO_STATUS)
        send_status(r);
    if (a.what & CAP_DO_CONFIRMED)
        r->st.slot.lag_seconds = capture_plan_lag(&c->plan, stats_now(), PGB_EPOCH_UNIX_S);
    if (a.what & CAP_DO_RESUME)
        repl_resume(&c->repl);
    if ((a.what & CAP_DO_DRAIN_KICK) && ahead_drain(r))
        repl_kick(&c->repl);
    if (a.what & CAP_DO_END) {
        bool ended = repl_end(&c->repl) == 0;
        if (ended)
            log_info("replication stream stopped", "reason=stopping");
        e = relay_capture_env(r);
        relay_capture_carry(r, capture_plan_ended(&c->plan, &e, ended));
    }
    if (a.what & CAP_DO_START)
        start(r);
    if (a.what & CAP_DO_STEP)
        relay_step(r);
}

/* ---- delivery reports ---------------------------------------------------- */

void relay_capture_on_report(struct relay *r, void *opaque, rd_kafka_resp_err_t err)
{
    bool ok = err == RD_KAFKA_RESP_ERR_NO_ERROR;
    enum kafka_fault fault = ok ? KAFKA_FAULT_OURS : kafka_fault_of(err, producer_fatal(&r->prod));
    if (ok) {
        relay_topic_granted(r);
    } else if (fault == KAFKA_FAULT_DENIED) {
        /* As polling does: named once, the stream restarted from the
         * confirmed position after the back-off, no event charged. Once per
         * burst: the stream's other messages fail alike. */
        if (r->producer_retry_at_ms <= relay_now_ms(r))
            relay_topic_denied(r, err);
    } else {
        if (log_limit_allow(&r->failures, stats_mono(), LOG_LVL_WARN, "delivery failed",
                            rd_kafka_err2name(err), 0))
            log_warn("delivery failed; the stream restarts from the confirmed position",
                     "error=%s", rd_kafka_err2name(err));
        /* Counted as polling counts it: what the relay purged or lost to a
         * fatal error it recovers from is nobody's failure. */
        struct failure_verdict v = engine_judge_failure(fault, true);
        if (v.counted)
            r->st.failed_total[v.permanent ? STATS_FAIL_PERMANENT : STATS_FAIL_RETRIABLE]++;
    }
    struct capture_env e = relay_capture_env(r);
    relay_capture_carry(r, capture_plan_report(&r->cap->plan, &e, (uint64_t)(uintptr_t)opaque, ok));
}

/* ---- the stream ---------------------------------------------------------- */

/* Hands event @p row of the source transaction being read to the producer. */
static enum capture_send produce(struct relay *r, const struct event_row *row, char *err, size_t errlen)
{
    struct capture *c = r->cap;
    char topic[256];
    int rc = relay_row_topic(r, row, topic, sizeof topic, err, errlen) < 0 ? -EINVAL : 0;
    if (rc == 0) {
        err[0] = '\0';
        void *opaque = (void *)(uintptr_t)capture_plan_opaque(&c->plan);
        rc = producer_send(&r->prod, row, topic, opaque, err, errlen);
    }
    struct capture_env e = relay_capture_env(r);
    struct capture_acts a = { 0 };
    bool too_large = false;
    enum capture_send v = capture_plan_sent(&c->plan, &e, rc, &too_large, &a);
    if (too_large)
        snprintf(err + strlen(err), errlen - strlen(err), ENGINE_TOO_LARGE_WHY);
    relay_capture_carry(r, a);
    return v;
}

/* An event that can never be produced (@p why): kept as a dead row and
 * passed over (relay_capture_dead.c), or, under on_poison = halt, the stream
 * stops before it, so nothing after it is confirmed and nothing is lost.
 * @return true when the stream goes on. */
static bool poison(struct relay *r, const struct event_row *row, uint64_t lsn, const char *why)
{
    struct capture_poison p;
    capture_poison_name(&p, row ? row->event_id : NULL, lsn, why);
    r->st.failed_total[STATS_FAIL_INVALID]++;
    if (!capture_plan_poison_halts(r->poison->halts, r->cfg->profile == RELAY_PROFILE_OUTBOX)) {
        if (relay_capture_dead_queue(r, row, p.event_id, p.reason))
            return true;
        why = "out of memory keeping it as a dead row";
    }
    r->st.halted = true;
    capture_poison_halt_reason(&p, row ? row->id : 0, why, r->st.halt_reason,
                               sizeof r->st.halt_reason);
    log_error("relaying halted: an event cannot be produced (on_poison=halt); fix it (or skip it "
              "by advancing the slot past it) and restart",
              "lsn=%s outbox_id=%" PRId64 " event_id=%s error=%s", p.at, row ? row->id : 0,
              p.event_id, log_quote(why));
    struct capture_env e = relay_capture_env(r);
    relay_capture_carry(r, capture_plan_halt(&r->cap->plan, &e));
    relay_notify_status(r);
    return false;
}

/* One pgoutput message. @return false when it must be offered again later. */
static bool on_change(struct relay *r, const struct pgo_msg *m, uint64_t lsn)
{
    struct capture *c = r->cap;
    struct capture_env e = relay_capture_env(r);
    char err[512];
    if (m->kind == PGO_BEGIN)
        return capture_plan_begin(&c->plan, m->commit_time_us);
    if (m->kind == PGO_COMMIT) {
        r->st.slot.transactions_total++;
        relay_capture_carry(r, capture_plan_commit_seen(&c->plan, &e, m->end_lsn));
        return true;
    }
    /* Rows the relay itself writes already settled (a dead-letter copy) or
     * that an application inserts as sent are not events. */
    if (!wal_event_wanted(m, r->cfg->schema, r->cfg->table, r->cfg->message_prefix))
        return true;
    int rc = wal_event_from_change(m, lsn, c->plan.commit_time_us, &c->cols, &c->ev, err, sizeof err);
    enum capture_send v = rc == 0 ? produce(r, &c->ev.row, err, sizeof err) : CAPTURE_SEND_POISON;
    if (v == CAPTURE_SEND_LATER || v == CAPTURE_SEND_DENIED) {
        if (v == CAPTURE_SEND_DENIED && r->producer_retry_at_ms <= relay_now_ms(r))
            relay_topic_denied(r, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
        wal_event_clear(&c->ev);
        return false;
    }
    if (v == CAPTURE_SEND_POISON && m->kind == PGO_MESSAGE)
        wal_event_message_context(m, err, sizeof err);
    bool go_on = v == CAPTURE_SENT ||
                 poison(r, c->ev.row.aggregate_type ? &c->ev.row : NULL, lsn, err);
    wal_event_clear(&c->ev);
    return go_on;
}

/* One XLogData or keepalive. @return false when it must be offered again later. */
static bool take_frame(struct relay *r, const uint8_t *buf, size_t len)
{
    struct capture *c = r->cap;
    struct capture_env e = relay_capture_env(r);
    struct capture_acts a = { 0 };
    struct pgo_frame f;
    if (pgo_frame_parse(buf, len, &f) < 0) {
        relay_capture_carry(r, capture_plan_fail(&c->plan, &e, "unreadable replication message"));
        return true;
    }
    if (f.kind == PGO_KEEPALIVE) {
        relay_capture_carry(r, capture_plan_keepalive(&c->plan, f.end_lsn, f.reply_requested));
        return true;
    }
    bool admitted = capture_plan_admit(&c->plan, &e, &a);
    relay_capture_carry(r, a);
    if (!admitted)
        return false;
    struct pgo_msg m;
    int d = pgo_decode(&c->rels, f.data, f.len, &m);
    if (d < 0) {
        char why[128];
        snprintf(why, sizeof why, "undecodable pgoutput message (%s)", strerror(-d));
        return poison(r, NULL, f.start_lsn, why);
    }
    if (!on_change(r, &m, f.start_lsn))
        return false;
    r->st.slot.received_lsn = f.start_lsn;
    capture_plan_read(&c->plan, f.end_lsn);
    return true;
}

static bool on_data(struct repl_conn *rc, const uint8_t *buf, size_t len, void *arg)
{
    (void)rc;
    struct relay *r = arg;
    struct capture *c = r->cap;
    /* Behind what was read ahead, in order; a commit may begin while they are taken. */
    if (capture_ahead_left(&c->ahead) && !c->plan.committing)
        ahead_drain(r);
    uint64_t now = uv_now(r->loop);
    enum capture_route to = capture_plan_route(&c->plan, capture_ahead_left(&c->ahead), now);
    if (to == CAPTURE_READ_AHEAD)
        return capture_ahead_push(&c->ahead, buf, len);
    if (to == CAPTURE_REST)
        repl_resume_after(&c->repl, capture_plan_rest_ms(&c->plan, now));
    return to == CAPTURE_TAKE && take_frame(r, buf, len);
}

/* What the socket held is read: commit what came, so that a trickle is
 * published at once; under a backlog the socket is rarely empty and the
 * transaction grows to CAPTURE_TXN_MAX_MSGS, while what arrives during a
 * commit is read ahead and makes the next one larger. */
static void on_idle(struct repl_conn *rc, void *arg)
{
    (void)rc;
    struct relay *r = arg;
    struct capture_env e = relay_capture_env(r);
    relay_capture_carry(r, capture_plan_idle(&r->cap->plan, &e));
}

static void on_streaming(struct repl_conn *rc, void *arg)
{
    (void)rc;
    struct relay *r = arg;
    char at[PGO_LSN_TEXT];
    pgo_lsn_text(r->cap->plan.confirmed, at);
    r->st.slot.streaming = true;
    r->st.slot.problem[0] = '\0';
    log_info("streaming from the replication slot", "slot=%s publication=%s from_lsn=%s",
             r->cfg->slot, r->cfg->publication, at);
    relay_capture_carry(r, capture_plan_streaming(&r->cap->plan));
}

static void on_lost(struct repl_conn *rc, const char *why, const char *sqlstate, void *arg)
{
    (void)rc;
    struct relay *r = arg;
    struct capture_loss l = capture_lost(r->cap->plan.state, why, sqlstate, r->st.slot.problem,
                                         sizeof r->st.slot.problem);
    if (l.say)
        log_warn(l.say, "slot=%s error=%s sqlstate=%s", r->cfg->slot, log_quote(why), sqlstate);
    struct capture_env e = relay_capture_env(r);
    relay_capture_carry(r, capture_plan_lost(&r->cap->plan, &e, l.busy));
}

void relay_capture_step(struct relay *r)
{
    struct capture *c = r->cap;
    struct capture_env e = relay_capture_env(r);
    /* What was read ahead goes first, before the plan says whether to read on. */
    if (capture_plan_may_drain(&c->plan, &e)) {
        ahead_drain(r);
        e = relay_capture_env(r);
    }
    relay_capture_carry(r, capture_plan_step(&c->plan, &e));
    if (capture_plan_lag_shown(&c->plan, &e))
        r->st.slot.lag_seconds = capture_plan_lag(&c->plan, stats_now(), PGB_EPOCH_UNIX_S);
}

/* ---- the interface: life, status, the plan's statements --------------------- */

static int capture_setup(struct relay *r, struct capture *c)
{
    const struct relay_config *cfg = r->cfg;
    capture_plan_init(&c->plan);
    if (sql_capture_init(&c->sql, cfg->schema, cfg->table, cfg->publication) < 0)
        return -EINVAL;
    (void)event_placement_parse(cfg->additional_placement, &c->placement, NULL, 0);
    c->cols = (struct wal_columns){
        .relay_table = cfg->profile == RELAY_PROFILE_OUTBOX,
        .event_id = cfg->column_event_id, .aggregate_type = cfg->column_aggregate_type,
        .aggregate_id = cfg->column_aggregate_id, .event_type = cfg->column_event_type,
        .payload = cfg->column_payload, .created_at = cfg->column_created_at,
        .placement = &c->placement,
    };
    struct repl_callbacks cb = { .on_streaming = on_streaming, .on_data = on_data,
                                 .on_idle = on_idle, .on_lost = on_lost, .arg = r };
    return repl_init(&c->repl, r->loop, cfg->pg_conninfo, &cb) < 0 ? -ENOMEM : 0;
}

/* relay.slot_recovery: a relay that cannot reconcile must say so before a failover, not after. */
static void recovery_setup(struct relay *r, struct capture *c)
{
    const struct relay_config *cfg = r->cfg;
    if (capture_recover_setup(&c->rec, cfg->slot_recovery == RELAY_SLOT_RECOVERY_RECONCILE,
                              cfg->on_sent == RELAY_ON_SENT_DELETE, cfg->message_prefix[0] != '\0',
                              cfg->profile == RELAY_PROFILE_DEBEZIUM))
        log_warn("relay.slot_recovery = reconcile cannot prove a failover's gap closed: after a "
                 "failover that leaves the slot behind this relay stops as with stop",
                 "slot=%s why=%s", cfg->slot, log_quote(c->rec.no_reconcile));
}

int relay_capture_start(struct relay *r)
{
    const struct relay_config *cfg = r->cfg;
    struct capture *c = calloc(1, sizeof *c);
    if (!c || capture_setup(r, c) < 0) {
        log_error("cannot set up log-based capture", "schema=%s table=%s", cfg->schema, cfg->table);
        if (c)
            sql_capture_free(&c->sql);
        free(c);
        return EXIT_CONFIG;
    }
    r->cap = c;
    r->st.slot.enabled = true;
    recovery_setup(r, c);
    return EXIT_OK;
}

void relay_capture_status(const struct relay *r, struct plan_state *s)
{
    const struct capture *c = r->cap;
    struct capture_env e = relay_capture_env(r);
    capture_plan_status(&c->plan, &e, r->cfg->heartbeat_ms, dead_queue_due(&c->dead, e.now_ms), s);
}

int relay_capture_act(struct relay *r, const struct plan_step *p)
{
    switch (p->act) {
    case PLAN_RETENTION: relay_capture_retention(r); break;
    case PLAN_HEARTBEAT: relay_capture_heartbeat(r); break;
    case PLAN_SLOT_QUERY: relay_capture_slot_query(r); break;
    case PLAN_SLOT_TAKE_OVER: relay_capture_take_over(r); break;
    case PLAN_RECORD_DEAD: relay_capture_dead_record(r); break;
    default: return -1;
    }
    return 0;
}

void relay_capture_stop(struct relay *r)
{
    struct capture *c = r->cap;
    repl_close(&c->repl);
    c->plan.state = CAPTURE_OFF;
    r->st.slot.streaming = false;
}

void relay_capture_free(struct relay *r)
{
    struct capture *c = r->cap;
    if (!c)
        return; /* its start failed before it had any */
    relay_capture_recover_drop(r);
    repl_free(&c->repl);
    capture_plan_free(&c->plan);
    pgo_relations_free(&c->rels);
    wal_event_clear(&c->ev);
    dead_queue_free(&c->dead);
    capture_ahead_free(&c->ahead);
    sql_capture_free(&c->sql);
    free(c);
    r->cap = NULL;
}
