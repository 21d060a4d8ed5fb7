/* event.h — turning one claimed outbox row into the parts of a Kafka message:
 * topic (from the row or the template), key and headers. Pure logic, no I/O. */
#ifndef OUTBOX_EVENT_H
#define OUTBOX_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <librdkafka/rdkafka.h>

#include "core/pg_binary.h"

/** Columns placed in headers or the envelope (relay.additional_placement), at most. */
#define EVENT_PLACEMENT_MAX 8
#define EVENT_PLACEMENT_NAME 128

/** relay.additional_placement parsed: "column:header[:name]",
 *  "column:envelope[:name]" and "column:partition" items, comma-separated,
 *  as the Outbox Event Router's table.fields.additional.placement writes them. */
struct event_placement {
    size_t n;
    char column[EVENT_PLACEMENT_MAX][EVENT_PLACEMENT_NAME];
    char name[EVENT_PLACEMENT_MAX][EVENT_PLACEMENT_NAME]; /* the header's or the member's */
    enum event_place {
        EVENT_PLACE_HEADER = 0,
        EVENT_PLACE_ENVELOPE,   /* a member of the value's envelope */
        EVENT_PLACE_PARTITION,  /* an int4 column: the message's partition (NULL: the key's) */
    } where[EVENT_PLACEMENT_MAX];
};

/** What a Kafka Connect converter makes of the key or the value
 *  (relay.key_converter, relay.value_converter). */
enum event_converter {
    EVENT_CONVERTER_STRING = 0,  /* StringConverter: the column's text as it is */
    EVENT_CONVERTER_JSON,        /* JsonConverter, schemas.enable = false (core/connect_json.h) */
    EVENT_CONVERTER_JSON_SCHEMA, /* JsonConverter, schemas.enable = true: {"schema", "payload"} */
};

struct connect_columns;
struct connect_names;

/** Parses @p spec ("" = none) into @p out. @return 0 or -EINVAL (errbuf says
 *  why). */
int event_placement_parse(const char *spec, struct event_placement *out, char *errbuf,
                          size_t errlen);

/** @return true when @p pl places a column in @p where. */
bool event_placement_has(const struct event_placement *pl, enum event_place where);

/** event_placement_parse() for the configuration's check. */
int event_placement_check(const char *spec, char *errbuf, size_t errlen);

/** One outbox row as claimed; strings point into the query result (not owned).
 *  topic, payload and headers_json may be NULL (SQL NULL). */
struct event_row {
    int64_t id;
    const char *event_id;
    const char *aggregate_type;
    const char *aggregate_id;
    const char *event_type;
    const char *topic;          /* overrides the template when not NULL and not empty */
    const char *payload;        /* NULL = tombstone */
    size_t payload_len;
    const char *headers_json;   /* NULL or a JSON object whose string values become headers */
    /* relay.additional_placement: the columns' values in its order (NULL = SQL NULL). */
    size_t n_placed;
    const char *placed[EVENT_PLACEMENT_MAX];
    bool placed_number[EVENT_PLACEMENT_MAX]; /* an integer column: a number in the envelope */
    int64_t created_ms;         /* created_at, milliseconds since the epoch; 0 if infinite */
    const char *created_at;     /* created_at as RFC 3339 text (UTC) */
    /* Where event_id and created_at are formatted when read in binary. */
    char event_id_text[PGB_UUID_TEXT];
    char created_at_text[PGB_TIME_TEXT];
    char placed_text[EVENT_PLACEMENT_MAX][PGB_UUID_TEXT]; /* placed uuids and integers */
};

/** Checks a topic template: only the placeholders ${aggregate_type} (also
 *  written ${routedByValue}, the Event Router's name for it) and ${event_type}
 *  are allowed. @return 0 or -EINVAL (errbuf says why). */
int event_topic_template_check(const char *tmpl, char *errbuf, size_t errlen);

/** Renders @p tmpl for a row into @p out.
 *  @return the length written, -ENOSPC if it does not fit, -EINVAL on an unknown placeholder. */
