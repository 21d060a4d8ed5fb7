/* errors.h — the one error convention: functions return 0 on success or a
 * negative errno value (-EINVAL, -ENOMEM, …) on failure; where a human message
 * matters, the caller passes an errbuf that the callee fills.
 * Process exit statuses follow sysexits(3). */
#ifndef OUTBOX_ERRORS_H
#define OUTBOX_ERRORS_H

#include <stddef.h>

/** Writes a printf-formatted message to @p errbuf (if any) and returns
 *  -EINVAL: `return errbuf_fail(errbuf, errlen, "…", …);` in validators. */
int errbuf_fail(char *errbuf, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define EXIT_OK          0
#define EXIT_USAGE       64   /* EX_USAGE: bad command line */
#define EXIT_UNAVAILABLE 69   /* EX_UNAVAILABLE: PostgreSQL or Kafka unreachable */
#define EXIT_SOFTWARE    70   /* EX_SOFTWARE: internal error */
#define EXIT_CONFIG      78   /* EX_CONFIG: configuration rejected */

#endif
