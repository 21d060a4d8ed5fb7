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
#define CAPTURE_TXN_MAX_MSGS 10000
#define CAPTURE_STATUS_EVERY_MS 10000
#define CAPTURE_RETRY_MS 1000

/* The stream generation in a delivery report's opaque, above the transaction's sequence. */
#define OPAQUE_GEN_SHIFT 48

static void capture_stop(struct relay *r, const char *why, bool failed);
static bool ahead_drain(struct relay *r);

static double pg_epoch_to_unix(int64_t us)
{
    return (double)us / 1e6 + (double)PGB_EPOCH_UNIX_S;
}

static bool transactional(const struct relay *r)
{
    return producer_txn_state(&r->prod) != PRODUCER_TXN_OFF;
}

/* ---- confirming ---------------------------------------------------------- */

/* The standby status update: what the slot may forget. */
static void send_status(struct relay *r)
{
    struct capture *c = &r->cap;
    uint8_t msg[PGO_STATUS_UPDATE_LEN];
    int64_t now_us = (int64_t)((stats_now() - (double)PGB_EPOCH_UNIX_S) * 1e6);
    size_t n = pgo_status_update(msg, c->received, c->confirmed, now_us, false);
    if (repl_send(&c->repl, msg, n) == 0) {
        char at[PGO_LSN_TEXT];
        pgo_lsn_text(c->confirmed, at);
        c->status_sent_ms = relay_now_ms(r);
        r->st.slot.flushed_lsn = c->confirmed;
        log_debug("confirmed", "lsn=%s", at);
    }
}

/* The acknowledgements say @p lsn may be confirmed. */
void relay_capture_confirm(struct relay *r, uint64_t lsn)
{
    struct capture *c = &r->cap;
    if (lsn <= c->confirmed)
        return;
    c->confirmed = lsn;
    c->last_progress_ms = relay_now_ms(r);
    r->st.slot.last_commit_time = stats_now();
    send_status(r);
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
        relay_capture_confirm(r, lsn);
        lag_update(r);
        /* What was read ahead during the commit is produced now; the socket
         * may have nothing more for a while (a trickle), so the read that
         * ends in on_idle, which commits it, is not left to the next event. */
        if (ahead_drain(r))
            repl_kick(&c->repl);
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
    c->txn_whole = false;
    c->committing = true;
    if (producer_txn_commit(&r->prod, on_txn_ended, r) == 0) {
        r->txn_start_ms = relay_now_ms(r);
        return;
    }
    c->committing = false;
    capture_stop(r, "cannot commit the kafka transaction", true);
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
    if (c->queue_full) {
        c->queue_full = false;
        repl_resume(&c->repl);
    }
    if (transactional(r) || gen != (c->gen & 0xffff))
        return;
    r->st.published_total++;
    relay_capture_confirm(r, pgo_acks_done(&c->acks, seq));
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
    if (relay_row_topic(r, row, topic, sizeof topic, err, errlen) < 0)
        return -EINVAL;
    void *opaque = (void *)(uintptr_t)(((uint64_t)(c->gen & 0xffff) << OPAQUE_GEN_SHIFT) | c->seq);
    err[0] = '\0';
    int rc = producer_send(&r->prod, row, topic, opaque, err, errlen);
    if (rc == -ENOBUFS)
        return -ENOBUFS;
    if (rc == -EIO)
        return -EIO;
    if (rc < 0)
        return -EINVAL;
    pgo_acks_sent(&c->acks, c->seq);
    if (transactional(r)) {
        c->txn_msgs++;
        count_open(c, c->seq);
    } else {
        c->unacked++;
    }
    return 0;
}

/* An event that can never be produced (@p why): kept as a dead row and
 * passed over (relay_capture_dead.c), or, under on_poison = halt, the stream
 * stops before it, so nothing after it is confirmed and nothing is lost.
 * @return true when the stream goes on. */
