/* relay_capture.c — relay.capture = wal: the outbox read from a logical
 * replication slot through pgoutput, relayed in commit order, and the slot
 * confirmed only up to what Kafka holds.
 *
 * Only the leader streams (the slot admits one reader anyway). Each Insert
 * into the outbox table, and each logical message with relay.message_prefix,
 * becomes the same Kafka message a claimed row would; nothing is written to
 * the table. The standby status update reports a source transaction's end
 * LSN as flushed only once every message of it, and of every transaction
 * before it, is acknowledged by Kafka — committed, with fencing =
 * transactional (pgo_acks keeps one entry per transaction in flight). Any
 * failure restarts the stream from what was confirmed: the server sends
 * again what followed, so nothing is lost and what was in flight may come twice.
 *
 * The main connection (relay.c) keeps the leader lock and runs what the
 * capture asks of it through the plan: heartbeats, the slot query, retention. */
#include "daemon/relay_int.h"

#include "core/pgoutput.h"
#include "core/wal_event.h"

/* A Kafka transaction is committed once the stream has nothing more to read
 * right now, or once it carries this many messages (under a backlog). */
#define CAPTURE_TXN_MAX_MSGS 20000
/* A stream that is not caught up (more WAL than this behind the server's end)
 * commits only when its transaction is full or has waited this long. */
#define CAPTURE_BEHIND_BYTES (1 << 20)
#define CAPTURE_LINGER_MS 20
#define CAPTURE_STATUS_EVERY_MS 10000
#define CAPTURE_RETRY_MS 1000
#define CAPTURE_SLOT_QUERY_EVERY_MS 5000

/* The stream generation in a delivery report's opaque, above the transaction's sequence. */
#define OPAQUE_GEN_SHIFT 48

static void capture_stop(struct relay *r, const char *why, bool failed);

static double pg_epoch_to_unix(int64_t us)
{
    return (double)us / 1e6 + 946684800.0;
}

static void lsn_text(uint64_t lsn, char *buf, size_t len)
{
    snprintf(buf, len, "%X/%X", (unsigned)(lsn >> 32), (unsigned)lsn);
}

static bool transactional(const struct relay *r)
{
    return producer_txn_state(&r->prod) != PRODUCER_TXN_OFF;
}

/* ---- confirming ---------------------------------------------------------- */

static void send_status(struct relay *r, bool reply)
{
    struct capture *c = &r->cap;
    uint8_t msg[PGO_STATUS_UPDATE_LEN];
    int64_t now_us = (int64_t)((stats_now() - 946684800.0) * 1e6);
    size_t n = pgo_status_update(msg, c->confirmed, now_us, reply);
    if (repl_send(&c->repl, msg, n) == 0) {
        c->status_sent_ms = relay_now_ms(r);
        r->st.slot.flushed_lsn = c->confirmed;
    }
}

/* The acknowledgements say @p lsn may be confirmed. */
static void confirm(struct relay *r, uint64_t lsn)
{
    struct capture *c = &r->cap;
    if (lsn <= c->confirmed)
        return;
    c->confirmed = lsn;
    c->last_progress_ms = relay_now_ms(r);
    r->st.slot.last_commit_time = stats_now();
    send_status(r, false);
}

/* The commit times of the transactions read and not confirmed: the oldest
 * one's age is the replication lag. */
static void lag_update(struct relay *r)
{
    struct capture *c = &r->cap;
    r->st.slot.lag_seconds = pgo_acks_waiting(&c->acks) > 0 && c->oldest_commit_us > 0
                                 ? stats_now() - pg_epoch_to_unix(c->oldest_commit_us)
                                 : 0;
    if (r->st.slot.lag_seconds < 0)
        r->st.slot.lag_seconds = 0;
}

/* ---- the Kafka transaction ----------------------------------------------- */

