/* relay_fence.c — relay.fencing = transactional: the rows in flight as one
 * Kafka transaction, its commit or abort and what follows for the batches;
 * and a fatal producer replaced. What becomes of the batches is the capture
 * mode's (txn_settle, txn_ended: relay_poll_fence.c; with wal, whose stream
 * commits its own transactions, nothing). */
#include "daemon/relay_int.h"

/* ---- producer ---------------------------------------------------------- */

/* A right Kafka refuses (core/kafka_rules.c) stays refused until someone
 * changes an ACL or the credentials: it is named once, when it starts or
 * changes, and the next producer (or claim) waits out a back-off
 * (plan_denied_delay), so that a principal without its ACLs costs a few
 * lines a minute, not dozens of replacements a second. */
static void denied(struct relay *r, enum kafka_denial d, int code)
{
    uint64_t delay = plan_denied_delay(r->denied_attempt, (uint64_t)rand());
    if (!stats_denial_named(&r->st, d)) {
        const char *hint = d == KAFKA_DENIAL_AUTHENTICATION
                               ? config_kafka_scram_hint(r->cfg, rd_kafka_version()) : NULL;
        log_error("kafka refuses the relay's principal a right; retrying with a back-off until "
                  "an ACL or the credentials change",
                  "denied=%s needs=%s error=%s transactional_id=%s retry_in_ms=%" PRIu64 "%s%s",
                  kafka_denial_name(d), log_quote(kafka_denial_need(d)),
                  rd_kafka_err2name((rd_kafka_resp_err_t)code), r->prod.txn_id, delay,
                  hint ? " check=" : "", hint ? log_quote(hint) : "");
    } else {
        log_debug("kafka still refuses the relay's principal a right", "denied=%s attempt=%u "
                  "retry_in_ms=%" PRIu64, kafka_denial_name(d), r->denied_attempt, delay);
    }
    r->st.kafka_denials_named |= 1u << d;
    r->st.kafka_denial = (int)d;
    snprintf(r->st.kafka_denial_error, sizeof r->st.kafka_denial_error, "%s",
             rd_kafka_err2name((rd_kafka_resp_err_t)code));
    r->denied_attempt++;
    r->producer_retry_at_ms = relay_now_ms(r) + delay;
}

/* The broker answered, or granted what it had refused: a refusal from now
 * on is a new one, named again, its back-off from the start. */
static void refusals_over(struct relay *r)
{
    r->denied_attempt = 0;
    r->st.kafka_denials_named = 0;
}

/* @return whether the relay is denied. */
static bool note_denial(struct relay *r, int code)
{
    enum kafka_denial d = kafka_denial_of(code);
    /* The broker answered the last producer: a refusal now is a new one. */
    if (r->st.kafka_answered || d == KAFKA_DENIAL_NONE)
        refusals_over(r);
    if (d == KAFKA_DENIAL_NONE) {
        r->st.kafka_denial = 0;
        r->producer_retry_at_ms = 0;
        return false;
    }
    denied(r, d, code);
    return true;
}

/* The broker answers every attempt here (the producer stays usable), so the
 * back-off grows for as long as the same right is refused. librdkafka keeps
 * the topic in its error state until its next periodic metadata refresh
 * (topic.metadata.refresh.interval.ms, minutes): the next attempt is a new
 * producer, which asks for the topic afresh. */
void relay_topic_denied(struct relay *r, int code)
{
    enum kafka_denial d = kafka_denial_of(code);
    /* A right not refused before starts its back-off afresh; one of the
     * rights refused in turns lets it grow. */
    if (!stats_denial_named(&r->st, d))
        r->denied_attempt = 0;
    denied(r, d, code);
    r->renew_producer = true;
}

/* What was refused works now: the back-off is over too, or the rows would
 * wait out the rest of a delay (up to a minute) that no refusal needs. */
static void granted(struct relay *r)
{
    if (r->st.kafka_denial)
        log_info("kafka grants the relay's principal its rights again", "was_denied=%s",
                 kafka_denial_name(r->st.kafka_denial));
    r->st.kafka_denial = 0;
    refusals_over(r);
    r->producer_retry_at_ms = 0;
}

void relay_topic_granted(struct relay *r)
{
    /* A delivery proves every right a produce needs (the producer id's too:
     * relay.fencing=none has no transaction to say so). */
    if (r->st.kafka_denial && r->st.kafka_denial != KAFKA_DENIAL_AUTHENTICATION)
        granted(r);
}

