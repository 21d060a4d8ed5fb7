/* kafka_notice.h — how loud librdkafka's news about brokers is in the
 * relay's log. A broker restarting or dying is routine in a replicated
 * cluster (a rolling upgrade does it to every broker): it is a warning,
 * written once per broker and cause, not an error on every reconnect. */
#ifndef OUTBOX_KAFKA_NOTICE_H
#define OUTBOX_KAFKA_NOTICE_H

#include <stdbool.h>

#include "base/log.h"

#define KAFKA_NOTICE_MAX 16 /* (broker, error) pairs remembered at once */

struct kafka_notice_seen {
    char broker[128]; /* librdkafka's broker name ("host:port/id"), "" for the whole cluster */
    int err;          /* an rd_kafka_resp_err_t */
};

struct kafka_notice {
    struct kafka_notice_seen seen[KAFKA_NOTICE_MAX];
    int n;
    unsigned next; /* the slot a full table overwrites next */
};

/** The relay's level for one line of librdkafka's log callback (@p syslog_level
 *  0-7, facility @p fac, text @p buf). A broker's failure (facility FAIL) is
 *  also raised as an error event with the same text, which the relay logs
 *  (kafka_notice_error): the log line goes to debug, so it is written once; so
 *  does a failed transaction's (facility TXNERR), whose abort the relay logs. */
enum log_level kafka_log_level(int syslog_level, const char *fac, const char *buf);

/** Whether the error event @p err with text @p reason is news: true the first
 *  time a broker (the reason's "host:port/id: " prefix; none: the cluster)
 *  reports @p err since it was last up, false for its repeats (every
 *  reconnect of a broker that stays down). */
bool kafka_notice_error(struct kafka_notice *k, int err, const char *reason);

/** Broker @p name (librdkafka's "host:port/id") is up: its next failure is
 *  news again, and so is the next failure of the whole cluster. */
void kafka_notice_broker_up(struct kafka_notice *k, const char *name);

#endif
