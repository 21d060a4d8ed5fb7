/* event.c — one outbox row → topic and headers of its Kafka message. */
#include "core/event.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errors.h"

#define KAFKA_TOPIC_MAX 249
#define STR_(x) #x
#define STR(x) STR_(x)
/* How much of a rejected topic or header name an error message quotes. */
#define KAFKA_TOPIC_SHOWN 100
#define HEADER_NAME_SHOWN 100

static bool topic_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
}

/* Recognises "${name}" at @p p. @return the placeholder's length and sets
 * *value, 0 if @p p does not start a placeholder, -1 if it is unknown or
 * unterminated. */
static int placeholder_at(const char *p, const char *aggregate_type, const char *event_type,
                          const char **value)
{
    if (p[0] != '$' || p[1] != '{')
        return 0;
    const char *close = strchr(p + 2, '}');
    if (!close)
        return -1;
    size_t n = (size_t)(close - (p + 2));
    if ((n == strlen("aggregate_type") && !memcmp(p + 2, "aggregate_type", n)) ||
        (n == strlen("routedByValue") && !memcmp(p + 2, "routedByValue", n)))
        *value = aggregate_type ? aggregate_type : "";
    else if (n == strlen("event_type") && !memcmp(p + 2, "event_type", n))
        *value = event_type ? event_type : "";
    else
        return -1;
    return (int)(n + 3);
}

int event_topic_template_check(const char *tmpl, char *errbuf, size_t errlen)
{
    if (!tmpl || !*tmpl)
        return errbuf_fail(errbuf, errlen, "topic template is empty");

    /* Rows would all be refused (event_topic_check): say so at start instead. */
    if (tmpl[0] == '_' && tmpl[1] == '_')
        return errbuf_fail(errbuf, errlen,
                           "topic template starts with \"__\": such names are reserved for "
                           "Kafka's internal topics");

    size_t literal = 0;
    for (const char *p = tmpl; *p;) {
        const char *value;
        int n = placeholder_at(p, "", "", &value);
        if (n < 0) {
            const char *close = strchr(p, '}');
            if (!close)
                return errbuf_fail(errbuf, errlen, "unterminated \"${\" in topic template");
            return errbuf_fail(errbuf, errlen,
                        "unknown placeholder \"%.*s\" in topic template "
                        "(allowed: ${aggregate_type}, ${routedByValue}, ${event_type})",
                        (int)(close - p + 1), p);
        }
        if (n > 0) {
            p += n;
            continue;
        }
        /* The fixed text ends up in every topic, so catch what can never be valid now. */
        if (!topic_char(*p))
            return errbuf_fail(errbuf, errlen,
                        "character '%c' in topic template is not allowed in a Kafka topic "
                        "(allowed: A-Z a-z 0-9 . _ -)",
                        *p);
        if (++literal > KAFKA_TOPIC_MAX)
            return errbuf_fail(errbuf, errlen, "topic template is longer than %d characters",
                        KAFKA_TOPIC_MAX);
        p++;
    }
    return 0;
}

int event_topic_render(const char *tmpl, const char *aggregate_type, const char *event_type,
                       char *out, size_t outlen)
{
    size_t len = 0;
    for (const char *p = tmpl; *p;) {
        const char *value = NULL;
        int n = placeholder_at(p, aggregate_type, event_type, &value);
        if (n < 0)
            return -EINVAL;
        size_t vlen = n > 0 ? strlen(value) : 1;
        if (len + vlen >= outlen)
            return -ENOSPC;
        memcpy(out + len, n > 0 ? value : p, vlen);
        len += vlen;
        p += n > 0 ? (size_t)n : 1;
    }
    if (outlen == 0)
        return -ENOSPC;
    out[len] = '\0';
    return (int)len;
}

void event_row_topic(const char *tmpl, const struct event_row *e, char *out, size_t outlen)
{
    if (e->topic && *e->topic)
        snprintf(out, outlen, "%s", e->topic);
    else if (event_topic_render(tmpl, e->aggregate_type, e->event_type, out, outlen) < 0)
        out[0] = '\0';
}

/* Copies at most @p max bytes of @p s into @p out for an error message:
 * printable ASCII as is, anything else as \xNN. The message ends up in
 * last_error, a text column: a byte sequence cut in the middle of a UTF-8
 * character would make the failure itself unrecordable. */
