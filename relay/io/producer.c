/* producer.c — librdkafka's producer driven from the libuv loop. */
#include "io/producer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/connect_json.h"
#include "core/kafka_security.h"
#include "core/kafka_rules.h"
#include "base/log.h"
#include "io/producer_int.h"

#include <cjson/cJSON.h>


/* ---- acknowledgements ---------------------------------------------------
 * A broker that accepts requests and never answers stays UP in librdkafka's
 * statistics until socket.timeout.ms (10 s, kafka_rules.c) cuts a request
 * and closes the connection. The clock below does not depend on that: it
 * runs while messages are in flight and restarts at every acknowledgement;
 * /readyz fails once it passes relay.ack_timeout_ms. Failed reports do not
 * restart it: they are not progress, though the clock stops when nothing is
 * left in flight. */

static void ack_clock_sent(struct producer *p)
{
    if (p->in_flight++ == 0 && p->owner.stats)
        stats_kafka_wait_begins(p->owner.stats, stats_mono());
    if (p->owner.stats)
        p->owner.stats->kafka_in_flight = p->in_flight;
}

static void ack_clock_report(struct producer *p, bool acknowledged)
{
    if (p->in_flight > 0)
        p->in_flight--;
    if (!p->owner.stats)
        return;
    p->owner.stats->kafka_in_flight = p->in_flight;
    if (acknowledged) {
        p->owner.stats->kafka_ack_clock = stats_mono();
        p->owner.stats->kafka_owed = false;
    }
}

/* Logs when the clock passes the threshold and when it is over; the readiness
 * check itself is computed at each request (health_ready). */
static void ack_clock_watch(struct producer *p)
{
    if (!p->owner.stats || !p->cfg)
        return;
    double wait = stats_ack_wait(p->owner.stats, stats_mono());
    double limit = p->cfg->ack_timeout_ms / 1000.0;
    bool stalled = p->cfg->ack_timeout_ms > 0 && wait >= limit;
    if (stalled && !p->ack_stalled)
        log_warn("no acknowledgement from kafka", "in_flight=%" PRId64 " waited_s=%.1f "
                 "ack_timeout_ms=%d", p->in_flight, wait, p->cfg->ack_timeout_ms);
    else if (!stalled && p->ack_stalled)
        log_info("kafka acknowledgements resumed", "in_flight=%" PRId64, p->in_flight);
    p->ack_stalled = stalled;
}

/* The instance cannot go on: it takes nothing more, and what waits in its
 * queues is purged now, after the last message it accepted from us.
 * librdkafka purges its queues itself when the error is raised, on its own
 * thread; a message rd_kafka_producev() was enqueueing at that moment (it
 * checked for a fatal error before) lands after that purge and would wait
 * for message.timeout.ms, and the batch and the replacement with it. Purged,
 * such messages are reported at once with __PURGE_QUEUE, not the rows'
 * fault. Requests in flight are left alone: their outcome is real. */
void producer_set_fatal(struct producer *p)
{
    bool first = !p->fatal;
    p->fatal = true;
    if (p->owner.stats) {
        p->owner.stats->producer_fatal = true;
        /* Its messages will fail, not be answered: the wait on Kafka goes
         * on (with its clock) until Kafka answers the next instance, or
         * /readyz would pass again at each replacement. */
        if (stats_kafka_waiting(p->owner.stats))
            p->owner.stats->kafka_owed = true;
    }
    if (first && p->rk)
        rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE);
}

/* A fatal error (an idempotent or transactional producer that cannot go on,
 * e.g. fenced by a newer producer of the same transactional.id). */
static void on_fatal(struct producer *p)
{
    char buf[512];
    rd_kafka_resp_err_t orig = rd_kafka_fatal_error(p->rk, buf, sizeof(buf));
    if (!p->fatal_code)
        p->fatal_code = orig;
    producer_set_fatal(p);
    /* A right Kafka refuses was named when it was first refused (relay_fence.c);
     * each retry of the back-off repeats it only at debug level, as does a
     * refusal met while another is being waited out (a principal without
     * any right: its producer id, while the topic's back-off runs). */
    enum kafka_denial d = kafka_denial_of(orig);
    bool named = p->owner.stats && d != KAFKA_DENIAL_NONE &&
                 (p->owner.stats->kafka_denial || stats_denial_named(p->owner.stats, d));
    if (named)
        log_debug("kafka producer fatal error", "error=%s reason=%s", rd_kafka_err2name(orig),
                  log_quote(buf));
    else
        log_error("kafka producer fatal error", "error=%s reason=%s", rd_kafka_err2name(orig),
                  log_quote(buf));
}

