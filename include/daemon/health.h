/* health.h — what the relay's own figures say about its health, computed in
 * one place for every reader: the readiness checks (/readyz, the "ready" of
 * /status, outbox_relay_ready of /metrics), the role's name and the backlog's
 * age now. Pure functions of struct relay_stats: no I/O. */
#ifndef OUTBOX_HEALTH_H
#define OUTBOX_HEALTH_H

#include <stdbool.h>

#include "config/config.h"
#include "base/stats.h"
#include "base/strbuf.h"

/** Evaluates the readiness checks of @p s (thresholds from @p cfg, which may
 *  be NULL; durations at monotonic time @p mono_now). With @p verbose_out
 *  (may be NULL) each check is appended as a "[+]name ok" or "[-]name reason"
 *  line, in a fixed order; the "slot" check only when s->slot.enabled
 *  (relay.capture = wal).
 *  @return true when every check passes. */
bool health_ready(const struct relay_stats *s, const struct relay_config *cfg, double mono_now,
                  struct strbuf *verbose_out);

/** @return "leader", "standby" or "unknown". */
const char *health_role_name(enum stats_role role);

/** @return the age of the oldest unsent row at unix time @p now: the age the
 *  last backlog query measured plus the time since (0 when the backlog was
 *  empty). Meaningful only while s->backlog_known. */
double health_oldest_unsent_age(const struct relay_stats *s, double now);

#endif