int event_topic_render(const char *tmpl, const char *aggregate_type, const char *event_type,
                       char *out, size_t outlen);

/** The topic row @p e goes to: its own topic (cut to @p outlen - 1 bytes),
 *  else @p tmpl rendered for it; "" when the template cannot be rendered. */
void event_row_topic(const char *tmpl, const struct event_row *e, char *out, size_t outlen);

/** Checks a topic name before producing: 1..249 bytes of [A-Za-z0-9._-], not
 *  "." or "..", and not starting with "__" (Kafka's internal topics, such as
 *  __consumer_offsets). @return 0 or -EINVAL with errbuf saying why (printable
 *  ASCII only, so it can be stored as last_error whatever the topic held). */
int event_topic_check(const char *topic, char *errbuf, size_t errlen);

/** @return true if event_topic_check() accepts @p topic. */
bool event_topic_valid(const char *topic);

/** The header `outbox-relay replay` adds to a message it publishes again
 *  (its value: when, RFC 3339 UTC). Reserved like the relay's own. */
#define EVENT_REPLAY_HEADER "replay"

/** @return true if @p name (@p len bytes) is one of the relay's own header
 *  names (event_id, event_type, aggregate_type, aggregate_id, outbox_id,
 *  created_at) or EVENT_REPLAY_HEADER, which a row's headers may not use. */
bool event_header_reserved(const char *name, size_t len);

/** @return the name of the relay's @p i-th own header, or NULL past the last:
 *  the one list behind event_headers_build() and event_header_reserved(). */
const char *event_header_name(size_t i);

/** Builds the message headers for @p row: event_id, event_type, aggregate_type,
 *  aggregate_id, outbox_id (left out when row->id is 0: an event with no
 *  outbox row, such as a logical message), created_at, then each string
 *  member of the row's headers object, in document order.
 *  @return 0 and *out (caller owns it, or hands it to rd_kafka_producev), or
 *  -EINVAL with errbuf when headers_json is not a JSON object of strings or
 *  names a reserved header (event_header_reserved()): the row is poison. */
int event_headers_build(const struct event_row *row, rd_kafka_headers_t **out,
                        char *errbuf, size_t errlen);

/** Which headers a message carries besides the row's own headers object. */
struct event_style {
    bool relay_headers;                      /* event_id, event_type, ... (the list above) */
    const char *id_header;                   /* NULL or "": none; else the event id under it */
    const struct event_placement *placement; /* NULL: none; else row->placed as headers or
                                                members of the envelope */
    enum event_converter key_converter, value_converter;
    bool expand_payload;                     /* value_converter json: the payload expanded */
    bool tombstone_on_empty;                 /* a NULL or blank payload: no value at all */
    const char *payload_column;              /* the root of an expanded payload's schema names */
    const struct connect_columns *columns;   /* the key's and payload's column schemas, for
                                                EVENT_CONVERTER_JSON_SCHEMA */
    const char *envelope_name;               /* "<topic.prefix>.<schema>.<table>": the start
                                                of the envelope's schema name */
    struct connect_names *names;             /* NULL, or the envelope schema names seen */
};

/** The partition @p row's message goes to under @p style: the value of its
 *  last column placed as partition, or RD_KAFKA_PARTITION_UA (the
 *  partitioner's choice by key) when there is none or it is NULL. */
int32_t event_row_partition(const struct event_row *row, const struct event_style *style);

/** @return true when @p style makes @p row's message a tombstone whatever
 *  the converter: relay.tombstone_on_empty_payload and a payload that is
 *  NULL or only whitespace (as Java's trim() sees it). */
bool event_row_tombstone(const struct event_row *row, const struct event_style *style);

/** event_headers_build() in @p style: the relay's own headers when asked
 *  for, then the id header, then the columns placed in headers (a NULL value is a
 *  header without a value, as the Event Router writes it), then the row's
 *  headers object. @return as event_headers_build(). */
int event_headers_build_styled(const struct event_row *row, const struct event_style *style,
                               rd_kafka_headers_t **out, char *errbuf, size_t errlen);

#endif
