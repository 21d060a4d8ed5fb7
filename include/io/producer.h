/* producer.h — the idempotent (and, with relay.fencing=transactional,
 * transactional) librdkafka producer, served on the libuv loop.
 *
 * Delivery reports, errors and statistics arrive as events on librdkafka's
 * main queue, which wakes the loop through a pipe; they are only ever served
 * by producer_poll() on the loop thread, so the report callback may touch
 * relay state without locks, even while a blocking transaction call runs on
 * a worker thread (librdkafka's flush inside commit and abort then waits for
 * the loop instead of serving callbacks itself). */
#ifndef OUTBOX_PRODUCER_H
#define OUTBOX_PRODUCER_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "config/config.h"
#include "base/strbuf.h"
#include "core/event.h"
#include "core/kafka_notice.h"
#include "core/kafka_rules.h"
#include "core/kafka_stall.h"
#include "base/stats.h"

/** Called once per message produced with producer_send(), with its opaque. */
typedef void (*producer_report_cb)(void *opaque, rd_kafka_resp_err_t err, void *arg);

/** Who a producer serves: told of each report and of refused connections. */
struct producer_owner {
    producer_report_cb report;
    void (*on_refused)(void *arg); /* once its connections are refused, after the poll that saw it */
    void *arg;                     /* given to both */
    struct relay_stats *stats;     /* brokers up, queue depth, fatal: from librdkafka statistics;
                                      messages in flight and the acknowledgement clock */
    unsigned txn_slot;             /* which transactional.id (config_transactional_id_slot) */
};

/** Called on the loop thread when a transaction call ended: @p gen is the
 *  generation (producer_txn_gen) the call ended, @p why a message on failure. */
typedef void (*producer_txn_cb)(void *arg, unsigned gen, enum producer_txn_result res,
                                const char *why);

struct txn_job;

/* The other transactional.id of the relay (config_transactional_id_slot), as
 * a leader's first init found it. */
enum producer_spare {
    PRODUCER_SPARE_UNTRIED, /* not fenced by this instance */
    PRODUCER_SPARE_FENCED,  /* initialised: no older producer of it can commit */
    PRODUCER_SPARE_DENIED,  /* the principal may not use it (an ACL for one id only) */
    PRODUCER_SPARE_FAILED,  /* its coordinator did not answer in time */
};

/** How a row becomes a message under a configuration: its headers,
 *  converters and placement (relay.profile and its keys), with the storage
 *  the style points to. */
struct message_style {
    struct event_style style;
    struct event_placement placement; /* relay.additional_placement, parsed */
    char envelope_name[512];          /* style.envelope_name */
    struct connect_names names;       /* style.names */
};

/** Fills @p ms from @p cfg, as the producer makes its messages (verify too). */
void producer_style_init(struct message_style *ms, const struct relay_config *cfg);

/** Frees what @p ms holds. */
void producer_style_free(struct message_style *ms);

struct producer {
    uv_poll_t *poll;           /* the pipe's watcher; allocated, freed in its close callback,
                                  so a replaced producer never reuses a closing handle */
    uv_loop_t *loop;
    rd_kafka_t *rk;
    rd_kafka_queue_t *mainq;
    int pipefd[2];
    struct producer_owner owner;
    bool fatal;                /* librdkafka raised a fatal error: the instance is unusable */
    int fatal_code;            /* the rd_kafka_resp_err_t behind it (0: not known) */
    const struct relay_config *cfg; /* the live configuration (relay.ack_timeout_ms) */
    int64_t in_flight;         /* produced, no delivery report yet */
    bool ack_stalled;          /* the stall was logged; its end will be */
    struct kafka_notice notice; /* broker failures already logged */
    enum kafka_denial refused; /* the brokers refuse its connections (kafka_denial_at_connect) */
    int refused_code;          /* the rd_kafka_resp_err_t of the first refusal */
    bool refused_told;
    bool started;
    enum producer_txn_state txn;
    unsigned txn_gen;          /* counts transactions begun on this instance */
    int txn_msgs;              /* messages produced into the open transaction */
    bool txn_doomed;           /* a report of the open transaction failed: it can only abort */
    struct kafka_stall stall;  /* requests timed out, for kafka_stall_give_up */
    bool abandoned;            /* given up: its transaction waited on a broker that stopped answering */
    bool switch_id;            /* given up behind a commit: the next instance takes the other id */
    enum producer_spare spare; /* what its init's fencing of the other slot's id found */
    uint64_t txn_retry_ms;     /* loop time before which init is not tried again */
    struct txn_job *job;       /* the call running on a worker thread, if any */
    char txn_id[256];
    char known_topic[256];     /* the last topic asked about (see producer_send) */
    struct message_style ms;   /* what a row's message is made of */
    struct strbuf key, value;  /* a message's key and value when a converter is json */
};

