/* profile_check.h — relay.profile = debezium: the application's outbox table
 * checked at start for the columns the profile reads and their types. */
#ifndef OUTBOX_PROFILE_CHECK_H
#define OUTBOX_PROFILE_CHECK_H

#include <stddef.h>

#include "config/config.h"
#include "core/event.h"
#include "core/sql_debezium.h"

/** Connects (blocking) and checks that the table has every column @p cfg
 *  reads (with relay.capture = poll, also that the view over it, when there
 *  is one, was made for this configuration), of a type whose text is the bytes Debezium would publish, and
 *  reads into @p cols what JsonConverter's schemas say of the key's and the
 *  payload's columns. Nothing to check in the
 *  outbox profile.
 *  @return 0 (fit, or nothing to check), -EINVAL with @p why naming the
 *  column (refuse to start), -EHOSTUNREACH (PostgreSQL not reachable: the
 *  relay's own reconnects take over, unless it needs @p cols). */
int profile_check(const struct relay_config *cfg, struct connect_columns *cols, char *why,
                  size_t len);

/** relay.capture = poll in the debezium profile: what the view over the
 *  table maps under @p cfg (sql_debezium.h); @p pl holds the placed
 *  columns' names that @p m points to. @return 0 or -EINVAL. */
int profile_view_map(const struct relay_config *cfg, struct event_placement *pl,
                     struct sql_debezium_map *m);

#endif
