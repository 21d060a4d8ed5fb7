/* producer.h — the idempotent librdkafka producer, served on the libuv loop.
 *
 * Delivery reports arrive through librdkafka's main queue, which wakes the
 * loop through a pipe; the report callback therefore always runs on the loop
 * thread and may touch relay state without locks. */
#ifndef OUTBOX_PRODUCER_H
#define OUTBOX_PRODUCER_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdio.h>
#include <uv.h>

#include "config.h"
#include "event.h"
#include "stats.h"

/** Called once per message produced with producer_send(), with its opaque. */
typedef void (*producer_report_cb)(void *opaque, rd_kafka_resp_err_t err, void *arg);

struct producer {
    uv_poll_t *poll;           /* the pipe's watcher; allocated, freed in its close callback,
                                  so a replaced producer never reuses a closing handle */
    uv_loop_t *loop;
    rd_kafka_t *rk;
    rd_kafka_queue_t *mainq;
    int pipefd[2];
    producer_report_cb report;
    void *arg;
    bool fatal;                /* librdkafka raised a fatal error: the instance is unusable */
    struct relay_stats *stats; /* brokers up, queue depth, fatal: from librdkafka statistics;
                                  messages in flight and the acknowledgement clock */
    const struct relay_config *cfg; /* the live configuration (relay.ack_timeout_ms) */
    int64_t in_flight;         /* produced, no delivery report yet */
    bool ack_stalled;          /* the stall was logged; its end will be */
    bool started;
    char known_topic[256];     /* the last topic asked about (see producer_send) */
};

/** Creates the producer from the [kafka] section on top of the relay's
 *  defaults (enable.idempotence=true, acks=all, …) and starts serving it.
 *  @return 0, or -EINVAL with errbuf (a property librdkafka rejects). */
int producer_start(struct producer *p, uv_loop_t *loop, const struct relay_config *cfg,
                   producer_report_cb report, void *arg, struct relay_stats *stats,
                   char *errbuf, size_t errlen);

/** One producer property the relay sets before the [kafka] section's own. */
struct producer_setting {
    const char *key;
    const char *value;
    bool enforced;       /* config_validate() refuses another value */
};

/** The relay's producer properties, in the order they are applied; *@p n
 *  receives their count. */
const struct producer_setting *producer_settings(size_t *n);

/** Writes, as "key = value    # enforced|default" lines, what the relay sets
 *  on its producer and the [kafka] section of @p cfg does not: the rest of
 *  the [kafka] section of check-config. */
void producer_dump_settings(const struct relay_config *cfg, FILE *out);

/** Builds the rd_kafka_conf_t the relay uses (defaults, then the [kafka]
 *  section). @return the conf, or NULL with errbuf naming the property. */
rd_kafka_conf_t *producer_conf_new(const struct relay_config *cfg, char *errbuf, size_t errlen);

/** Produces one row to @p topic; its report comes later through the callback.
 *  @return 0; -ENOBUFS when the local queue is full (try again after reports);
 *  -EINVAL when this row can never be produced (errbuf says why); -EIO on a
 *  fatal producer state. */
int producer_send(struct producer *p, const struct event_row *row, const char *topic,
                  void *opaque, char *errbuf, size_t errlen);

/** @return true once the instance has raised a fatal error (asks librdkafka,
 *  so it is right even before the error callback has been served). */
bool producer_fatal(const struct producer *p);

/** Serves queued reports now (also done whenever the loop wakes us). */
void producer_poll(struct producer *p);

/** Messages not yet acknowledged or failed. */
int producer_outq_len(const struct producer *p);

/** Fails every message still queued or in flight (their reports follow at
 *  the next producer_poll with an error). */
void producer_purge(struct producer *p);

/** Destroys the instance (reports of purged messages are served first). */
void producer_stop(struct producer *p);

#endif