static bool poison(struct relay *r, const struct event_row *row, uint64_t lsn, const char *why)
{
    struct capture *c = &r->cap;
    char at[PGO_LSN_TEXT], lsn_id[PGB_UUID_TEXT];
    pgo_lsn_text(lsn, at);
    wal_event_lsn_id(lsn, lsn_id);
    const char *event_id = row && row->event_id && *row->event_id ? row->event_id : lsn_id;
    r->st.failed_total[STATS_FAIL_INVALID]++;
    /* Debezium's table has no columns to keep a dead row in: it halts. */
    if (!r->poison->halts && r->cfg->profile == RELAY_PROFILE_OUTBOX) {
        char reason[600];
        snprintf(reason, sizeof reason, "%s (at LSN %s)", why, at);
        if (relay_capture_dead_queue(r, row, event_id, reason))
            return true;
        why = "out of memory keeping it as a dead row";
    }
    r->st.halted = true;
    snprintf(r->st.halt_reason, sizeof r->st.halt_reason,
             "event at LSN %s (outbox_id %" PRId64 ", event_id %s) cannot be produced: %s", at,
             row ? row->id : 0, event_id, why);
    log_error("relaying halted: an event cannot be produced (on_poison=halt); fix it (or skip it "
              "by advancing the slot past it) and restart",
              "lsn=%s outbox_id=%" PRId64 " event_id=%s error=%s", at, row ? row->id : 0, event_id,
              log_quote(why));
    /* What came before it is good: committed and confirmed; the stream stays
     * stopped on this message until the process ends. */
    if (transactional(r) && c->txn_msgs > 0)
        txn_commit(r);
    relay_notify_status(r);
    return false;
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
        c->in_txn = true;
        c->seq = pgo_acks_begin(&c->acks);
        c->commit_time_us = m->commit_time_us;
        if (pgo_acks_waiting(&c->acks) == 1)
            c->oldest_commit_us = m->commit_time_us;
        return c->seq != 0;
    case PGO_COMMIT:
        c->in_txn = false;
        c->txn_whole = c->txn_whole || c->txn_msgs > 0;
        pgo_acks_commit(&c->acks, c->seq, m->end_lsn);
        r->st.slot.transactions_total++;
        relay_capture_confirm(r, c->acks.confirmed);
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
        /* A full queue empties as Kafka acknowledges: a commit (which
         * flushes) or the reports resume the stream. */
        c->queue_full = rc == -ENOBUFS;
        if (c->queue_full && transactional(r) && c->txn_msgs > 0)
            txn_commit(r);
        return false;
    }
    if (rc < 0 && m->kind == PGO_MESSAGE) {
        /* No row holds a message: what it said goes with the error. */
        size_t n = strlen(err), k = 0;
        n += (size_t)snprintf(err + n, sizeof err - n, "; content: ");
        for (; k < m->content_len && n + 1 < sizeof err; k++)
            err[n++] = m->content[k] >= 0x20 && m->content[k] < 0x7f ? m->content[k] : '?';
        err[n] = '\0';
    }
    bool go_on = rc == 0 || poison(r, c->ev.row.aggregate_type ? &c->ev.row : NULL, lsn, err);
    wal_event_clear(&c->ev);
    return go_on;
}

/* Whether new messages may go to Kafka now: the leader, a producer with an
 * open transaction (or none), no commit running. */
static bool may_produce(const struct relay *r)
{
    enum producer_txn_state t = producer_txn_state(&r->prod);
    /* Stopping, the source transaction being read is finished first: its
     * events are then confirmed, and the next relay does not send them again. */
    bool stopping = r->stopping && !r->cap.in_txn;
    return r->st.role == STATS_ROLE_LEADER && !stopping && !r->st.halted && !r->st.refused &&
           !producer_fatal(&r->prod) && !r->cap.committing &&
           (t == PRODUCER_TXN_OFF || (t == PRODUCER_TXN_OPEN && !producer_txn_doomed(&r->prod)));
}

/* One XLogData or keepalive. @return false when it must be offered again later. */
static bool take_frame(struct relay *r, const uint8_t *buf, size_t len)
{
    struct capture *c = &r->cap;
    struct pgo_frame f;
    if (pgo_frame_parse(buf, len, &f) < 0) {
        capture_stop(r, "unreadable replication message", true);
        return true;
    }
    if (f.kind == PGO_KEEPALIVE) {
        /* Frames come in order: what a keepalive says was sent has been read. */
        if (f.end_lsn > c->received)
            c->received = f.end_lsn;
        /* With nothing read left unconfirmed, the server's position is
         * confirmed itself: the slot moves past WAL that held no event, and
         * a server shutting down, whose walsender waits until its last
         * position is confirmed, does not wait for the next event. */
        bool idle = !c->in_txn && pgo_acks_waiting(&c->acks) == 0;
        if (idle && f.end_lsn > c->confirmed) {
            c->confirmed = f.end_lsn;
            send_status(r);
        } else if (f.reply_requested) {
            send_status(r);
        }
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
        return poison(r, NULL, f.start_lsn, why);
    }
    if (!on_change(r, &m, f.start_lsn))
        return false;
    r->st.slot.received_lsn = f.start_lsn;
    if (f.end_lsn > c->received)
        c->received = f.end_lsn;
    return true;
}

