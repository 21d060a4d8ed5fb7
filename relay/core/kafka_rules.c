/* kafka_rules.c — the producer properties the relay sets, those an operator
 * may not change, and the classes of delivery errors. */
#include "core/kafka_rules.h"

#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/errors.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ---- producer properties ------------------------------------------------ */

/* Defaults the relay needs for its guarantees, or that suit a relay better
 * than librdkafka's own; the [kafka] section may override all but the
 * guarantees (kafka_check_property rejects those: ENFORCED marks them,
 * for check-config and the documentation). */
#define ENFORCED true
#define DEFAULT false
static const struct kafka_setting producer_defaults[] = {
    { "enable.idempotence", "true", ENFORCED },
    { "acks", "all", ENFORCED },
    /* Same key → same partition as Java clients, so consumers may mix producers. */
    { "partitioner", "murmur2_random", DEFAULT },
    /* The relay already batches (a claim is up to batch_size rows, produced
     * in one go): waiting longer only adds latency. Measured with
     * tests/bench/run: linger.ms=5 puts p50 above 10 ms at 1,000 events/s. */
    { "linger.ms", "0", DEFAULT },
    /* Outbox payloads are text (JSON, mostly) and compress several times
     * over: the broker, on the relay's own cores as a sidecar, then writes
     * and copies that much less. Measured with tests/bench/run, a backlog
     * drained with on_sent = delete, two runs of three rounds each way, in
     * turns: 53-83k rows/s with lz4 against 50-68k without, the broker's CPU
     * per 200,000 rows 1.2-2.6 s against 2.0-3.3 s, the relay's own lower too. */
    { "compression.type", "lz4", DEFAULT },
    /* As Java clients do: small produce requests must not wait for Nagle. */
    { "socket.nagle.disable", "true", DEFAULT },
    /* One produce request per broker connection at a time. The relay keeps
     * two batches in flight itself, so more requests per connection buy
     * little: measured with tests/bench/run against a real Kafka 3.9 node,
     * 5 drained no faster than 1 (within the noise of a shared machine), and
     * with 1 the order within a partition never depends on the broker
     * checking idempotent sequence numbers (librdkafka's mock does not). */
    { "max.in.flight.requests.per.connection", "1", DEFAULT },
    /* A produce request the broker rejects fails all its messages while later
     * requests of the partition may already be on their way: a gap, and the
     * failed rows would be published after later rows of their aggregates.
     * With this, librdkafka raises a fatal error instead of sending on; the
     * relay replaces the producer and produces the failed rows alone first. */
    { "enable.gapless.guarantee", "true", DEFAULT },
    /* A broker that keeps its connections open and answers nothing (hung,
     * stopped, cut off without a reset) holds every request sent to it this
     * long, and with relay.fencing=transactional that one request holds the
     * batch's transaction, so every partition. Kafka fences a silent broker
     * after broker.session.timeout.ms (9 s by default) and moves its
     * leaderships; a request cut after that is retried on the new leader or
     * coordinator with the same sequence numbers (no duplicate). Cut before
     * it, the request goes to the hung broker again: at 6 s against 9 s of
     * fencing, the resumed broker answered OUT_OF_ORDER_SEQUENCE_NUMBER, a
     * fatal producer error, in 2 of 9 fault-matrix runs, and a hung
     * coordinator held the relay about as long as at 10 s
     * (docs/guarantees.md). So 10 s (librdkafka: 60 s); a cluster that
     * fences sooner may go lower, still above its fencing time. */
    { "socket.timeout.ms", "10000", DEFAULT },
    /* How long a leader waits for its in-sync replicas (acks=all) before it
     * answers REQUEST_TIMED_OUT, which is retried with the same sequence
     * numbers: below socket.timeout.ms, so a leader waiting for a follower
     * that is being fenced answers before the relay gives up on the
     * connection (librdkafka: 30 s). */
    { "request.timeout.ms", "8000", DEFAULT },
    /* A broker that went away is tried again at most 1 s apart (librdkafka:
     * 10 s): a broker restarting, or the new coordinator or leader on a
     * broker the relay had lost, is back in use within a second of being up. */
    { "reconnect.backoff.max.ms", "1000", DEFAULT },
    { "client.id", "outbox-relay", DEFAULT },
    /* Broker states and queue depth for readiness and metrics. */
    { "statistics.interval.ms", "1000", DEFAULT },
};

