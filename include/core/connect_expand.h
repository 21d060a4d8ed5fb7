/* connect_expand.h — the Event Router's table.expand.json.payload = true as
 * Kafka Connect's JsonConverter (schemas.enable = false) writes it: the
 * payload's JSON object, its members of the Connect schema the Event Router
 * infers (JsonSchemaData: null members and empty arrays left out, numbers
 * int32, int64 or float64 by what the value needs, the objects of an array
 * merged into one struct whose missing members are null). Pure logic. */
#ifndef OUTBOX_CONNECT_EXPAND_H
#define OUTBOX_CONNECT_EXPAND_H

#include <stdbool.h>
#include <stddef.h>

#include "base/strbuf.h"

/** What connect_expand() did. */
enum {
    CONNECT_EXPAND_KEPT = 0,      /* the Event Router keeps the text (and its column's schema) */
    CONNECT_EXPAND_DONE = 1,      /* expanded */
    CONNECT_EXPAND_KEPT_NO_SCHEMA = 2, /* kept, with no schema at all (an empty top-level array) */
};

/** Appends the Event Router's expansion of the payload text @p json
 *  (@p len bytes) as JsonConverter writes it, @p in_envelope or alone, and
 *  when @p schema_out is not NULL the schema it inferred, as JsonConverter
 *  with schemas.enable = true writes it (structs named by their key path from
 *  @p root_name, the payload column's name).
 *  @return CONNECT_EXPAND_DONE: expanded into @p out (and @p schema_out);
 *  CONNECT_EXPAND_KEPT or CONNECT_EXPAND_KEPT_NO_SCHEMA: nothing appended
 *  (not an object, not valid JSON, or a shape the schema inference refuses,
 *  such as an array mixing types); -EINVAL: a payload on which Debezium's
 *  task fails (a top-level array, but an empty one outside an envelope; an
 *  integer beyond 64 bits; an array whose objects give one member different
 *  types, or a null beside objects of different members), with errbuf;
 *  -ENOMEM. */
int connect_expand(struct strbuf *out, struct strbuf *schema_out, const char *root_name,
                   const char *json, size_t len, bool in_envelope, char *errbuf, size_t errlen);

#endif