/* ---- reading ahead while a commit runs ----------------------------------- */

/* While a Kafka transaction commits nothing can be produced; the stream is
 * read on into memory meanwhile (up to CAPTURE_AHEAD_BYTES), so PostgreSQL's
 * walsender is not held back by the commit's round trips. */
#define CAPTURE_AHEAD_BYTES (2 << 20)

struct capture_frame {
    size_t len;
    uint8_t data[];
};

static bool ahead_push(struct capture *c, const uint8_t *buf, size_t len)
{
    if (c->ahead_bytes + len > CAPTURE_AHEAD_BYTES)
        return false;
    if (c->n_ahead == c->ahead_cap) {
        size_t cap = c->ahead_cap ? 2 * c->ahead_cap : 256;
        struct capture_frame **v = realloc(c->ahead, cap * sizeof *v);
        if (!v)
            return false;
        c->ahead = v;
        c->ahead_cap = cap;
    }
    struct capture_frame *f = malloc(sizeof *f + len);
    if (!f)
        return false;
    f->len = len;
    memcpy(f->data, buf, len);
    c->ahead[c->n_ahead++] = f;
    c->ahead_bytes += len;
    return true;
}

/* Offers the frames read ahead, oldest first. @return true when none is left. */
static bool ahead_drain(struct relay *r)
{
    struct capture *c = &r->cap;
    size_t i = c->ahead_head;
    while (i < c->n_ahead && c->state == CAPTURE_STREAMING) {
        struct capture_frame *f = c->ahead[i];
        if (!take_frame(r, f->data, f->len))
            break;
        c->ahead_bytes -= f->len;
        free(f);
        i++;
    }
    c->ahead_head = i;
    if (i < c->n_ahead)
        return false;
    c->ahead_head = c->n_ahead = 0;
    return true;
}

static void ahead_clear(struct capture *c)
{
    for (size_t i = c->ahead_head; i < c->n_ahead; i++)
        free(c->ahead[i]);
    c->ahead_head = c->n_ahead = 0;
    c->ahead_bytes = 0;
}

static bool on_data(struct repl_conn *rc, const uint8_t *buf, size_t len, void *arg)
{
    (void)rc;
    struct relay *r = arg;
    struct capture *c = &r->cap;
    /* Behind what was read ahead, in order. */
    if (c->n_ahead > c->ahead_head) {
        if (!c->committing)
            ahead_drain(r);
        if (c->n_ahead > c->ahead_head) /* a commit began while they were taken */
            return c->committing && ahead_push(c, buf, len);
    }
    if (c->committing)
        return ahead_push(c, buf, len);
    return take_frame(r, buf, len);
}

/* What the socket held is read: commit what came, so that a trickle is
 * published at once; under a backlog the socket is rarely empty and the
 * transaction grows to CAPTURE_TXN_MAX_MSGS, while what arrives during a
 * commit is read ahead and makes the next one larger. */
static void on_idle(struct repl_conn *rc, void *arg)
{
    (void)rc;
    struct relay *r = arg;
    struct capture *c = &r->cap;
    /* Half a source transaction confirms nothing: the rest is on its way. */
    if (transactional(r) && c->txn_whole && !c->committing)
        txn_commit(r);
}

static void on_streaming(struct repl_conn *rc, void *arg)
{
    (void)rc;
    struct relay *r = arg;
    struct capture *c = &r->cap;
    char at[PGO_LSN_TEXT];
    pgo_lsn_text(c->confirmed, at);
    c->state = CAPTURE_STREAMING;
    c->failures = 0;
    r->st.slot.streaming = true;
    r->st.slot.problem[0] = '\0';
    log_info("streaming from the replication slot", "slot=%s publication=%s from_lsn=%s",
             r->cfg->slot, r->cfg->publication, at);
    send_status(r);
}