static void on_txn_ended(void *arg, unsigned gen, enum producer_txn_result res, const char *why)
{
    (void)gen;
    struct relay *r = arg;
    struct capture *c = &r->cap;
    c->committing = false;
    uint64_t ms = relay_now_ms(r) - r->txn_start_ms;
    if (res == PRODUCER_TXN_DONE) {
        uint64_t lsn = c->confirmed;
        for (size_t i = 0; i < c->n_done; i++)
            lsn = pgo_acks_done_n(&c->acks, c->done[i].seq, c->done[i].n);
        r->st.published_total += (uint64_t)c->done_msgs;
        log_debug("transaction committed", "messages=%ld ms=%" PRIu64, c->done_msgs, ms);
        c->n_done = 0;
        c->done_msgs = 0;
        confirm(r, lsn);
        lag_update(r);
        repl_resume(&c->repl);
    } else {
        r->st.txn_aborted_total++;
        log_warn("kafka transaction aborted; the stream restarts from the confirmed position",
                 "error=%s", log_quote(why));
        c->n_done = 0;
        c->done_msgs = 0;
        capture_stop(r, "kafka transaction aborted", true);
    }
    relay_step(r);
}

/* The messages of the open Kafka transaction become the committing ones. */
static void txn_commit(struct relay *r)
{
    struct capture *c = &r->cap;
    if (c->committing || producer_txn_state(&r->prod) != PRODUCER_TXN_OPEN)
        return;
    uv_timer_stop(&c->linger);
    if (c->txn_msgs == 0)
        return;
    struct capture_count *tmp = c->done;
    size_t cap = c->done_cap;
    c->done = c->open;
    c->n_done = c->n_open;
    c->done_cap = c->open_cap;
    c->done_msgs = c->txn_msgs;
    c->open = tmp;
    c->open_cap = cap;
    c->n_open = 0;
    c->txn_msgs = 0;
    c->committing = true;
    if (producer_txn_commit(&r->prod, on_txn_ended, r) == 0) {
        r->txn_start_ms = relay_now_ms(r);
        return;
    }
    c->committing = false;
    capture_stop(r, "cannot commit the kafka transaction", true);
}

static void on_linger(uv_timer_t *t)
{
    struct relay *r = t->data;
    if (r->cap.txn_msgs > 0)
        txn_commit(r);
}

/* One message of source transaction @p seq went into the open Kafka transaction. */
static bool count_open(struct capture *c, uint64_t seq)
{
    if (c->n_open > 0 && c->open[c->n_open - 1].seq == seq) {
        c->open[c->n_open - 1].n++;
        return true;
    }
    if (c->n_open == c->open_cap) {
        size_t cap = c->open_cap ? 2 * c->open_cap : 64;
        struct capture_count *v = realloc(c->open, cap * sizeof *v);
        if (!v)
            return false;
        c->open = v;
        c->open_cap = cap;
    }
    c->open[c->n_open++] = (struct capture_count){ .seq = seq, .n = 1 };
    return true;
}

/* ---- delivery reports ---------------------------------------------------- */

void relay_capture_on_report(struct relay *r, void *opaque, rd_kafka_resp_err_t err)
{
    struct capture *c = &r->cap;
    uint64_t v = (uint64_t)(uintptr_t)opaque;
    unsigned gen = (unsigned)(v >> OPAQUE_GEN_SHIFT);
    uint64_t seq = v & ((1ull << OPAQUE_GEN_SHIFT) - 1);
    if (c->unacked > 0 && gen == (c->gen & 0xffff))
        c->unacked--;
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (log_limit_allow(&r->failures, stats_mono(), LOG_LVL_WARN, "delivery failed",
                            rd_kafka_err2name(err), 0))
            log_warn("delivery failed; the stream restarts from the confirmed position",
                     "error=%s", rd_kafka_err2name(err));
        r->st.failed_total[kafka_fault_of(err, producer_fatal(&r->prod)) == KAFKA_FAULT_OURS
                               ? STATS_FAIL_PERMANENT
                               : STATS_FAIL_RETRIABLE]++;
        if (!transactional(r) && gen == (c->gen & 0xffff))
            capture_stop(r, "a delivery failed", true);
        /* transactional: the failure dooms the transaction; its commit aborts */
        if (transactional(r) && c->txn_msgs > 0)
            txn_commit(r);
        relay_step(r);
        return;
    }
    if (transactional(r) || gen != (c->gen & 0xffff))
        return;
    r->st.published_total++;
    confirm(r, pgo_acks_done(&c->acks, seq));
    lag_update(r);
    if (c->unacked == 0 && c->state == CAPTURE_OFF)
        relay_step(r); /* a restart waited for the reports */
}

