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

/** Waits for what the caller checks before the relay may connect (it runs
 *  meanwhile, while the producer and the status endpoint start).
 *  @return EXIT_OK, or the exit status to stop with (the reason logged). */
typedef int (*relay_gate_fn)(void *arg);

/** Runs the relay until SIGTERM/SIGINT. SIGHUP calls @p reload (may be NULL)
 *  and applies the reloadable keys to @p cfg in place. @p gate (may be NULL)
 *  is called once, before the first connection to PostgreSQL.
 *  @return a process exit status (EXIT_OK after a clean shutdown). */
int relay_run(struct relay_config *cfg, relay_reload_fn reload, void *reload_arg,
              relay_gate_fn gate, void *gate_arg);

#endif
