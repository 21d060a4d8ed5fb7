/* dead.h — `outbox-relay dead`: the operator's view of rows the relay could
 * not deliver, and the two ways out (requeue after a fix, or drop).
 *
 *   dead list [--json]          dead and failing rows, oldest first
 *   dead requeue ID...|--all    make them eligible again (attempts reset)
 *   dead drop ID... --yes       delete them for good
 *
 * requeue and drop print counts; --ids adds the ids (thousands, for --all).
 *
 * Every action is a single conditional statement, so running it twice
 * changes nothing more and reports 0 rows the second time. */
#ifndef OUTBOX_DEAD_H
#define OUTBOX_DEAD_H

#include <stdio.h>

#include "config/config.h"

/** Prints the command's usage (`dead --help`) to @p out. */
void dead_usage(FILE *out);

/** Runs one `dead` action for the table of @p cfg; @p argv holds what
 *  cli_take_args() collected (action first).
 *  @return a process exit status: 0, 64 usage (including drop without --yes),
 *  69 PostgreSQL unreachable, 78 the configured table does not exist,
 *  70 any other failure. */
int dead_main(const struct relay_config *cfg, int argc, char **argv);

#endif
