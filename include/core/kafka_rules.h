/* kafka_rules.h — what the relay knows about Kafka, in one place: the
 * producer properties it sets (and which of them its guarantees depend on),
 * the properties an operator may not change, and what a delivery error means
 * for the row that got it.
 *
 * The header names no librdkafka type, so decisions that only need an
 * error's class (the engine) do not depend on librdkafka. */
#ifndef OUTBOX_KAFKA_RULES_H
#define OUTBOX_KAFKA_RULES_H

#include <stdbool.h>
#include <stddef.h>

/** One producer property the relay sets before the [kafka] section's own. */
struct kafka_setting {
    const char *key;
    const char *value;
    bool enforced;       /* kafka_check_property() refuses another value */
};

/** The relay's producer properties, in the order they are applied; *@p n
 *  receives their count. */
const struct kafka_setting *kafka_producer_settings(size_t *n);

/** What relay.fencing=transactional adds: transactional.id (value NULL: the
 *  relay's id, config_transactional_id) and the transaction time-out. */
const struct kafka_setting *kafka_transaction_settings(size_t *n);

/** Refuses a [kafka] property that would break the idempotent producer's
 *  guarantees, or that the relay sets itself. @return 0, or -EINVAL with
 *  @p errbuf naming the property and what it needs. */
int kafka_check_property(const char *key, const char *value, char *errbuf, size_t errlen);

/** Whose fault a failed delivery is. */
enum kafka_fault {
    KAFKA_FAULT_OURS = 0,    /* the relay's own doing (shutdown purge, a fatal or fenced
                                producer being replaced): produced again, charged nothing */
    KAFKA_FAULT_OUTAGE,      /* Kafka (partly) unavailable: produced again, charged nothing */
    KAFKA_FAULT_PERMANENT,   /* the message can never be accepted as it is */
    KAFKA_FAULT_RETRIABLE,   /* anything else: may be the row's own, may pass on retry */
    KAFKA_FAULT_DENIED,      /* the principal lacks a right on the topic (kafka_denial_of):
                                nobody's row; produced again after a back-off, charged nothing */
};

/** The class of delivery error @p err (an rd_kafka_resp_err_t, not 0).
 *  @p producer_fatal: the producer raised a fatal error, after which outage
 *  errors are the fatal error's echo, not an outage. */
enum kafka_fault kafka_fault_of(int err, bool producer_fatal);

/** A right Kafka refuses the relay's principal: no attempt can succeed until
 *  someone changes an ACL (or the credentials), so it is named once and
 *  retried with a back-off (plan_denied_delay), not in a loop. */
enum kafka_denial {
    KAFKA_DENIAL_NONE = 0,
    KAFKA_DENIAL_AUTHENTICATION,   /* SASL authentication failed: the credentials */
    KAFKA_DENIAL_TOPIC,            /* Write and Describe on a topic */
    KAFKA_DENIAL_TRANSACTIONAL_ID, /* Write and Describe on the TransactionalId */
    KAFKA_DENIAL_CLUSTER,          /* the idempotent producer id: IdempotentWrite, or a topic Write */
    KAFKA_DENIAL_TLS,              /* a TLS handshake failed: certificates, CA, host name */
    KAFKA_DENIAL_COUNT
};

/** @return the right whose absence error @p err (an rd_kafka_resp_err_t,
 *  e.g. the code of a fatal error) reports, or KAFKA_DENIAL_NONE. */
enum kafka_denial kafka_denial_of(int err);

/** @return whether @p d refuses the connection itself (authentication,
 *  TLS) rather than a request on it: librdkafka tries such a connection
 *  again on its own, every reconnect.backoff.max.ms, and reads the
 *  credentials and certificates only when an instance is made. */
bool kafka_denial_at_connect(enum kafka_denial d);

/** @return a short name of @p d for logs, /status and the metric's label
 *  ("transactional_id_write", ...); "" for KAFKA_DENIAL_NONE. */
const char *kafka_denial_name(enum kafka_denial d);

/** @return what the principal needs, in the words of Kafka's ACLs
 *  ("Write and Describe on TransactionalId", ...); "" for none. */
const char *kafka_denial_need(enum kafka_denial d);

/** Where the producer's Kafka transactions are (relay.fencing=transactional):
 *  the engine decides on it, producer.c keeps it. */
enum producer_txn_state {
    PRODUCER_TXN_OFF = 0,   /* not transactional: an acknowledged row is published */
    PRODUCER_TXN_UNINIT,    /* init_transactions not done on this instance yet */
    PRODUCER_TXN_OPEN,      /* a transaction is open: rows may be produced into it */
    PRODUCER_TXN_BUSY,      /* init, commit or abort runs on a worker thread */
    PRODUCER_TXN_DEAD,      /* fenced or fatal: the instance must be replaced */
};

/** How a transaction call ended. */
enum producer_txn_result {
    PRODUCER_TXN_DONE = 0,  /* initialised, or committed: what was produced is visible */
    PRODUCER_TXN_ABORTED,   /* aborted (an abortable error): nothing of it is visible */
    PRODUCER_TXN_RETRY,     /* init timed out: call again later */
    PRODUCER_TXN_FAILED,    /* fenced or fatal: nothing of it is visible, replace the instance */
};

#endif