/* ---- the stream ---------------------------------------------------------- */

/* Produces event @p ev of source transaction c->seq. @return 0; -ENOBUFS when
 * the producer cannot take it now (offered again later); -EINVAL for an event
 * that can never be produced (err says why). */
static int produce(struct relay *r, const struct event_row *row, char *err, size_t errlen)
{
    struct capture *c = &r->cap;
    char topic[256];
    int rc = row->topic && *row->topic
                 ? (snprintf(topic, sizeof topic, "%s", row->topic) < (int)sizeof topic ? 0 : -ENOSPC)
                 : event_topic_render(r->cfg->topic, row->aggregate_type, row->event_type, topic,
                                      sizeof topic);
    if (rc < 0) {
        snprintf(err, errlen, "invalid topic name: longer than %zu bytes", sizeof topic - 1);
        return -EINVAL;
    }
    if (event_topic_check(topic, err, errlen) < 0)
        return -EINVAL;
    void *opaque = (void *)(uintptr_t)(((uint64_t)(c->gen & 0xffff) << OPAQUE_GEN_SHIFT) | c->seq);
    err[0] = '\0';
    rc = producer_send(&r->prod, row, topic, opaque, err, errlen);
    if (rc == -ENOBUFS)
        return -ENOBUFS;
    if (rc == -EIO)
        return -EIO;
    if (rc < 0)
        return -EINVAL;
    pgo_acks_sent(&c->acks, c->seq);
    if (transactional(r)) {
        if (c->txn_msgs++ == 0)
            c->txn_first_ms = relay_now_ms(r);
        count_open(c, c->seq);
    } else {
        c->unacked++;
    }
    return 0;
}

/* An event that can never be produced: relaying stops here, before it, so
 * nothing after it is confirmed and nothing is lost (on_poison applies as
 * halt: a stream cannot hold one aggregate back and go on with the rest). */
static void poison(struct relay *r, const struct event_row *row, uint64_t lsn, const char *why)
{
    struct capture *c = &r->cap;
    char at[32];
    lsn_text(lsn, at, sizeof at);
    r->st.failed_total[STATS_FAIL_INVALID]++;
    r->st.halted = true;
    snprintf(r->st.halt_reason, sizeof r->st.halt_reason,
             "event at LSN %s (outbox_id %" PRId64 ", event_id %s) cannot be produced: %s", at,
             row ? row->id : 0, row && row->event_id ? row->event_id : "-", why);
    log_error("relaying halted: an event cannot be produced; fix it (or skip it by advancing the "
              "slot past it) and restart",
              "lsn=%s outbox_id=%" PRId64 " event_id=%s error=%s", at, row ? row->id : 0,
              row && row->event_id ? row->event_id : "-", log_quote(why));
    /* What came before it is good: committed and confirmed; the stream stays
     * stopped on this message until the process ends. */
    if (transactional(r) && c->txn_msgs > 0)
        txn_commit(r);
    relay_notify_status(r);
}

/* Rows the relay itself writes already settled (a dead-letter copy) or that
 * an application inserts as sent are not events. */
static bool settled_row(const struct pgo_msg *m)
{
    const struct pgo_value *sent = pgo_column(m, "sent_at");
    const struct pgo_value *dead = pgo_column(m, "dead_at");
    return (sent && sent->text) || (dead && dead->text);
}