static void quote_for_error(const char *s, size_t max, char *out, size_t outlen)
{
    size_t o = 0;
    for (size_t i = 0; s[i] && i < max && o + 5 <= outlen; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", c);
    }
    if (outlen)
        out[o < outlen ? o : outlen - 1] = '\0';
}

static int topic_fail(char *errbuf, size_t errlen, const char *topic, const char *why)
{
    char shown[4 * KAFKA_TOPIC_SHOWN + 1];
    quote_for_error(topic, KAFKA_TOPIC_SHOWN, shown, sizeof shown);
    return errbuf_fail(errbuf, errlen, "invalid topic name \"%s%s\": %s", shown,
                       strlen(topic) > KAFKA_TOPIC_SHOWN ? "..." : "", why);
}

int event_topic_check(const char *topic, char *errbuf, size_t errlen)
{
    if (!topic || !*topic)
        return errbuf_fail(errbuf, errlen, "invalid topic name: it is empty");
    size_t n = 0;
    for (; topic[n]; n++) {
        if (n >= KAFKA_TOPIC_MAX)
            return topic_fail(errbuf, errlen, topic, "longer than " STR(KAFKA_TOPIC_MAX) " characters");
        if (!topic_char(topic[n]))
            return topic_fail(errbuf, errlen, topic,
                              "only A-Z a-z 0-9 . _ - are allowed in a Kafka topic");
    }
    if (strcmp(topic, ".") == 0 || strcmp(topic, "..") == 0)
        return topic_fail(errbuf, errlen, topic, "not allowed as a Kafka topic");
    /* Kafka keeps its own state in "__" topics (__consumer_offsets,
     * __transaction_state); a write there corrupts the cluster's bookkeeping,
     * and a broker accepts it from any client allowed to write everywhere. */
    if (topic[0] == '_' && topic[1] == '_')
        return topic_fail(errbuf, errlen, topic,
                          "names starting with \"__\" are reserved for Kafka's internal topics");
    return 0;
}

bool event_topic_valid(const char *topic)
{
    return event_topic_check(topic, NULL, 0) == 0;
}

/* The relay's own headers, in the order they are written (one whose value
 * is NULL is left out). One table: what
 * is written here is what a row's headers may not use (a consumer that
 * dedupes on event_id or routes on aggregate_type must be able to trust
 * them), so a header added here is reserved at the same time. */
static const char *hdr_event_id(const struct event_row *r, char *buf, size_t len)
{
    (void)buf, (void)len;
    return r->event_id;
}

static const char *hdr_event_type(const struct event_row *r, char *buf, size_t len)
{
    (void)buf, (void)len;
    return r->event_type;
}

static const char *hdr_aggregate_type(const struct event_row *r, char *buf, size_t len)
{
    (void)buf, (void)len;
    return r->aggregate_type;
}

static const char *hdr_aggregate_id(const struct event_row *r, char *buf, size_t len)
{
    (void)buf, (void)len;
    return r->aggregate_id;
}

/* An event with no outbox row (a logical message, id 0) has no outbox_id:
 * "0" would name a row that does not exist. */
static const char *hdr_outbox_id(const struct event_row *r, char *buf, size_t len)
{
    if (r->id == 0)
        return NULL;
    snprintf(buf, len, "%" PRId64, r->id);
    return buf;
}

static const char *hdr_created_at(const struct event_row *r, char *buf, size_t len)
{
    (void)buf, (void)len;
    return r->created_at;
}

static const struct {
    const char *name;
    const char *(*value)(const struct event_row *row, char *buf, size_t len);
} relay_headers[] = {
    {"event_id", hdr_event_id},
    {"event_type", hdr_event_type},
    {"aggregate_type", hdr_aggregate_type},
    {"aggregate_id", hdr_aggregate_id},
    {"outbox_id", hdr_outbox_id},
    {"created_at", hdr_created_at},
};

#define N_RELAY_HEADERS (sizeof relay_headers / sizeof relay_headers[0])