/* A refused producer stops now, and none runs until its back-off ends
 * (plan.c: then PLAN_REPLACE_PRODUCER). producer_down is set first: the
 * stop serves the reports of its purged rows, and the steps they take must
 * find it stopped. */
static bool stop_until_retry(struct relay *r)
{
    r->producer_down = true;
    producer_stop(&r->prod);
    return true;
}

/* The brokers refuse the producer's connections (authentication, TLS):
 * kept, librdkafka would connect again every second and be refused each
 * time. It is stopped now; the next one, which reads the secret and
 * certificate files afresh, starts after the back-off. */
bool relay_stop_producer(struct relay *r)
{
    int code = 0;
    enum kafka_denial d = producer_refused(&r->prod, &code);
    /* It had delivered before: a refusal now is a new one. */
    if (r->st.kafka_answered)
        refusals_over(r);
    denied(r, d, code);
    return stop_until_retry(r);
}

/* Kept until the next tick, the instance would have librdkafka connect
 * once or twice more meanwhile. */
static void relay_on_refused(void *arg)
{
    relay_step(arg);
}

int relay_producer_start(struct relay *r, char *err, size_t errlen)
{
    const struct producer_owner owner = { .report = relay_on_report, .on_refused = relay_on_refused,
                                          .arg = r, .stats = &r->st, .txn_slot = r->txn_slot };
    return producer_start(&r->prod, r->loop, r->cfg, &owner, err, errlen);
}

static const char *spare_name(enum producer_spare s)
{
    switch (s) {
    case PRODUCER_SPARE_FENCED: return "fenced";
    case PRODUCER_SPARE_DENIED: return "denied";
    case PRODUCER_SPARE_FAILED: return "not_answered";
    default: return "untried";
    }
}

/* The last instance waited behind a commit its coordinator cannot complete
 * (core/kafka_stall.h): the next one takes the other transactional id, if
 * this leadership fenced it (an older leader's producer of it can commit
 * nothing). The commit completes at the coordinator in time, and the id is
 * free again for the next such wait. */
static void switch_id(struct relay *r)
{
    char from[256], to[256];
    config_transactional_id_slot(r->cfg, r->txn_slot, from, sizeof from);
    config_transactional_id_slot(r->cfg, !r->txn_slot, to, sizeof to);
    if (r->spare != PRODUCER_SPARE_FENCED) {
        log_info("a new kafka producer under the same transactional id: the other is not usable; "
                 "it waits until the coordinator has completed the last commit",
                 "transactional_id=%s other=%s other_state=%s", from, to, spare_name(r->spare));
        return;
    }
    r->txn_slot = !r->txn_slot;
    log_info("a new kafka producer under the other transactional id, the last one held behind a "
             "commit its coordinator cannot complete", "transactional_id=%s was=%s", to, from);
}

/* A fatal error (e.g. the idempotent producer's epoch cannot be bumped)
 * leaves the instance unusable: its messages failed with __FATAL and stay
 * unsent; a new instance republishes them. @return true when usable again. */
bool relay_replace_producer(struct relay *r)
{
    char err[512];
    if (r->producer_down)
        log_debug("a new kafka producer, the last one refused", "attempt=%u", r->denied_attempt);
    else if (r->renew_producer)
        log_debug("a new kafka producer, to ask for the refused topic afresh", "");
    else if (producer_abandoned(&r->prod) && r->prod.switch_id)
        switch_id(r);
    else if (producer_abandoned(&r->prod))
        log_info("a new kafka producer, the last one given up on a broker that stopped answering", "");
    else if (note_denial(r, producer_fatal_code(&r->prod))) {
        /* The back-off runs before the next producer, not after it: an
         * idempotent producer asks for its id as it starts, and once the
         * right is granted nothing but a delivery says so; started now, it
         * would have its id at once and its rows wait out the whole delay. */
        return stop_until_retry(r);
    } else
        log_warn("replacing the kafka producer after a fatal error", "");
    r->renew_producer = r->producer_down = false;
    producer_stop(&r->prod);
    if (relay_producer_start(r, err, sizeof(err)) < 0) {
        log_error("cannot recreate the kafka producer", "error=%s", log_quote(err));
        r->backoff = true;
        return false;
    }
    /* Fenced means another relay may lead now: the new instance initialises
     * transactions (fencing in turn) only once the lock check says this
     * session still holds the lock (it fails if the session is gone). */
    if (producer_txn_state(&r->prod) != PRODUCER_TXN_OFF && r->st.role == STATS_ROLE_LEADER) {
        r->lead_unverified = true;
        r->lock_due = true;
    }
    return true;
}

