/* relay.h — the relay loop: leader election, claiming, producing, marking.
 *
 * A batch moves through claim → produce → (all delivery reports) → mark; a
 * row is marked sent only after Kafka acknowledged it, with a conditional
 * UPDATE, so running any step twice is harmless. */
#ifndef OUTBOX_RELAY_H
#define OUTBOX_RELAY_H

#include "config.h"

/** Runs the relay until SIGTERM/SIGINT.
 *  @return a process exit status (EXIT_OK after a clean shutdown). */
int relay_run(const struct relay_config *cfg);

#endif
