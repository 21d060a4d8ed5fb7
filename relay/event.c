/* event.c — one outbox row → topic and headers of its Kafka message. */
#include "event.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "errors.h"

#define KAFKA_TOPIC_MAX 249


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
    if (n == strlen("aggregate_type") && !memcmp(p + 2, "aggregate_type", n))
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
                        "(allowed: ${aggregate_type}, ${event_type})",
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

bool event_topic_valid(const char *topic)
{
    if (!topic)
        return false;
    size_t n = 0;
    for (; topic[n]; n++) {
        if (n >= KAFKA_TOPIC_MAX || !topic_char(topic[n]))
            return false;
    }
    return n > 0 && strcmp(topic, ".") != 0 && strcmp(topic, "..") != 0;
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
            if (!cJSON_IsString(m)) {
                int rc = errbuf_fail(errbuf, errlen, "headers member \"%s\" is not a string",
                              m->string ? m->string : "");
                cJSON_Delete(json);
                return rc;
            }
            n_extra++;
        }
    }

    char outbox_id[24];
    snprintf(outbox_id, sizeof outbox_id, "%" PRId64, row->id);

    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(6 + n_extra);
    int rc = 0;
    if (!hdrs)
        rc = -ENOMEM;
    if (!rc)
        rc = header_add(hdrs, "event_id", row->event_id);
    if (!rc)
        rc = header_add(hdrs, "event_type", row->event_type);
    if (!rc)
        rc = header_add(hdrs, "aggregate_type", row->aggregate_type);
    if (!rc)
        rc = header_add(hdrs, "aggregate_id", row->aggregate_id);
    if (!rc)
        rc = header_add(hdrs, "outbox_id", outbox_id);
    if (!rc)
        rc = header_add(hdrs, "created_at", row->created_at);
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