/* What the server's refusal means for the operator. */
void relay_capture_explain(struct relay *r, const char *why, const char *sqlstate)
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
    if (c->state == CAPTURE_ENDING) {
        capture_stop(r, NULL, false); /* ended as asked */
        relay_step(r);
        return;
    }
    bool was_streaming = c->state == CAPTURE_STREAMING;
    if (*sqlstate || !was_streaming)
        relay_capture_explain(r, why, sqlstate);
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
    if (c->committing || c->txn_msgs > 0 || c->unacked > 0 || relay_failover_blocks(r))
        return;
    pgo_acks_free(&c->acks);
    pgo_relations_free(&c->rels);
    relay_capture_dead_clear(r); /* unconfirmed: the new stream reads those events again */
    ahead_clear(c);
    c->n_open = c->n_done = 0;
    c->in_txn = c->txn_whole = false;
    c->gen++;
    c->seq = 0;
    c->oldest_commit_us = 0;
    char at[PGO_LSN_TEXT], sql[512];
    pgo_lsn_text(c->confirmed, at);
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

/* Nothing of the stream waits for Kafka or PostgreSQL, and no source
 * transaction is half read. */
static bool drained(const struct capture *c)
{
    return !c->committing && c->txn_msgs == 0 && c->unacked == 0 && c->n_dead == 0 &&
           !(c->in_txn && c->state == CAPTURE_STREAMING);
}

bool relay_capture_settled(const struct relay *r)
{
    const struct capture *c = &r->cap;
    if (!c->on)
        return true;
    /* Halted, the stream stays on the event at fault and its source
     * transaction cannot be finished: the server keeps what was confirmed
     * before, and the Kafka transaction holding that transaction's first
     * events is never committed. Only the deliveries still awaited are
     * waited for, not the shutdown's deadline. */
    if (r->st.halted)
        return !c->committing && c->unacked == 0;
    /* The stream too is closed: its last status update reached the server. */
    return drained(c) && c->state == CAPTURE_OFF;
}

void relay_capture_step(struct relay *r)
{
    struct capture *c = &r->cap;
    if (!c->on || r->finished || r->st.halted)
        return; /* halted: the stream stays stopped on the event at fault */
    bool leading = r->st.role == STATS_ROLE_LEADER && !r->stopping && !r->st.halted && !r->st.refused;
    /* A fatal producer's messages fail: the stream starts again on its successor. */
    if (producer_fatal(&r->prod) && c->state != CAPTURE_OFF && !c->committing) {
        capture_stop(r, "the kafka producer failed", true);
        return;
    }
    if (!leading && c->state != CAPTURE_OFF) {
        if (!r->stopping || r->st.role != STATS_ROLE_LEADER || r->st.refused) {
            /* Without the lock the rest of a source transaction may not be
             * produced, and waiting for Kafka with the slot held would keep
             * the next leader out and a server shutting down waiting (its
             * walsender exits only once its position is confirmed). The
             * slot is let go now; what Kafka takes meanwhile still moves
             * the position this process starts its next stream from. */
            if (transactional(r) && c->txn_msgs > 0)
                txn_commit(r);
            capture_stop(r, "no longer the leader", false);
            return;
        }
        /* Stopping: the source transaction being read is finished first, then
         * what Kafka took is committed and confirmed before the stream
         * closes, so that the next reader does not send it again. */
        if (c->in_txn && c->state == CAPTURE_STREAMING && may_produce(r) && ahead_drain(r)) {
            repl_resume(&c->repl);
            return;
        }
        if (transactional(r) && c->txn_msgs > 0)
            txn_commit(r);
        if (!drained(c) && c->state == CAPTURE_STREAMING)
            return;
        /* The last status update must reach the server before the socket closes. */
        if (c->state == CAPTURE_STREAMING && repl_end(&c->repl) == 0) {
            log_info("replication stream stopped", "reason=stopping");
            c->state = CAPTURE_ENDING;
            return;
        }
        if (c->state == CAPTURE_ENDING)
            return;
        capture_stop(r, "stopping", false);
        relay_step(r); /* the plan may finish now */
        return;
    }
    if (c->state == CAPTURE_OFF) {
        if (leading && may_produce(r) && relay_now_ms(r) >= c->restart_at_ms)
            capture_start(r);
        return;
    }
    if (c->state == CAPTURE_STREAMING && may_produce(r) && ahead_drain(r))
        repl_resume(&c->repl);
    if (c->state == CAPTURE_STREAMING &&
        relay_now_ms(r) - c->status_sent_ms >= CAPTURE_STATUS_EVERY_MS)
        send_status(r);
    lag_update(r);
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
    relay_capture_dead_free(r);
    ahead_clear(c);
    free(c->ahead);
    c->ahead = NULL;
    c->on = false;
}
