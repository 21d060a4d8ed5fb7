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

#include <stdio.h>

#include "config/config.h"

/** Prints the command's usage (`replay --help`) to @p out. */
void replay_usage(FILE *out);

/** The command; @p argv holds its words (cli_take_args).
 *  @return a process exit status: 0 every selected sent row was published
 *  (and acknowledged), 64 usage, 69 PostgreSQL or Kafka unreachable, 70 a
 *  message failed, 78 the table does not exist, 130 interrupted. */
int replay_main(const struct relay_config *cfg, int argc, char **argv);

#endif