bool event_header_reserved(const char *name, size_t len)
{
    for (size_t i = 0; i < N_RELAY_HEADERS; i++)
        if (strlen(relay_headers[i].name) == len && !memcmp(relay_headers[i].name, name, len))
            return true;
    /* Written by replay only, but a row that forged it would make a first
     * delivery look like a replay to verify and to consumers. */
    return len == strlen(EVENT_REPLAY_HEADER) && !memcmp(EVENT_REPLAY_HEADER, name, len);
}

const char *event_header_name(size_t i)
{
    return i < N_RELAY_HEADERS ? relay_headers[i].name : NULL;
}

static int header_add(rd_kafka_headers_t *hdrs, const char *name, const char *value)
{
    return rd_kafka_header_add(hdrs, name, -1, value, -1) == RD_KAFKA_RESP_ERR_NO_ERROR
               ? 0
               : -ENOMEM;
}

int event_headers_build(const struct event_row *row, rd_kafka_headers_t **out, char *errbuf,
                        size_t errlen)
{
    static const struct event_style relay_style = { .relay_headers = true };
    return event_headers_build_styled(row, &relay_style, out, errbuf, errlen);
}

/* The headers of @p style, before the row's own. */
static int style_headers(const struct event_row *row, const struct event_style *style,
                         rd_kafka_headers_t *hdrs)
{
    int rc = 0;
    for (size_t i = 0; !rc && style->relay_headers && i < N_RELAY_HEADERS; i++) {
        char buf[24];
        const char *value = relay_headers[i].value(row, buf, sizeof buf);
        if (value)
            rc = header_add(hdrs, relay_headers[i].name, value);
    }
    if (!rc && style->id_header && *style->id_header)
        rc = header_add(hdrs, style->id_header, row->event_id);
    for (size_t i = 0; !rc && style->placement && i < style->placement->n; i++) {
        if (style->placement->where[i] != EVENT_PLACE_HEADER)
            continue;
        const char *v = i < row->n_placed ? row->placed[i] : NULL;
        rc = rd_kafka_header_add(hdrs, style->placement->name[i], -1, v, v ? -1 : 0) ==
                     RD_KAFKA_RESP_ERR_NO_ERROR
                 ? 0
                 : -ENOMEM;
    }
    return rc;
}

int event_headers_build_styled(const struct event_row *row, const struct event_style *style,
                               rd_kafka_headers_t **out, char *errbuf, size_t errlen)
{
    *out = NULL;

    cJSON *json = NULL;
    size_t n_extra = 0;
    if (row->headers_json) {
        json = cJSON_Parse(row->headers_json);
        if (!json)
            return errbuf_fail(errbuf, errlen, "headers is not valid JSON");
        if (!cJSON_IsObject(json)) {
            cJSON_Delete(json);
            return errbuf_fail(errbuf, errlen, "headers is not a JSON object");
        }
        /* Check every member before building, so an error leaves nothing behind. */
        const cJSON *m;
        cJSON_ArrayForEach(m, json) {
            const char *name = m->string ? m->string : "";
            /* Refused, not dropped: the application meant something by it, and a
             * message published without it would silently differ from the row. */
            const char *why = !cJSON_IsString(m) ? "is not a string"
                              : event_header_reserved(name, strlen(name))
                                  ? "is reserved: the relay writes that header itself"
                                  : NULL;
            if (why) {
                char shown[4 * HEADER_NAME_SHOWN + 1];
                quote_for_error(name, HEADER_NAME_SHOWN, shown, sizeof shown);
                int rc = errbuf_fail(errbuf, errlen, "headers member \"%s%s\" %s", shown,
                                     strlen(name) > HEADER_NAME_SHOWN ? "..." : "", why);
                cJSON_Delete(json);
                return rc;
            }
            n_extra++;
        }
    }

    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(N_RELAY_HEADERS + 1 + EVENT_PLACEMENT_MAX +
                                                    n_extra);
    int rc = hdrs ? style_headers(row, style, hdrs) : -ENOMEM;
    if (!rc && json) {
        const cJSON *m;
        cJSON_ArrayForEach(m, json) {
            rc = header_add(hdrs, m->string ? m->string : "", m->valuestring);
            if (rc)
                break;
        }
    }
    cJSON_Delete(json);

    if (rc) {
        if (hdrs)
            rd_kafka_headers_destroy(hdrs);
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "out of memory building headers");
        return rc;
    }
    *out = hdrs;
    return 0;
}