static void on_error(struct producer *p, rd_kafka_event_t *ev)
{
    if (rd_kafka_event_error_is_fatal(ev)) {
        on_fatal(p);
        return;
    }
    /* Transport errors and "all brokers down" are retried by librdkafka itself;
     * refused credentials and certificates would be, every second, refused each
     * time: the instance takes nothing more, the relay replaces it after a back-off. */
    rd_kafka_resp_err_t err = rd_kafka_event_error(ev);
    const char *reason = rd_kafka_event_error_string(ev);
    enum kafka_denial d = kafka_denial_of_event(err, reason);
    struct relay_stats *st = p->owner.stats;
    int known = st ? st->kafka_denial : 0;
    if (kafka_denial_at_connect(d)) {
        if (st) {
            st->kafka_denial = (int)d;
            snprintf(st->kafka_denial_error, sizeof st->kafka_denial_error, "%s", rd_kafka_err2name(err));
        }
        p->refused_code = p->refused ? p->refused_code : (int)err;
        p->refused = d;
        producer_set_fatal(p);
        producer_txn_give_up(p);
    }
    /* One warning per broker and cause (a broker restarting is refused until
     * it is back); debug for a refusal named before, and what echoes it. */
    const char *hint = kafka_tls_hint(reason);
    bool echo = kafka_denial_at_connect(known) && (d == KAFKA_DENIAL_NONE || (int)d == known);
    int level = kafka_notice_error(&p->notice, err, reason) && !echo ? LOG_LVL_WARN : LOG_LVL_DEBUG;
    if (hint)
        log_write(level, "kafka error", "error=%s reason=%s check=%s", rd_kafka_err2name(err),
                  log_quote(reason), log_quote(hint));
    else
        log_write(level, "kafka error", "error=%s reason=%s", rd_kafka_err2name(err),
                  log_quote(reason));
}

/* A transaction held by a broker that stopped answering (core/kafka_stall.h):
 * the instance is given up, the plan replaces it as a fatal one; held behind
 * a commit the coordinator cannot complete, the next instance takes the spare
 * transactional.id. */
static void stall_watch(struct producer *p, uint64_t timeouts, uint64_t adds)
{
    if (p->txn == PRODUCER_TXN_OFF || p->fatal || p->abandoned)
        return;
    uint64_t now = uv_now(p->loop);
    bool committing = producer_txn_committing(p);
    double since = stats_ack_wait(p->owner.stats, stats_mono());
    uint64_t progress = now - (uint64_t)(since * 1000.0);
    kafka_stall_count(&p->stall, timeouts, now);
    kafka_stall_count_adds(&p->stall, adds, progress, now);
    bool waiting = p->in_flight > 0 || committing;
    if (kafka_stall_behind_commit(&p->stall, waiting, now)) {
        p->switch_id = true;
        log_warn("kafka transaction held behind a commit its coordinator cannot complete (a marker "
                 "waits on a broker that stopped answering); replacing the producer under the other "
                 "transactional id, the transaction's rows are produced again",
                 "in_flight=%" PRId64 " waited_s=%.1f add_partitions_requests=%" PRIu64
                 " transactional_id=%s", p->in_flight, since, adds - p->stall.adds_base, p->txn_id);
    } else if (kafka_stall_give_up(&p->stall, waiting, progress, now)) {
        log_warn("kafka transaction held by a broker that stopped answering; replacing the producer, "
                 "the transaction's rows are produced again",
                 "in_flight=%" PRId64 " committing=%s waited_s=%.1f requests_timed_out=%" PRIu64,
                 p->in_flight, committing ? "true" : "false", since, timeouts);
    } else {
        return;
    }
    p->owner.stats->producer_stalled_total++;
    producer_txn_abandon(p);
}