/** Whether the brokers refuse its connections (producer_refused names how). */
static inline bool producer_is_refused(const struct producer *p)
{
    return p->refused != KAFKA_DENIAL_NONE;
}

/** Creates the producer from the [kafka] section on top of the relay's
 *  defaults (enable.idempotence=true, acks=all, …) and starts serving it.
 *  @return 0, or -EINVAL with errbuf (a property librdkafka rejects). */
int producer_start(struct producer *p, uv_loop_t *loop, const struct relay_config *cfg,
                   const struct producer_owner *owner, char *errbuf, size_t errlen);

/** Writes, as "key = value    # enforced|default" lines, what the relay sets
 *  on its producer and the [kafka] section of @p cfg does not: the rest of
 *  the [kafka] section of check-config. */
void producer_dump_settings(const struct relay_config *cfg, FILE *out);

/** Builds the rd_kafka_conf_t the relay uses (defaults, then the [kafka]
 *  section). @return the conf, or NULL with errbuf naming the property. */
rd_kafka_conf_t *producer_conf_new(const struct relay_config *cfg, char *errbuf, size_t errlen);

/** producer_conf_new() without the relay's transactional.id: for one-shot
 *  tools (replay) that must neither need a transaction nor fence the leader. */
rd_kafka_conf_t *producer_conf_new_untransactional(const struct relay_config *cfg, char *errbuf,
                                                   size_t errlen);

/** Produces one row to @p topic; its report comes later through the callback.
 *  @return 0; -ENOBUFS when the local queue is full (try again after reports);
 *  -EINVAL when this row can never be produced (errbuf says why); -EIO on a
 *  fatal producer state. */
int producer_send(struct producer *p, const struct event_row *row, const char *topic,
                  void *opaque, char *errbuf, size_t errlen);

/** @return true once the instance has raised a fatal error (asks librdkafka,
 *  so it is right even before the error callback has been served). */
bool producer_fatal(const struct producer *p);

/** @return what the brokers refuse the instance's connections for
 *  (authentication, TLS: kafka_denial_at_connect), or KAFKA_DENIAL_NONE;
 *  @p code receives the error (an rd_kafka_resp_err_t). Such
 *  an instance is fatal too (producer_fatal): it takes nothing more. */
enum kafka_denial producer_refused(const struct producer *p, int *code);

/** @return true once the instance was given up because its transaction
 *  waited on a broker that stopped answering (core/kafka_stall.h): it is
 *  fatal then too, and replaced like a fatal one. */
bool producer_abandoned(const struct producer *p);

/** @return the broker's error behind the fatal state (an rd_kafka_resp_err_t,
 *  e.g. TRANSACTIONAL_ID_AUTHORIZATION_FAILED), or 0 when not fatal or not known. */
int producer_fatal_code(const struct producer *p);

/** Serves queued reports now (also done whenever the loop wakes us). */
void producer_poll(struct producer *p);

/** Fails every message still queued or in flight (their reports follow at
 *  the next producer_poll with an error). */
void producer_purge(struct producer *p);

/** Destroys the instance (reports of purged messages are served first). With
 *  a transaction call still running on a worker thread, the destruction waits
 *  for it (the loop keeps running until then). */
void producer_stop(struct producer *p);

/* ---- transactions (relay.fencing=transactional) -------------------------- */

/** @return the instance's transaction state (PRODUCER_TXN_OFF without fencing). */
enum producer_txn_state producer_txn_state(const struct producer *p);

/** @return the generation of the open transaction: rows produced under the
 *  same generation are committed or aborted together. */
unsigned producer_txn_gen(const struct producer *p);

/** @return true once a message of the open transaction failed: librdkafka
 *  then makes it abortable, so nothing of it will ever be visible. */
bool producer_txn_doomed(const struct producer *p);

/** @return true when nothing was produced into the open transaction. */
bool producer_txn_empty(const struct producer *p);

/** Starts init_transactions (which fences every older producer of the same
 *  transactional.id and aborts its open transaction), with @p fence_other
 *  that of the relay's other transactional id too (the outcome in p->spare),
 *  and then opens the first transaction, on a worker thread; @p cb follows
 *  on the loop. @return 0; -EALREADY unless PRODUCER_TXN_UNINIT; -EAGAIN
 *  while a timed-out init waits before its retry; -ENOMEM. */
int producer_txn_init(struct producer *p, bool fence_other, producer_txn_cb cb, void *arg);

/** Commits the open transaction (aborting it if librdkafka says it must be
 *  aborted) and opens the next one, on a worker thread; @p cb follows.
 *  @return 0; -EALREADY unless PRODUCER_TXN_OPEN; -ENOMEM. */
int producer_txn_commit(struct producer *p, producer_txn_cb cb, void *arg);

#endif