int32_t event_row_partition(const struct event_row *row, const struct event_style *style)
{
    int32_t part = RD_KAFKA_PARTITION_UA;
    for (size_t i = 0; style->placement && i < style->placement->n; i++) {
        if (style->placement->where[i] != EVENT_PLACE_PARTITION)
            continue;
        const char *v = i < row->n_placed ? row->placed[i] : NULL;
        part = v ? (int32_t)strtol(v, NULL, 10) : RD_KAFKA_PARTITION_UA;
    }
    return part;
}

bool event_row_tombstone(const struct event_row *row, const struct event_style *style)
{
    if (!style->tombstone_on_empty)
        return false;
    for (size_t i = 0; row->payload && i < row->payload_len; i++)
        if ((unsigned char)row->payload[i] > ' ')
            return false;
    return true;
}

/* ---- relay.additional_placement ------------------------------------------- */

/* One "column:placement[:name]" item of @p len bytes at @p item into slot @p i. */
static int placement_item(const char *item, size_t len, struct event_placement *out, size_t i,
                          char *errbuf, size_t errlen)
{
    char buf[3 * EVENT_PLACEMENT_NAME];
    if (len >= sizeof buf)
        return errbuf_fail(errbuf, errlen, "placement item longer than %zu bytes", sizeof buf - 1);
    memcpy(buf, item, len);
    buf[len] = '\0';
    char *col = buf, *where = strchr(col, ':'), *name = where ? strchr(where + 1, ':') : NULL;
    if (!where || (name && strchr(name + 1, ':')))
        return errbuf_fail(errbuf, errlen,
                           "placement \"%s\" is not column:placement or "
                           "column:placement:name", buf);
    *where++ = '\0';
    if (name)
        *name++ = '\0';
    else
        name = col; /* without a name, the column's */
    static const char *const places[] = { [EVENT_PLACE_HEADER] = "header",
                                          [EVENT_PLACE_ENVELOPE] = "envelope",
                                          [EVENT_PLACE_PARTITION] = "partition" };
    const int n_places = (int)(sizeof places / sizeof places[0]);
    int place = 0;
    while (place < n_places && strcmp(where, places[place]) != 0)
        place++;
    if (place == n_places)
        return errbuf_fail(errbuf, errlen,
                           "placement \"%s:%s:%s\": the placement is header, envelope or "
                           "partition", col, where, name);
    bool envelope = place == EVENT_PLACE_ENVELOPE;
    if (!*col || !*name || strlen(col) >= EVENT_PLACEMENT_NAME ||
        strlen(name) >= EVENT_PLACEMENT_NAME)
        return errbuf_fail(errbuf, errlen, "placement \"%s:%s:%s\": empty or too long a name",
                           col, where, name);
    /* The envelope's first member is the payload: a second one would be
     * written twice. */
    if (envelope && !strcmp(name, "payload"))
        return errbuf_fail(errbuf, errlen,
                           "placement \"%s:envelope:payload\": the envelope holds the payload "
                           "under that name", col);
    if (i >= EVENT_PLACEMENT_MAX)
        return errbuf_fail(errbuf, errlen, "more than %d placements", EVENT_PLACEMENT_MAX);
    snprintf(out->column[i], EVENT_PLACEMENT_NAME, "%s", col);
    snprintf(out->name[i], EVENT_PLACEMENT_NAME, "%s", name);
    out->where[i] = (enum event_place)place;
    return 0;
}

int event_placement_parse(const char *spec, struct event_placement *out, char *errbuf,
                          size_t errlen)
{
    memset(out, 0, sizeof *out);
    for (const char *p = spec ? spec : ""; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t len = strcspn(p, ",");
        while (len > 0 && p[len - 1] == ' ')
            len--;
        if (len == 0)
            break;
        int rc = placement_item(p, len, out, out->n, errbuf, errlen);
        if (rc < 0)
            return rc;
        out->n++;
        p += strcspn(p, ",");
    }
    return 0;
}

bool event_placement_has(const struct event_placement *pl, enum event_place where)
{
    for (size_t i = 0; i < pl->n; i++)
        if (pl->where[i] == where)
            return true;
    return false;
}

int event_placement_check(const char *spec, char *errbuf, size_t errlen)
{
    struct event_placement pl;
    return event_placement_parse(spec, &pl, errbuf, errlen);
}