bool producer_abandoned(const struct producer *p)
{
    return p->abandoned;
}

/* librdkafka's statistics JSON, served on the loop thread by producer_poll. */
static void on_stats(struct producer *p, const char *json)
{
    if (!p->owner.stats || !json)
        return;
    ack_clock_watch(p);
    cJSON *root = cJSON_Parse(json);
    if (!root)
        return;
    const cJSON *msg_cnt = cJSON_GetObjectItemCaseSensitive(root, "msg_cnt");
    if (cJSON_IsNumber(msg_cnt))
        p->owner.stats->producer_queue_msgs = (int64_t)msg_cnt->valuedouble;
    int up = 0, total = 0;
    uint64_t timeouts = 0, adds = 0;
    const cJSON *brokers = cJSON_GetObjectItemCaseSensitive(root, "brokers");
    const cJSON *b;
    cJSON_ArrayForEach(b, brokers) {
        /* every connection's, the coordinator's and the bootstrap entries' too */
        const cJSON *tmo = cJSON_GetObjectItemCaseSensitive(b, "req_timeouts");
        if (cJSON_IsNumber(tmo))
            timeouts += (uint64_t)tmo->valuedouble;
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(b, "req");
        const cJSON *add = cJSON_GetObjectItemCaseSensitive(req, "AddPartitionsToTxn");
        if (cJSON_IsNumber(add))
            adds += (uint64_t)add->valuedouble;
        const cJSON *nodeid = cJSON_GetObjectItemCaseSensitive(b, "nodeid");
        const cJSON *state = cJSON_GetObjectItemCaseSensitive(b, "state");
        const cJSON *bname = cJSON_GetObjectItemCaseSensitive(b, "name");
        bool is_up = cJSON_IsString(state) && !strcmp(state->valuestring, "UP");
        if (is_up && cJSON_IsString(bname))
            kafka_notice_broker_up(&p->notice, bname->valuestring);
        /* Bootstrap entries (nodeid -1) are addresses, not brokers. */
        if (!cJSON_IsNumber(nodeid) || nodeid->valuedouble < 0)
            continue;
        kafka_stall_broker(&p->stall, (int32_t)nodeid->valuedouble, is_up, uv_now(p->loop));
        if (total < STATS_MAX_BROKERS) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "nodename");
            struct stats_broker *sb = &p->owner.stats->brokers[total];
            sb->id = (int32_t)nodeid->valuedouble;
            snprintf(sb->name, sizeof(sb->name), "%s",
                     cJSON_IsString(name) ? name->valuestring : "");
            snprintf(sb->state, sizeof(sb->state), "%s",
                     cJSON_IsString(state) ? state->valuestring : "");
        }
        total++;
        if (is_up)
            up++;
    }
    p->owner.stats->n_brokers = total < STATS_MAX_BROKERS ? total : STATS_MAX_BROKERS;
    p->owner.stats->brokers_up = up;
    p->owner.stats->brokers_total = total;
    /* A broker is UP once authenticated: the credentials and certificates
     * were accepted after all (a standby produces nothing that would say so). */
    if (up > 0 && kafka_denial_at_connect(p->owner.stats->kafka_denial))
        p->owner.stats->kafka_denial = KAFKA_DENIAL_NONE;
    cJSON_Delete(root);
    stall_watch(p, timeouts, adds);
}


static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    log_write(kafka_log_level(level, fac, buf), "librdkafka", "facility=%s detail=%s", fac,
              log_quote(buf));
}