static bool ours(const struct relay *r, const struct pgo_relation *rel)
{
    return rel && strcmp(rel->nspname, r->cfg->schema) == 0 && strcmp(rel->relname, r->cfg->table) == 0;
}

/* One pgoutput message. @return false when it must be offered again later. */
static bool on_change(struct relay *r, const struct pgo_msg *m, uint64_t lsn)
{
    struct capture *c = &r->cap;
    char err[512];
    int rc = 0;
    switch (m->kind) {
    case PGO_BEGIN:
        c->seq = pgo_acks_begin(&c->acks);
        c->commit_time_us = m->commit_time_us;
        if (pgo_acks_waiting(&c->acks) == 1)
            c->oldest_commit_us = m->commit_time_us;
        return c->seq != 0;
    case PGO_COMMIT:
        pgo_acks_commit(&c->acks, c->seq, m->end_lsn);
        c->last_commit_end = m->end_lsn;
        r->st.slot.transactions_total++;
        confirm(r, c->acks.confirmed);
        if (pgo_acks_waiting(&c->acks) == 1)
            c->oldest_commit_us = c->commit_time_us;
        return true;
    case PGO_INSERT:
        if (!ours(r, m->rel) || settled_row(m))
            return true;
        rc = wal_event_from_insert_cols(m, c->commit_time_us, &c->cols, &c->ev, err, sizeof err);
        break;
    case PGO_MESSAGE:
        if (strcmp(m->prefix, r->cfg->message_prefix) != 0)
            return true;
        rc = wal_event_from_message(m, lsn, c->commit_time_us, &c->ev, err, sizeof err);
        break;
    default:
        return true;
    }
    if (rc == 0)
        rc = produce(r, &c->ev.row, err, sizeof err);
    if (rc == -ENOBUFS || rc == -EIO) {
        wal_event_clear(&c->ev);
        return false;
    }
    if (rc < 0)
        poison(r, rc == -EINVAL && c->ev.row.aggregate_id ? &c->ev.row : NULL, lsn, err);
    wal_event_clear(&c->ev);
    return rc == 0;
}

/* Whether new messages may go to Kafka now: the leader, a producer with an
 * open transaction (or none), no commit running. */
static bool may_produce(const struct relay *r)
{
    enum producer_txn_state t = producer_txn_state(&r->prod);
    return r->st.role == STATS_ROLE_LEADER && !r->stopping && !r->st.halted && !r->st.refused &&
           !producer_fatal(&r->prod) && !r->cap.committing &&
           (t == PRODUCER_TXN_OFF || (t == PRODUCER_TXN_OPEN && !producer_txn_doomed(&r->prod)));
}

static bool on_data(struct repl_conn *rc, const uint8_t *buf, size_t len, void *arg)
{
    (void)rc;
    struct relay *r = arg;
    struct capture *c = &r->cap;
    struct pgo_frame f;
    if (pgo_frame_parse(buf, len, &f) < 0) {
        capture_stop(r, "unreadable replication message", true);
        return true;
    }
    if (f.kind == PGO_KEEPALIVE) {
        c->wal_end = f.end_lsn;
        if (f.reply_requested)
            send_status(r, false);
        return true;
    }
    /* A full transaction waits here, before its message is decoded. */
    if (!may_produce(r) || (transactional(r) && c->txn_msgs >= CAPTURE_TXN_MAX_MSGS)) {
        if (transactional(r) && c->txn_msgs > 0)
            txn_commit(r);
        return false;
    }
    struct pgo_msg m;
    int d = pgo_decode(&c->rels, f.data, f.len, &m);
    if (d < 0) {
        char why[128];
        snprintf(why, sizeof why, "undecodable pgoutput message (%s)", strerror(-d));
        poison(r, NULL, f.start_lsn, why);
        return false;
    }
    c->wal_end = f.end_lsn;
    if (!on_change(r, &m, f.start_lsn))
        return false;
    r->st.slot.received_lsn = f.start_lsn;
    return true;
}