/* relay.fencing=transactional: every batch is a transaction of one
 * transactional.id (NULL here: the relay's, see config_transactional_id), so
 * a new leader's init_transactions fences the old leader. 60 s is Kafka's
 * default too; it bounds how long a paused leader's open transaction can hold
 * back read_committed consumers (the last stable offset) before the
 * coordinator aborts it. kafka.transaction.timeout.ms may change it. */
static const struct kafka_setting txn_defaults[] = {
    { "transactional.id", NULL, ENFORCED },
    { "transaction.timeout.ms", "60000", DEFAULT },
};

const struct kafka_setting *kafka_producer_settings(size_t *n)
{
    *n = N_OF(producer_defaults);
    return producer_defaults;
}

const struct kafka_setting *kafka_transaction_settings(size_t *n)
{
    *n = N_OF(txn_defaults);
    return txn_defaults;
}

static bool is_true(const char *v)
{
    /* librdkafka's spelling of a true boolean */
    return !strcasecmp(v, "true") || !strcasecmp(v, "t") || !strcmp(v, "1");
}

int kafka_check_property(const char *k, const char *v, char *errbuf, size_t errlen)
{
    if (!strcmp(k, "enable.idempotence") && !is_true(v))
        return errbuf_fail(errbuf, errlen,
                    "kafka.%s=%s conflicts with the idempotent producer (needs "
                    "enable.idempotence=true)",
                    k, v);
    if ((!strcmp(k, "acks") || !strcmp(k, "request.required.acks")) &&
        strcasecmp(v, "all") != 0 && strcmp(v, "-1") != 0)
        return errbuf_fail(errbuf, errlen,
                    "kafka.%s=%s conflicts with the idempotent producer (needs acks=all)", k, v);
    if ((!strcmp(k, "max.in.flight.requests.per.connection") || !strcmp(k, "max.in.flight")) &&
        strtol(v, NULL, 10) > 5)
        return errbuf_fail(errbuf, errlen,
                    "kafka.%s=%s conflicts with the idempotent producer (needs at most 5)", k, v);
    if ((!strcmp(k, "retries") || !strcmp(k, "message.send.max.retries")) &&
        strtol(v, NULL, 10) == 0)
        return errbuf_fail(errbuf, errlen,
                    "kafka.%s=%s conflicts with the idempotent producer (needs retries > 0)", k,
                    v);
    if (!strcmp(k, "transactional.id"))
        return errbuf_fail(errbuf, errlen,
                    "kafka.%s is set by the relay (see relay.fencing and relay.transactional_id)",
                    k);
    if (!strcmp(k, "queuing.strategy") && !strcasecmp(v, "lifo"))
        return errbuf_fail(errbuf, errlen,
                    "kafka.%s=%s conflicts with the idempotent producer (needs fifo)", k, v);
    return 0;
}

/* ---- delivery errors ---------------------------------------------------- */

/* Brokers down or moving, replicas short, time-outs: an outage, even when it
 * hits only the partitions of one broker while the others deliver. */
static bool err_is_outage(rd_kafka_resp_err_t err)
{
    switch (err) {
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE:
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
    case RD_KAFKA_RESP_ERR__NODE_UPDATE:
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS:
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
    case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
    case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION:
    case RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR:
    case RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE:
        return true;
    default:
        return false;
    }
}

static bool err_is_permanent(rd_kafka_resp_err_t err)
{
    switch (err) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    /* The row's created_at lies outside the topic's
     * message.timestamp.before.max.ms / after.max.ms: produced again, it is
     * refused again (one dated ahead only once the clock has caught up). */
    case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR_INVALID_REQUIRED_ACKS:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
    case RD_KAFKA_RESP_ERR__BAD_MSG:
        return true;
    default:
        return false;
    }
}

/* Failures that are not the row's fault (shutdown purge, a fatal producer that
 * is about to be replaced, the state of the producer's transaction: a fenced
 * leader's produce can meet a coordinator that is aborting its transaction
 * and fail with INVALID_TXN_STATE): the row is simply produced again later. */