/* @p slot: which of the relay's transactional ids, when @p transactional. */
static rd_kafka_conf_t *conf_build(const struct relay_config *cfg, bool transactional, unsigned slot,
                                   char *errbuf, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char err[512];
    size_t n;
    const struct kafka_setting *s = kafka_producer_settings(&n);
    for (size_t i = 0; i < n; i++) {
        if (rd_kafka_conf_set(conf, s[i].key, s[i].value, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
            snprintf(errbuf, errlen, "kafka.%s: %s", s[i].key, err);
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    }
    /* Room for every batch in flight, unless the operator sized the queue
     * (config_validate then checks that it is large enough). */
    long need = (long)cfg->batch_size * RELAY_BATCHES_IN_FLIGHT;
    if (need > PRODUCER_QUEUE_MESSAGES_DEFAULT) {
        char v[24];
        snprintf(v, sizeof(v), "%ld", need);
        rd_kafka_conf_set(conf, "queue.buffering.max.messages", v, err, sizeof(err));
    }
    if (transactional && cfg->fencing == RELAY_FENCING_TRANSACTIONAL) {
        char id[256];
        config_transactional_id_slot(cfg, slot, id, sizeof(id));
        s = kafka_transaction_settings(&n);
        for (size_t i = 0; i < n; i++) {
            const char *v = s[i].value ? s[i].value : id;
            if (rd_kafka_conf_set(conf, s[i].key, v, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
                snprintf(errbuf, errlen, "kafka.%s: %s", s[i].key, err);
                rd_kafka_conf_destroy(conf);
                return NULL;
            }
        }
    }
    for (size_t i = 0; i < cfg->n_kafka; i++) {
        if (rd_kafka_conf_set(conf, cfg->kafka[i].key, cfg->kafka[i].value, err, sizeof(err)) !=
            RD_KAFKA_CONF_OK) {
            snprintf(errbuf, errlen, "kafka.%s: %s", cfg->kafka[i].key, err);
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    }
    config_kafka_secrets_again(cfg, conf); /* a password fixed since the start */
    return conf;
}

rd_kafka_conf_t *producer_conf_new(const struct relay_config *cfg, char *errbuf, size_t errlen)
{
    return conf_build(cfg, true, 0, errbuf, errlen);
}

rd_kafka_conf_t *producer_conf_other_id(const struct producer *p, char *errbuf, size_t errlen)
{
    rd_kafka_conf_t *conf = conf_build(p->cfg, true, !p->owner.txn_slot, errbuf, errlen);
    if (!conf)
        return NULL;
    char err[256];
    rd_kafka_conf_set(conf, "statistics.interval.ms", "0", err, sizeof err);
    rd_kafka_conf_set_log_cb(conf, on_log);
    return conf;
}

rd_kafka_conf_t *producer_conf_new_untransactional(const struct relay_config *cfg, char *errbuf,
                                                   size_t errlen)
{
    return conf_build(cfg, false, 0, errbuf, errlen);
}

static const char *kafka_set_by_operator(const struct relay_config *cfg, const char *key)
{
    for (size_t i = 0; i < cfg->n_kafka; i++) {
        if (!strcmp(cfg->kafka[i].key, key))
            return cfg->kafka[i].value;
    }
    return NULL;
}

void producer_dump_settings(const struct relay_config *cfg, FILE *out)
{
    size_t n;
    const struct kafka_setting *s = kafka_producer_settings(&n);
    for (size_t i = 0; i < n; i++) {
        if (kafka_set_by_operator(cfg, s[i].key))
            continue; /* printed above, as configured */
        fprintf(out, "# %s\n%s = %s\n",
                s[i].enforced ? "enforced by the relay (the guarantees depend on it)"
                              : "default of the relay (may be set here)",
                s[i].key, s[i].value);
    }
    if (cfg->fencing == RELAY_FENCING_TRANSACTIONAL) {
        /* Comments, not keys: kafka.transactional.id is refused in this section. */
        char id[256];
        config_transactional_id(cfg, id, sizeof(id));
        fprintf(out, "# set by the relay for relay.fencing=transactional (relay.transactional_id):\n"
                     "#   transactional.id = %s\n", id);
        if (!kafka_set_by_operator(cfg, "transaction.timeout.ms"))
            fprintf(out, "# set by the relay for relay.fencing=transactional (may be set here):\n"
                         "#   transaction.timeout.ms = 60000\n");
    }
    /* As producer_conf_new() sizes it. */
    long need = (long)cfg->batch_size * RELAY_BATCHES_IN_FLIGHT;
    if (need > PRODUCER_QUEUE_MESSAGES_DEFAULT &&
        !kafka_set_by_operator(cfg, "queue.buffering.max.messages"))
        fprintf(out, "# sized by the relay for %d batches in flight\nqueue.buffering.max.messages = %ld\n",
                RELAY_BATCHES_IN_FLIGHT, need);
}

static void on_pipe(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    struct producer *p = h->data;
    if (!p)
        return; /* closing */
    char buf[64];
    while (read(p->pipefd[0], buf, sizeof(buf)) > 0)
        ;
    producer_poll(p);
}

/* The headers and bytes of relay.profile and its keys. */
void producer_style_init(struct message_style *ms, const struct relay_config *cfg)
{
    memset(ms, 0, sizeof *ms);
    /* Checked by the configuration's load: it cannot fail here. */
    (void)event_placement_parse(cfg->additional_placement, &ms->placement, NULL, 0);
    ms->style = (struct event_style){ .relay_headers = cfg->relay_headers,
                                      .id_header = cfg->id_header,
                                      .placement = &ms->placement,
                                      .key_converter = cfg->key_converter,
                                      .value_converter = cfg->value_converter,
                                      .expand_payload = cfg->expand_json_payload,
                                      .tombstone_on_empty = cfg->tombstone_on_empty_payload,
                                      .payload_column = cfg->column_payload,
                                      .columns = &cfg->connect_columns,
                                      .envelope_name = ms->envelope_name,
                                      .names = &ms->names };
    snprintf(ms->envelope_name, sizeof ms->envelope_name, "%s.%s.%s", cfg->connect_topic_prefix,
             cfg->schema, cfg->table);
}

void producer_style_free(struct message_style *ms)
{
    connect_names_free(&ms->names);
}

int producer_start(struct producer *p, uv_loop_t *loop, const struct relay_config *cfg,
                   const struct producer_owner *owner, char *errbuf, size_t errlen)
{
    memset(p, 0, sizeof(*p));
    struct relay_stats *stats = owner->stats;
    if (stats) {
        stats->producer_fatal = false;
        stats->brokers_up = -1;
        stats->kafka_answered = false;
        stats->n_brokers = 0;
        /* A replaced producer's messages are gone with it, not answered
         * (producer_set_fatal). */
        stats->kafka_owed = stats_kafka_waiting(stats);
        stats->kafka_in_flight = 0;
        stats->kafka_committing = false;
        stats_settle_published(stats, false); /* and its open transaction */
    }
    p->cfg = cfg;
    producer_style_init(&p->ms, cfg);
    p->loop = loop;
    p->owner = *owner;
    p->pipefd[0] = p->pipefd[1] = -1;

    rd_kafka_conf_t *conf = conf_build(cfg, true, owner->txn_slot, errbuf, errlen);
    if (!conf)
        return -EINVAL;
    rd_kafka_conf_set_opaque(conf, p);
    /* Events, not callbacks: librdkafka's flush (inside commit_transaction
     * and abort_transaction, which run on a worker thread) would otherwise
     * serve callbacks on that thread. Events are served by producer_poll only. */
    rd_kafka_conf_set_events(conf, RD_KAFKA_EVENT_DR | RD_KAFKA_EVENT_ERROR | RD_KAFKA_EVENT_STATS);
    rd_kafka_conf_set_log_cb(conf, on_log);
    if (cfg->fencing == RELAY_FENCING_TRANSACTIONAL) {
        p->txn = PRODUCER_TXN_UNINIT;
        config_transactional_id_slot(cfg, owner->txn_slot, p->txn_id, sizeof(p->txn_id));
    }

    char err[512];
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!p->rk) {
        rd_kafka_conf_destroy(conf);
        snprintf(errbuf, errlen, "kafka: %s", err);
        return -EINVAL;
    }

    if (pipe2(p->pipefd, O_NONBLOCK | O_CLOEXEC) < 0) {
        snprintf(errbuf, errlen, "pipe: %s", strerror(errno));
        rd_kafka_destroy(p->rk);
        p->rk = NULL;
        return -errno;
    }
    p->mainq = rd_kafka_queue_get_main(p->rk);
    /* librdkafka writes one byte when the queue goes from empty to non-empty. */
    rd_kafka_queue_io_event_enable(p->mainq, p->pipefd[1], "1", 1);
    p->poll = malloc(sizeof(*p->poll));
    if (!p->poll || uv_poll_init(loop, p->poll, p->pipefd[0]) < 0) {
        snprintf(errbuf, errlen, "cannot watch the delivery report pipe");
        free(p->poll);
        p->poll = NULL;
        rd_kafka_queue_io_event_enable(p->mainq, -1, NULL, 0);
        rd_kafka_queue_destroy(p->mainq);
        rd_kafka_destroy(p->rk);
        p->rk = NULL;
        close(p->pipefd[0]);
        close(p->pipefd[1]);
        return -ENOMEM;
    }
    p->poll->data = p;
    uv_poll_start(p->poll, UV_READABLE, on_pipe);
    p->started = true;
    return 0;
}

int producer_send(struct producer *p, const struct event_row *row, const char *topic,
                  void *opaque, char *errbuf, size_t errlen)
{
    if (p->fatal)
        return -EIO;

    /* librdkafka before 2.10.1 asks for the metadata of a topic that
     * rd_kafka_producev() names for the first time only on its 1 s timer, so
     * the first batch after start waited up to a second for it.
     * rd_kafka_topic_new() asks at once; later calls find the topic known. */
    if (strcmp(topic, p->known_topic) != 0) {
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(p->rk, topic, NULL);
        if (rkt)
            rd_kafka_topic_destroy(rkt);
        snprintf(p->known_topic, sizeof(p->known_topic), "%s", topic);
    }

    struct connect_bytes m;
    int rc = connect_message(row, &p->ms.style, &p->key, &p->value, &m, errbuf, errlen);
    rd_kafka_headers_t *hdrs = NULL;
    if (!rc)
        rc = event_headers_build_styled(row, &p->ms.style, &hdrs, errbuf, errlen);
    if (rc < 0)
        return rc;

    rd_kafka_resp_err_t err = rd_kafka_producev(
        p->rk,
        RD_KAFKA_V_TOPIC(topic),
        RD_KAFKA_V_PARTITION(event_row_partition(row, &p->ms.style)),
        RD_KAFKA_V_KEY(m.key, m.key_len),
        RD_KAFKA_V_VALUE((void *)m.value, m.value_len),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_TIMESTAMP(row->created_ms),
        RD_KAFKA_V_HEADERS(hdrs),
        RD_KAFKA_V_OPAQUE(opaque),
        RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        ack_clock_sent(p);
        p->txn_msgs++;
        return 0; /* the message owns the headers now */
    }

    rd_kafka_headers_destroy(hdrs);
    snprintf(errbuf, errlen, "%s", rd_kafka_err2str(err));
    switch (err) {
    case RD_KAFKA_RESP_ERR__QUEUE_FULL:
        return -ENOBUFS;
    case RD_KAFKA_RESP_ERR__FATAL:
        producer_set_fatal(p);
        return -EIO;
    case RD_KAFKA_RESP_ERR__STATE:
        /* No transaction open (failed, or being ended): not the row's fault. */
        return -EIO;
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
        return -EACCES;
    default:
        /* MSG_SIZE_TOO_LARGE, invalid topic, …: this row will never go. */
        return -EINVAL;
    }
}

int producer_fatal_code(const struct producer *p)
{
    if (p->fatal_code || !p->rk)
        return p->fatal_code;
    return rd_kafka_fatal_error(p->rk, NULL, 0);
}

enum kafka_denial producer_refused(const struct producer *p, int *code)
{
    *code = p->refused_code;
    return p->refused;
}

bool producer_fatal(const struct producer *p)
{
    return p->fatal || (p->rk && rd_kafka_fatal_error(p->rk, NULL, 0) != RD_KAFKA_RESP_ERR_NO_ERROR);
}

void producer_poll(struct producer *p)
{
    if (!p->rk)
        return;
    rd_kafka_event_t *ev;
    while ((ev = rd_kafka_queue_poll(p->mainq, 0)) != NULL) {
        switch (rd_kafka_event_type(ev)) {
        case RD_KAFKA_EVENT_DR: {
            const rd_kafka_message_t *m;
            while ((m = rd_kafka_event_message_next(ev)) != NULL) {
                ack_clock_report(p, m->err == RD_KAFKA_RESP_ERR_NO_ERROR);
                if (p->owner.stats && m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
                    p->owner.stats->kafka_answered = true;
                    stats_count_published(p->owner.stats, rd_kafka_topic_name(m->rkt),
                                          p->txn != PRODUCER_TXN_OFF);
                }
                if (m->err && p->txn != PRODUCER_TXN_OFF)
                    p->txn_doomed = true;
                if (p->owner.report)
                    p->owner.report(m->_private, m->err, p->owner.arg);
            }
            break;
        }
        case RD_KAFKA_EVENT_ERROR:
            on_error(p, ev);
            break;
        case RD_KAFKA_EVENT_STATS:
            on_stats(p, rd_kafka_event_stats(ev));
            break;
        default:
            break;
        }
        /* Destroying a report's event releases its messages: only then does
         * a flush waiting on another thread see them gone. */
        rd_kafka_event_destroy(ev);
    }
    /* After the events: the owner may stop the instance now. */
    if (p->refused && !p->refused_told && p->started && p->owner.on_refused && (p->refused_told = true))
        p->owner.on_refused(p->owner.arg);
}

void producer_purge(struct producer *p)
{
    if (p->rk)
        rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
}

static void free_close(uv_handle_t *h)
{
    free(h);
}

void producer_stop(struct producer *p)
{
    if (!p->started)
        return;
    p->started = false;
    if (producer_txn_defer_stop(p)) {
        p->owner.report = NULL;
        return;
    }
    producer_destroy(p);
}

/* rd_kafka_destroy() waits for the answers to requests still in flight: a
 * broker that stopped answering holds it until socket.timeout.ms cuts them
 * (seen for 8 s and more in the fault matrix, the loop stopped meanwhile).
 * Destroyed on another thread while it still held messages, the instance
 * left events whose destruction on the loop hung for good. So an instance
 * that still holds messages is kept, its events served and dropped on the
 * loop, and destroyed once it holds none (quickly then), or after
 * RETIRE_MAX_MS; the next instance starts meanwhile. */
#define RETIRE_POLL_MS 100
#define RETIRE_MAX_MS 30000

struct retired {
    uv_timer_t timer;
    rd_kafka_t *rk;
    rd_kafka_queue_t *q;
    uint64_t until;
};

static void retired_drain(struct retired *o)
{
    rd_kafka_event_t *ev;
    while ((ev = rd_kafka_queue_poll(o->q, 0)) != NULL)
        rd_kafka_event_destroy(ev);
}

static void retired_tick(uv_timer_t *t)
{
    struct retired *o = t->data;
    retired_drain(o);
    if (rd_kafka_outq_len(o->rk) > 0 && uv_now(t->loop) < o->until)
        return;
    rd_kafka_queue_destroy(o->q);
    rd_kafka_destroy(o->rk);
    uv_timer_stop(t);
    uv_close((uv_handle_t *)t, free_close);
}

static void retire(uv_loop_t *loop, rd_kafka_t *rk, rd_kafka_queue_t *q)
{
    struct retired *o = rd_kafka_outq_len(rk) > 0 ? malloc(sizeof(*o)) : NULL;
    if (o && uv_timer_init(loop, &o->timer) == 0) {
        o->timer.data = o;
        o->rk = rk;
        o->q = q;
        o->until = uv_now(loop) + RETIRE_MAX_MS;
        uv_timer_start(&o->timer, retired_tick, RETIRE_POLL_MS, RETIRE_POLL_MS);
        return;
    }
    free(o);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
}

void producer_destroy(struct producer *p)
{
    producer_purge(p);
    producer_poll(p);
    rd_kafka_queue_io_event_enable(p->mainq, -1, NULL, 0);
    p->owner.report = NULL;
    retire(p->loop, p->rk, p->mainq);
    p->mainq = NULL;
    p->rk = NULL;
    p->poll->data = NULL;
    uv_close((uv_handle_t *)p->poll, free_close);
    p->poll = NULL;
    close(p->pipefd[0]);
    close(p->pipefd[1]);
    strbuf_free(&p->key);
    strbuf_free(&p->value);
    producer_style_free(&p->ms);
}