/* What the socket held is read: commit what is complete, unless more is
 * clearly on its way and the transaction is young. */
static void on_idle(struct repl_conn *rc, void *arg)
{
    (void)rc;
    struct relay *r = arg;
    struct capture *c = &r->cap;
    if (!transactional(r) || c->txn_msgs == 0 || c->committing)
        return;
    bool behind = c->wal_end > c->last_commit_end + CAPTURE_BEHIND_BYTES;
    uint64_t age = relay_now_ms(r) - c->txn_first_ms;
    if (!behind || age >= CAPTURE_LINGER_MS)
        txn_commit(r);
    else if (!uv_is_active((uv_handle_t *)&c->linger))
        uv_timer_start(&c->linger, on_linger, CAPTURE_LINGER_MS - age, 0);
}

static void on_streaming(struct repl_conn *rc, void *arg)
{
    (void)rc;
    struct relay *r = arg;
    struct capture *c = &r->cap;
    char at[32];
    lsn_text(c->confirmed, at, sizeof at);
    c->state = CAPTURE_STREAMING;
    c->failures = 0;
    r->st.slot.streaming = true;
    r->st.slot.problem[0] = '\0';
    log_info("streaming from the replication slot", "slot=%s publication=%s from_lsn=%s",
             r->cfg->slot, r->cfg->publication, at);
    send_status(r, false);
}

/* What the server's refusal means for the operator. */
static void explain(struct relay *r, const char *why, const char *sqlstate)
{
    const char *hint = "";
    if (strcmp(sqlstate, "42704") == 0)
        hint = "; create it with `outbox-relay migrate` (relay.capture = wal)";
    else if (strcmp(sqlstate, "55000") == 0)
        hint = "; the slot was invalidated (max_slot_wal_keep_size): events after its last "
               "confirmed position may be gone. Drop and create it (`outbox-relay slot drop "
               "--yes`, `outbox-relay migrate`), then `outbox-relay verify` the window and "
               "`outbox-relay replay` what it finds missing";
    else if (strcmp(sqlstate, "55006") == 0)
        hint = "; another client reads the slot";
    else if (strcmp(sqlstate, "42501") == 0 || strcmp(sqlstate, "28000") == 0)
        hint = "; the role needs the REPLICATION attribute";
    snprintf(r->st.slot.problem, sizeof r->st.slot.problem, "%s%s", why, hint);
}

static void on_lost(struct repl_conn *rc, const char *why, const char *sqlstate, void *arg)
{
    (void)rc;
    struct relay *r = arg;
    struct capture *c = &r->cap;
    bool was_streaming = c->state == CAPTURE_STREAMING;
    if (*sqlstate || !was_streaming)
        explain(r, why, sqlstate);
    c->slot_busy = strcmp(sqlstate, "55006") == 0 && r->st.role == STATS_ROLE_LEADER;
    log_warn(was_streaming ? "replication stream lost" : "cannot stream from the replication slot",
             "slot=%s error=%s sqlstate=%s", r->cfg->slot, log_quote(why), sqlstate);
    capture_stop(r, NULL, true);
    relay_step(r);
}

/* Ends the stream; it starts again from the confirmed position once this
 * relay leads and what it sent is settled (relay_capture_step), after a
 * back-off when it ended on a failure (@p failed). */
static void capture_stop(struct relay *r, const char *why, bool failed)
{
    struct capture *c = &r->cap;
    if (why && c->state != CAPTURE_OFF)
        log_info("replication stream stopped", "reason=%s", log_quote(why));
    repl_close(&c->repl);
    uv_timer_stop(&c->linger);
    c->state = CAPTURE_OFF;
    /* A failure waits, longer each time in a row; a lost leadership waits
     * only for the lock to come back. */
    c->restart_at_ms = relay_now_ms(r);
    if (failed) {
        c->restart_at_ms += (uint64_t)CAPTURE_RETRY_MS << (c->failures < 5 ? c->failures : 5);
        c->failures++;
    }
    r->st.slot.streaming = false;
    r->st.slot.lag_seconds = 0;
}

