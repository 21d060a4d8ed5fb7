/* producer_int.h — what producer.c and producer_txn.c share. */
#ifndef OUTBOX_PRODUCER_INT_H
#define OUTBOX_PRODUCER_INT_H

#include "io/producer.h"

/** The instance cannot go on: it takes nothing more, and what waits in its
 *  queues is purged (producer.c says why). */
void producer_set_fatal(struct producer *p);

/** Destroys the instance now: no transaction call may be running. */
void producer_destroy(struct producer *p);

/** A refused instance is replaced, not initialised: a running call stops retrying. */
void producer_txn_give_up(struct producer *p);

/** With a transaction call running, has the instance destroyed once it
 *  returned. @return whether it was deferred so. */
bool producer_txn_defer_stop(struct producer *p);

/** Whether a commit runs on a worker thread. */
bool producer_txn_committing(const struct producer *p);

/** Gives the instance up while its transaction waits on a broker that
 *  stopped answering (core/kafka_stall.h): a running commit stops waiting
 *  and is not aborted (the abort would wait on the same broker); the
 *  instance's successor aborts it. */
void producer_txn_abandon(struct producer *p);

/** The conf of a short-lived instance under the relay's other transactional
 *  id (@p p's slot flipped), whose init_transactions fences older producers
 *  of that id: no statistics, the relay's log callback. NULL on error. */
rd_kafka_conf_t *producer_conf_other_id(const struct producer *p, char *errbuf, size_t errlen);

#endif