/* ---- fencing: Kafka transactions --------------------------------------- */

/* With relay.fencing=transactional the rows of the batches in flight are one
 * Kafka transaction, committed once a batch has all its reports; a batch is
 * marked only after its transaction committed. A leader initialises
 * transactions before its first produce, which aborts whatever an older
 * leader still had open and fences it: a paused leader that wakes up cannot
 * make anything visible to read_committed consumers, nor mark it. */

/* What a leader's first init found of the other transactional id. Refused,
 * the relay works as before with one id; a commit held at its coordinator
 * then waits until the coordinator completes it. */
static void spare_found(struct relay *r)
{
    enum producer_spare was = r->spare;
    r->spare = r->prod.spare;
    if (r->spare == was)
        return;
    char id[256];
    config_transactional_id_slot(r->cfg, !r->txn_slot, id, sizeof id);
    if (r->spare == PRODUCER_SPARE_DENIED)
        log_warn("kafka refuses the relay's principal its other transactional id; a commit that a "
                 "broker holds up cannot be gone around (grant Write on that transactional id)",
                 "other_transactional_id=%s", id);
    else if (r->spare == PRODUCER_SPARE_FAILED)
        log_warn("the relay's other transactional id could not be initialised; an older leader's "
                 "producer of it is not fenced", "other_transactional_id=%s", id);
}

static void on_txn_ended(void *arg, unsigned gen, enum producer_txn_result res, const char *why)
{
    struct relay *r = arg;
    r->ops->txn_ended(r, gen, res);
    uint64_t ms = relay_now_ms(r) - r->txn_start_ms;
    switch (res) {
    case PRODUCER_TXN_DONE:
        if (gen == 0) {
            granted(r);
            if (r->prod.spare != PRODUCER_SPARE_UNTRIED)
                spare_found(r);
            log_info("kafka transactions initialised; older leaders are fenced",
                     "transactional_id=%s ms=%" PRIu64 " other_id=%s", r->prod.txn_id,
                     ms, spare_name(r->spare));
        }
        else
            log_debug("transaction committed", "ms=%" PRIu64, ms);
        break;
    case PRODUCER_TXN_ABORTED:
        r->st.txn_aborted_total++;
        log_warn("kafka transaction aborted; its rows stay unsent and are produced again",
                 "error=%s", log_quote(why));
        break;
    case PRODUCER_TXN_RETRY:
        /* given up on an instance whose connections are refused: named already */
        log_write(producer_fatal(&r->prod) ? LOG_LVL_DEBUG : LOG_LVL_WARN,
                  "kafka transactions not initialised yet; retrying", "error=%s", log_quote(why));
        break;
    case PRODUCER_TXN_FAILED:
        /* A refused right is named once, by relay_replace_producer. */
        if (kafka_denial_of(producer_fatal_code(&r->prod)) != KAFKA_DENIAL_NONE ||
            producer_is_refused(&r->prod))
            log_debug("kafka producer refused a right", "error=%s", log_quote(why));
        else if (producer_abandoned(&r->prod))
            log_debug("kafka transaction given up with its producer", "error=%s", log_quote(why));
        else
            log_error("kafka producer fenced or failed: nothing of its open transaction is "
                      "visible or marked; leadership is checked again before producing",
                      "transactional_id=%s error=%s", r->prod.txn_id, log_quote(why));
        break;
    }
    relay_step(r);
}

/* Carries out what plan_fence decided: the batches settled (and a held one
 * released) by the capture mode, then the transaction initialised or
 * committed; needs no PostgreSQL. plan_fence never answers init with any
 * of the batches' parts, nor a release with a commit, so this is its order. */
void relay_fence_step(struct relay *r, const struct plan_state *s)
{
    struct producer *p = &r->prod;
    struct fence_plan f = plan_fence(s);
    r->ops->txn_settle(r, &f);
    /* Not when this leadership fenced it: the instance may be taking it over
     * from one held behind a commit, whose own id would hold this init too. */
    bool fence_other = r->spare == PRODUCER_SPARE_UNTRIED || r->spare == PRODUCER_SPARE_FAILED;
    if (f.init && producer_txn_init(p, fence_other, on_txn_ended, r) == 0)
        r->txn_start_ms = relay_now_ms(r);
    if (f.commit && producer_txn_commit(p, on_txn_ended, r) == 0)
        r->txn_start_ms = relay_now_ms(r);
}