/* Starts streaming when this relay leads and what the last stream sent is
 * settled: its transaction committed (or aborted), its reports in. */
static void capture_start(struct relay *r)
{
    struct capture *c = &r->cap;
    if (c->committing || c->txn_msgs > 0 || c->unacked > 0)
        return;
    pgo_acks_free(&c->acks);
    pgo_relations_free(&c->rels);
    c->n_open = c->n_done = 0;
    c->gen++;
    c->seq = 0;
    c->oldest_commit_us = 0;
    char at[32], sql[512];
    lsn_text(c->confirmed, at, sizeof at);
    /* A start LSN past the slot's skips what this process knows Kafka holds
     * but could not confirm before the stream broke. */
    snprintf(sql, sizeof sql,
             "START_REPLICATION SLOT \"%s\" LOGICAL %s (proto_version '1', publication_names "
             "'\"%s\"', messages 'true')",
             r->cfg->slot, at, r->cfg->publication);
    if (repl_start(&c->repl, sql) < 0) {
        c->restart_at_ms = relay_now_ms(r) + CAPTURE_RETRY_MS;
        return;
    }
    c->state = CAPTURE_STARTING;
}

void relay_capture_step(struct relay *r)
{
    struct capture *c = &r->cap;
    if (!c->on || r->finished || r->st.halted)
        return; /* halted: the stream stays stopped on the event at fault */
    bool leading = r->st.role == STATS_ROLE_LEADER && !r->stopping && !r->st.halted && !r->st.refused;
    if (!leading && c->state != CAPTURE_OFF) {
        if (transactional(r) && c->txn_msgs > 0)
            txn_commit(r);
        capture_stop(r, r->stopping ? "stopping" : "no longer the leader", false);
        return;
    }
    if (c->state == CAPTURE_OFF) {
        if (leading && may_produce(r) && relay_now_ms(r) >= c->restart_at_ms)
            capture_start(r);
        return;
    }
    if (c->state == CAPTURE_STREAMING && may_produce(r))
        repl_resume(&c->repl);
    if (c->state == CAPTURE_STREAMING &&
        relay_now_ms(r) - c->status_sent_ms >= CAPTURE_STATUS_EVERY_MS)
        send_status(r, false);
    lag_update(r);
}

/* ---- what the main connection does for the capture ------------------------ */

bool relay_capture_heartbeat_due(const struct relay *r)
{
    const struct capture *c = &r->cap;
    return c->on && r->cfg->heartbeat_ms > 0 && c->state == CAPTURE_STREAMING &&
           relay_now_ms((struct relay *)r) - c->last_progress_ms >= (uint64_t)r->cfg->heartbeat_ms;
}

static void on_heartbeat(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        log_warn("heartbeat failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        relay_session_evidence(r, res, "heartbeat");
    } else {
        r->st.slot.heartbeats_total++;
    }
    relay_step(r);
}

void relay_capture_heartbeat(struct relay *r)
{
    const char *params[] = { SQL_CAPTURE_HEARTBEAT_PREFIX };
    r->cap.last_progress_ms = relay_now_ms(r); /* one at a time, whatever its fate */
    pg_query(&r->pg, r->csql.heartbeat, 1, params, on_heartbeat, r);
}

bool relay_capture_slot_query_due(const struct relay *r)
{
    return r->cap.on && relay_now_ms((struct relay *)r) >= r->cap.slot_query_ms;
}

static uint64_t parse_lsn(const char *s)
{
    unsigned hi = 0, lo = 0;
    return s && sscanf(s, "%X/%X", &hi, &lo) == 2 ? ((uint64_t)hi << 32) | lo : 0;
}

