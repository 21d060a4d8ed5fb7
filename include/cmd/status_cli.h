/* status_cli.h — `outbox-relay status`: asks a running relay over its status
 * endpoint and prints what an operator checks first. */
#ifndef OUTBOX_STATUS_CLI_H
#define OUTBOX_STATUS_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "config/config.h"

/** Prints the command's usage (`status --help`) to @p out. */
void status_cli_usage(FILE *out);

/** Fetches /status and /readyz from @p url ("http://host:port", a path prefix
 *  allowed; NULL: derived from @p cfg's http.listen, a wildcard address asked
 *  on loopback) and prints a summary to stdout, or with @p json the /status
 *  document as the relay sent it. Problems go to stderr.
 *  @return EXIT_OK when the relay is ready, 1 when it answers but is not
 *  ready, EXIT_UNAVAILABLE when it cannot be asked (no endpoint configured,
 *  nothing listening, no HTTP answer), EXIT_USAGE for a URL it cannot use. */
int status_cli_run(const char *url, const struct relay_config *cfg, bool json);

#endif
