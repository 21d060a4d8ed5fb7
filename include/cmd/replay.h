/* replay.h — `outbox-relay replay`: publish rows that were already sent once
 * more, exactly as the relay did (key, value, timestamp, headers with the same
 * event_id) plus a `replay` header, for consumers that lost data.
 *
 * It only reads the table (no mark changes, no leader lock), so it runs next
 * to a live relay; it refuses rows that are not sent yet (they are the
 * relay's). Interrupted and run again, it publishes the same messages again:
 * consumers drop repeated event_ids, as they must for the relay's own
 * at-least-once delivery. */
#ifndef OUTBOX_REPLAY_H
#define OUTBOX_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"

/** Prints the command's usage (`replay --help`) to @p out. */
void replay_usage(FILE *out);

/** The command; @p argv holds its words (cli_take_args).
 *  @return a process exit status: 0 every selected sent row was published
 *  (and acknowledged), 64 usage, 69 PostgreSQL or Kafka unreachable, 70 a
 *  message failed, 78 the table does not exist, 130 interrupted. */
int replay_main(const struct relay_config *cfg, int argc, char **argv);

/** Publishes the rows @p ids (ascending, @p n of them) of the table of
 *  @p cfg as the relay wrote them, without the replay header (they were never
 *  delivered: a failover's recovery), in id order, and waits for Kafka's
 *  acknowledgements. Dead rows are left out. @p published counts them.
 *  @return 0 when every one was acknowledged, else replay_main's exit status. */
int replay_ids(const struct relay_config *cfg, const int64_t *ids, size_t n, uint64_t *published);

#endif