static void on_slot(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    struct stats_slot *s = &r->st.slot;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        log_warn("slot query failed", "error=%s", log_quote(PQresultErrorMessage(res)));
        relay_step(r);
        return;
    }
    const char *v[SLOT_NCOLS];
    for (int k = 0; k < SLOT_NCOLS && k < PQnfields(res); k++)
        v[k] = PQgetisnull(res, 0, k) ? NULL : PQgetvalue(res, 0, k);
    if (PQnfields(res) < SLOT_NCOLS) {
        log_warn("slot query returned too few columns", "columns=%d", PQnfields(res));
        relay_step(r);
        return;
    }
    s->query_time = stats_now();
    s->known = v[SLOT_EXISTS] && v[SLOT_EXISTS][0] == 't';
    s->active = v[SLOT_ACTIVE] && v[SLOT_ACTIVE][0] == 't';
    s->active_pid = v[SLOT_ACTIVE_PID] ? atoi(v[SLOT_ACTIVE_PID]) : 0;
    snprintf(s->wal_status, sizeof s->wal_status, "%s", v[SLOT_WAL_STATUS] ? v[SLOT_WAL_STATUS] : "");
    s->confirmed_lsn = parse_lsn(v[SLOT_CONFIRMED_LSN]);
    s->restart_lsn = parse_lsn(v[SLOT_RESTART_LSN]);
    s->retained_bytes = v[SLOT_RETAINED_BYTES] ? strtoll(v[SLOT_RETAINED_BYTES], NULL, 10) : 0;
    s->lag_bytes = v[SLOT_LAG_BYTES] ? strtoll(v[SLOT_LAG_BYTES], NULL, 10) : 0;
    const char *plugin = v[SLOT_PLUGIN] ? v[SLOT_PLUGIN] : "pgoutput";
    if (!s->known)
        snprintf(s->problem, sizeof s->problem,
                 "replication slot \"%s\" does not exist; create it with `outbox-relay migrate` "
                 "(relay.capture = wal)", r->cfg->slot);
    else if (strcmp(plugin, "pgoutput") != 0)
        snprintf(s->problem, sizeof s->problem,
                 "replication slot \"%s\" uses the plugin %s; the relay reads pgoutput slots",
                 r->cfg->slot, plugin);
    else if (!(v[SLOT_DATABASE_OK] && v[SLOT_DATABASE_OK][0] == 't'))
        snprintf(s->problem, sizeof s->problem,
                 "replication slot \"%s\" belongs to another database", r->cfg->slot);
    else if (strcmp(s->wal_status, "lost") == 0)
        explain(r, "replication slot is invalidated (wal_status lost)", "55000");
    else if (!(v[SLOT_PUBLICATION_OK] && v[SLOT_PUBLICATION_OK][0] == 't'))
        snprintf(s->problem, sizeof s->problem,
                 "publication \"%s\" does not publish %s.%s; run `outbox-relay migrate`",
                 r->cfg->publication, r->cfg->schema, r->cfg->table);
    else if (r->cap.state == CAPTURE_STREAMING || r->st.role != STATS_ROLE_LEADER)
        s->problem[0] = '\0'; /* a leader not streaming keeps what its stream was told */
    relay_step(r);
}

void relay_capture_slot_query(struct relay *r)
{
    const char *params[] = { r->cfg->slot, r->cfg->publication };
    r->cap.slot_query_ms = relay_now_ms(r) + CAPTURE_SLOT_QUERY_EVERY_MS;
    pg_query(&r->pg, r->csql.slot_status, 2, params, on_slot, r);
}

static void on_taken_over(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        log_error("cannot end the session that reads the replication slot", "slot=%s error=%s",
                  r->cfg->slot, log_quote(PQresultErrorMessage(res)));
    for (int i = 0; PQresultStatus(res) == PGRES_TUPLES_OK && i < PQntuples(res); i++)
        log_warn("ended the session that read the replication slot: this relay leads",
                 "slot=%s pid=%s application_name=%s", r->cfg->slot, PQgetvalue(res, i, 0),
                 log_quote(PQgetvalue(res, i, 1)));
    r->cap.restart_at_ms = relay_now_ms(r) + 100; /* its walsender needs a moment to exit */
    relay_step(r);
}

