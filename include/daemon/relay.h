/* relay.h — the relay loop: leader election, claiming, producing, marking.
 *
 * A batch moves through claim → produce → (all delivery reports) → mark; a
 * row is marked sent only after Kafka acknowledged it, with a conditional
 * UPDATE, so running any step twice is harmless. */
#ifndef OUTBOX_RELAY_H
#define OUTBOX_RELAY_H

#include <stddef.h>

#include "config/config.h"

/** Reads the configuration again for SIGHUP into @p next (config_init'ed).
 *  @return 0, or a negative errno with errbuf naming the problem. */
typedef int (*relay_reload_fn)(struct relay_config *next, char *errbuf, size_t errlen, void *arg);

/** Runs the relay until SIGTERM/SIGINT. SIGHUP calls @p reload (may be NULL)
 *  and applies the reloadable keys to @p cfg in place.
 *  @return a process exit status (EXIT_OK after a clean shutdown). */
int relay_run(struct relay_config *cfg, relay_reload_fn reload, void *reload_arg);

#endif
