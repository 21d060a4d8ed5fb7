/* config_doc.h — documentation of the configuration keys, generated from the
 * parameter table: the shipped conffile, outbox-relay.conf(5), docs/configuration.md's
 * table. `outbox-relay config-doc --format FORMAT` prints it. */
#ifndef OUTBOX_CONFIG_DOC_H
#define OUTBOX_CONFIG_DOC_H

#include <stdio.h>

/** Writes the documentation in @p format: "conf" (the commented default
 *  configuration file), "man" (outbox-relay.conf(5) in roff) or "markdown"
 *  (docs/configuration.md). @return 0, or -1 for an unknown format or a write
 *  error. */
int config_doc(const char *format, FILE *out);

#endif