void relay_capture_take_over(struct relay *r)
{
    const char *params[] = { r->cfg->slot };
    r->cap.slot_busy = false;
    pg_query(&r->pg, r->csql.take_over, 1, params, on_taken_over, r);
}

/* Retention of rows the relay only read: on_sent = mark keeps them for
 * relay.retention after they were written; on_sent = delete removes those
 * older than the newest confirmed commit (already in the WAL, and relayed or
 * on their way: deleting a row never takes its insert out of the stream). */
static void on_retention(struct pg_conn *pg, PGresult *res, void *arg)
{
    (void)pg;
    struct relay *r = arg;
    if (!res)
        return;
    long deleted = PQresultStatus(res) == PGRES_COMMAND_OK ? strtol(PQcmdTuples(res), NULL, 10) : 0;
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
        log_error("retention delete failed", "error=%s", log_quote(PQresultErrorMessage(res)));
    else if (deleted > 0)
        log_debug("retention deleted rows", "rows=%ld", deleted);
    if (deleted < 1000) {
        r->retention_due = false;
        r->last_retention_ms = relay_now_ms(r);
    }
    relay_step(r);
}

void relay_capture_retention(struct relay *r)
{
    char bound[64], limit[16] = "1000";
    double t = r->cfg->on_sent == RELAY_ON_SENT_DELETE ? r->st.slot.last_commit_time
                                                       : stats_now() - (double)r->cfg->retention_ms / 1000.0;
    if (t <= 0) {
        r->retention_due = false;
        r->last_retention_ms = relay_now_ms(r);
        return;
    }
    time_t secs = (time_t)t;
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(bound, sizeof bound, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(bound + n, sizeof bound - n, ".%06d+00", (int)((t - (double)secs) * 1e6));
    const char *params[] = { bound, limit };
    pg_query(&r->pg, r->csql.retention, 2, params, on_retention, r);
}

/* ---- life ---------------------------------------------------------------- */

int relay_capture_init(struct relay *r)
{
    struct capture *c = &r->cap;
    memset(c, 0, sizeof *c);
    if (r->cfg->capture != RELAY_CAPTURE_WAL)
        return 0;
    const struct relay_config *cfg = r->cfg;
    (void)event_placement_parse(cfg->additional_placement, &c->placement, NULL, 0);
    c->cols = (struct wal_columns){
        .relay_table = cfg->profile == RELAY_PROFILE_OUTBOX,
        .event_id = cfg->column_event_id, .aggregate_type = cfg->column_aggregate_type,
        .aggregate_id = cfg->column_aggregate_id, .event_type = cfg->column_event_type,
        .payload = cfg->column_payload, .created_at = cfg->column_created_at,
        .placement = &c->placement,
    };
    struct repl_callbacks cb = {
        .on_streaming = on_streaming,
        .on_data = on_data,
        .on_idle = on_idle,
        .on_lost = on_lost,
        .arg = r,
    };
    if (repl_init(&c->repl, r->loop, r->cfg->pg_conninfo, &cb) < 0)
        return -ENOMEM;
    uv_timer_init(r->loop, &c->linger);
    c->linger.data = r;
    c->on = true;
    r->st.slot.enabled = true;
    return 0;
}

void relay_capture_close(struct relay *r)
{
    struct capture *c = &r->cap;
    if (!c->on)
        return;
    repl_close(&c->repl);
    uv_timer_stop(&c->linger);
    uv_close((uv_handle_t *)&c->linger, NULL);
    c->state = CAPTURE_OFF;
    r->st.slot.streaming = false;
}

void relay_capture_free(struct relay *r)
{
    struct capture *c = &r->cap;
    if (!c->on)
        return;
    repl_free(&c->repl);
    pgo_acks_free(&c->acks);
    pgo_relations_free(&c->rels);
    wal_event_clear(&c->ev);
    free(c->open);
    free(c->done);
    c->on = false;
}
