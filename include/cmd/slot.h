/* slot.h — `outbox-relay slot`: the logical replication slot of log-based
 * capture (relay.capture = wal, relay.slot), which migrate creates.
 *
 *   slot status [--json]   whether it exists and can serve, how much WAL it holds
 *   slot drop --yes        drop it (refused while a process streams from it)
 *
 * A slot keeps every WAL segment its consumer has not confirmed: one nobody
 * reads fills the server's disk, one that fell too far behind is lost. */
#ifndef OUTBOX_SLOT_H
#define OUTBOX_SLOT_H

#include <stdio.h>

#include "config/config.h"

/** Prints the command's usage (`slot --help`) to @p out. */
void slot_usage(FILE *out);

/** Runs one `slot` action for relay.slot of @p cfg; @p argv holds what
 *  cli_take_args() collected (action first).
 *  @return a process exit status: 0 (status: the slot exists and can serve;
 *  drop: dropped, or there was none), 1 (status: missing, lost or unusable;
 *  drop: the slot is in use or not this database's), 64 usage (drop without
 *  --yes included), 69 PostgreSQL unreachable, 70 any other failure. */
int slot_main(const struct relay_config *cfg, int argc, char **argv);

#endif
