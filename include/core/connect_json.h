/* connect_json.h — the bytes Kafka Connect's JsonConverter (schemas.enable =
 * false) writes for what Debezium's Outbox Event Router hands it: the key or
 * the payload as a JSON string, the payload expanded into JSON
 * (table.expand.json.payload = true), and the envelope that placed columns
 * join (column:envelope:name). Pure logic, no I/O. The expansion itself is
 * connect_expand.h.
 *
 * Byte identity rests on three things the JVM side does, reproduced here:
 * Jackson's escaping of strings (", \, \b \t \n \f \r, other control
 * characters as \u00XX, everything else as UTF-8), the Event Router's schema
 * inference for an expanded payload (JsonSchemaData: null members and empty
 * arrays left out, numbers int32, int64 or float64 by what the value needs,
 * the objects of an array merged into one struct whose missing members are
 * null), and Java's Double.toString for float64 values. */
#ifndef OUTBOX_CONNECT_JSON_H
#define OUTBOX_CONNECT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/strbuf.h"
#include "core/event.h"

/** The Connect schema Debezium's PostgreSQL connector gives a column. */
enum connect_type {
    CONNECT_STRING = 0,  /* text, varchar, bpchar */
    CONNECT_JSON,        /* json, jsonb: a string named io.debezium.data.Json */
    CONNECT_UUID,        /* uuid: a string named io.debezium.data.Uuid */
    CONNECT_INT16,
    CONNECT_INT32,
    CONNECT_INT64,
};

struct connect_column {
    enum connect_type type;
    bool optional;       /* the column is nullable */
};

/** What JsonConverter with schemas.enable = true writes for the key's and
 *  the payload's columns (read from the catalog at start). */
struct connect_columns {
    struct connect_column key, payload;
    struct connect_column placed[EVENT_PLACEMENT_MAX]; /* relay.additional_placement's */
};

/** The Event Router's cache of envelope schemas: it builds an envelope's
 *  schema, named after the routing value, once per payload schema, so every
 *  later envelope of that payload schema carries the first one's name (until
 *  the task restarts, or 10,000 payload schemas later). */
struct connect_names {
    size_t n, cap;
    struct connect_name {
        uint64_t hash;
        char *schema;          /* the payload schema's JSON */
        char *routed;          /* the routing value it was first seen with */
    } *v;
};

/** Frees what @p names holds; it may be used again. */
void connect_names_free(struct connect_names *names);

/** @return the enum connect_type of PostgreSQL type @p typname (pg_type.typname),
 *  -1 for one Debezium maps otherwise. */
int connect_type_of(const char *typname);

/** Appends @p len bytes of UTF-8 at @p s as a JSON string, as Jackson writes it. */
void connect_json_string(struct strbuf *out, const char *s, size_t len);

/** Appends @p d as Java's Double.toString writes it (the shortest decimal
 *  that reads back as @p d, at least two digits; plain from 10^-3 to 10^7,
 *  else d.dddE<n>), as JDK 19 and later do. Infinities as Jackson writes
 *  them: "Infinity" and "-Infinity", quoted. */
void connect_json_double(struct strbuf *out, double d);

/** The key of @p row's message under @p style into @p out, when the key
 *  converter is json: the aggregate id as a JSON string, or null (the
 *  four bytes) for a NULL aggregate id; with schemas, in {"schema":
 *  <the column's>, "payload": ...}. @return 0 or -ENOMEM. */
int connect_key(const struct event_row *row, const struct event_style *style,
                struct strbuf *out);

/** The value of @p row's message under @p style into @p out, when the value
 *  converter is json: the payload (a JSON string, its expansion, or null),
 *  alone or in the envelope {"payload": ..., "<name>": <column>, ...} of the
 *  columns placed in it; with schemas, in {"schema": <the column's, the
 *  expansion's or the envelope's>, "payload": ...}. @return 0; -EINVAL with errbuf for a payload
 *  Debezium's task fails on (connect_json_expand()); -ENOMEM. */
int connect_value(const struct event_row *row, const struct event_style *style,
                  struct strbuf *out, char *errbuf, size_t errlen);

/** A message's key and value bytes: key NULL is no key, value NULL a
 *  tombstone. They point into the row or into the buffers given to
 *  connect_message(). */
struct connect_bytes {
    const char *key;
    size_t key_len;
    const char *value;
    size_t value_len;
};

/** The key and value of @p row's message under @p style, whatever the
 *  converters, as the producer sends them and verify expects them; @p key and
 *  @p value hold what the json converters write. @return as connect_value(). */
int connect_message(const struct event_row *row, const struct event_style *style,
                    struct strbuf *key, struct strbuf *value, struct connect_bytes *out,
                    char *errbuf, size_t errlen);

#endif