static bool err_is_ours(rd_kafka_resp_err_t err)
{
    switch (err) {
    case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
    case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
    case RD_KAFKA_RESP_ERR__FATAL:
    case RD_KAFKA_RESP_ERR__FENCED:
    case RD_KAFKA_RESP_ERR__STATE:
    case RD_KAFKA_RESP_ERR_PRODUCER_FENCED:
    case RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH:
    case RD_KAFKA_RESP_ERR_INVALID_TXN_STATE:
    case RD_KAFKA_RESP_ERR_INVALID_PRODUCER_ID_MAPPING:
    case RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS:
    case RD_KAFKA_RESP_ERR_TRANSACTION_COORDINATOR_FENCED:
        return true;
    default:
        return false;
    }
}

enum kafka_fault kafka_fault_of(int code, bool producer_fatal)
{
    rd_kafka_resp_err_t err = (rd_kafka_resp_err_t)code;
    if (err_is_ours(err) || (producer_fatal && err_is_outage(err)))
        return KAFKA_FAULT_OURS;
    /* A missing topic ACL refuses every row of the topic alike until someone
     * grants it: charging the rows would dead-letter them all for want of a
     * right, so it is a refusal like the producer's (kafka_denial_of). */
    if (kafka_denial_of(code) == KAFKA_DENIAL_TOPIC)
        return KAFKA_FAULT_DENIED;
    if (err_is_permanent(err))
        return KAFKA_FAULT_PERMANENT;
    return err_is_outage(err) ? KAFKA_FAULT_OUTAGE : KAFKA_FAULT_RETRIABLE;
}

/* ---- rights Kafka refuses --------------------------------------------- */

enum kafka_denial kafka_denial_of(int code)
{
    switch ((rd_kafka_resp_err_t)code) {
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
    case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
        return KAFKA_DENIAL_AUTHENTICATION;
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
        return KAFKA_DENIAL_TOPIC;
    case RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return KAFKA_DENIAL_TRANSACTIONAL_ID;
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
        return KAFKA_DENIAL_CLUSTER;
    /* A certificate either side refuses fails every handshake alike until
     * someone changes a certificate or a setting, as refused credentials do. */
    case RD_KAFKA_RESP_ERR__SSL:
        return KAFKA_DENIAL_TLS;
    default:
        return KAFKA_DENIAL_NONE;
    }
}

static const struct {
    const char *name, *need;
} denials[] = {
    [KAFKA_DENIAL_NONE] = {"", ""},
    [KAFKA_DENIAL_AUTHENTICATION] = {"authentication",
                                     "credentials the brokers accept (SASL authentication failed)"},
    [KAFKA_DENIAL_TOPIC] = {"topic_write", "Write and Describe on the topic"},
    [KAFKA_DENIAL_TRANSACTIONAL_ID] = {"transactional_id_write",
                                       "Write and Describe on the TransactionalId"},
    /* Brokers with KIP-679 (Kafka 3.9 tested) give an idempotent producer
     * its id for Write on any topic as well: then the topic's right is what
     * is missing, and one grant ends both refusals. */
    [KAFKA_DENIAL_CLUSTER] = {"idempotent_write",
                              "Write and Describe on the topic (brokers without KIP-679: "
                              "IdempotentWrite on the cluster)"},
    [KAFKA_DENIAL_TLS] = {"tls", "certificates both sides accept (kafka.ssl.ca.location, "
                                 "kafka.ssl.certificate.location and kafka.ssl.key.location; "
                                 "the log's check= says which)"},
};
_Static_assert(sizeof denials / sizeof denials[0] == KAFKA_DENIAL_COUNT,
               "one row per enum kafka_denial");

bool kafka_denial_at_connect(enum kafka_denial d)
{
    return d == KAFKA_DENIAL_AUTHENTICATION || d == KAFKA_DENIAL_TLS;
}

const char *kafka_denial_name(enum kafka_denial d)
{
    return (unsigned)d < sizeof denials / sizeof denials[0] ? denials[d].name : "";
}

const char *kafka_denial_need(enum kafka_denial d)
{
    return (unsigned)d < sizeof denials / sizeof denials[0] ? denials[d].need : "";
}
