/* connect_json.c — see connect_json.h: strings and doubles as Jackson writes
 * them, and a message's key and value; the payload's expansion is in
 * connect_expand.c. */
#include "core/connect_expand.h"
#include "core/connect_json.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errors.h"
#include "core/verify_check.h"


/* ---- strings and numbers as Jackson writes them --------------------------- */

static const char hex[] = "0123456789ABCDEF";

static void unicode_escape_out(struct strbuf *out, unsigned u)
{
    char esc[6] = { '\\', 'u', hex[(u >> 12) & 15], hex[(u >> 8) & 15], hex[(u >> 4) & 15],
                    hex[u & 15] };
    strbuf_add(out, esc, 6);
}

/* A character beyond the Basic Multilingual Plane (four bytes of UTF-8 at
 * @p s, @p left bytes available): Jackson writes it as an escaped UTF-16
 * surrogate pair. @return the bytes consumed, 0 if @p s is not one. */
static size_t astral_out(struct strbuf *out, const unsigned char *s, size_t left)
{
    if (left < 4 || (s[0] & 0xf8) != 0xf0 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 ||
        (s[3] & 0xc0) != 0x80)
        return 0;
    unsigned cp = ((s[0] & 7u) << 18) | ((s[1] & 0x3fu) << 12) | ((s[2] & 0x3fu) << 6) |
                  (s[3] & 0x3fu);
    if (cp < 0x10000 || cp > 0x10ffff)
        return 0;
    cp -= 0x10000;
    unicode_escape_out(out, 0xd800 + (cp >> 10));
    unicode_escape_out(out, 0xdc00 + (cp & 0x3ff));
    return 4;
}

void connect_json_string(struct strbuf *out, const char *s, size_t len)
{
    strbuf_lit(out, "\"");
    size_t run = 0; /* bytes copied as they are, not yet appended */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0xf0) {
            run++;
            continue;
        }
        strbuf_add(out, s + i - run, run);
        run = 0;
        size_t astral = c >= 0xf0 ? astral_out(out, (const unsigned char *)s + i, len - i) : 0;
        if (astral) {
            i += astral - 1;
            continue;
        }
        if (c >= 0xf0) {
            strbuf_add(out, s + i, 1);
            continue;
        }
        char esc[7] = { '\\', 0 };
        const char *short_esc = strchr("\"\"\\\\\bb\tt\nn\ff\rr", (char)c);
        if (c && short_esc && ((short_esc - "\"\"\\\\\bb\tt\nn\ff\rr") % 2) == 0) {
            esc[1] = short_esc[1];
            strbuf_add(out, esc, 2);
        } else {
            unicode_escape_out(out, c);
        }
    }
    strbuf_add(out, s + len - run, run);
    strbuf_lit(out, "\"");
}

/* The digits of "%e" text @p buf into @p digits, without trailing zeros;
 * its exponent into *exp10. @return the count of digits. */
static int e_digits(const char *buf, char digits[24], int *exp10)
{
    int n = 0;
    const char *p = buf;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && n < 23)
            digits[n++] = *p;
    *exp10 = atoi(p + 1);
    while (n > 1 && digits[n - 1] == '0')
        n--;
    digits[n] = '\0';
    return n;
}

/* The shortest digits of @p d (positive, finite) that read back as @p d, at
 * least two, as Java 19 and later choose them. @return their count. */
static int shortest_digits(double d, char digits[24], int *exp10)
{
    char buf[40];
    /* Any decimal of up to 15 significant digits reads back from a double
     * as the same 15 digits: when those read back as d, the shortest digits
     * are them without trailing zeros. Else 16 or 17 digits are needed. */
    int prec = d >= DBL_MIN ? 15 : 1; /* subnormals hold fewer digits */
    for (; prec < 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    if (prec == 17)
        snprintf(buf, sizeof buf, "%.16e", d);
    if (prec < 15 && prec > 1)
        return e_digits(buf, digits, exp10);
    if (e_digits(buf, digits, exp10) > 1)
        return (int)strlen(digits);
    /* Java writes at least two digits and takes the closest two-digit
     * decimal when one digit would do (4.9E-324, not 5.0E-324). */
    snprintf(buf, sizeof buf, "%.1e", d);
    if (strtod(buf, NULL) != d)
        snprintf(buf, sizeof buf, "%.0e", d);
    return e_digits(buf, digits, exp10);
}

void connect_json_double(struct strbuf *out, double d)
{
    if (isinf(d)) {
        strbuf_add(out, d < 0 ? "\"-Infinity\"" : "\"Infinity\"", d < 0 ? 11 : 10);
        return;
    }
    if (d == 0) {
        strbuf_add(out, signbit(d) ? "-0.0" : "0.0", signbit(d) ? 4 : 3);
        return;
    }
    char digits[24], text[64];
    int e, n = shortest_digits(fabs(d), digits, &e), o = 0;
    if (d < 0)
        text[o++] = '-';
    if (e >= -3 && e < 7) {
        /* Plain: the integer part, a point, at least one fraction digit. */
        if (e < 0) {
            o += snprintf(text + o, sizeof text - (size_t)o, "0.%.*s%s", -e - 1, "000", digits);
        } else {
            for (int i = 0; i <= e; i++)
                text[o++] = i < n ? digits[i] : '0';
            text[o++] = '.';
            o += snprintf(text + o, sizeof text - (size_t)o, "%s",
                          n > e + 1 ? digits + e + 1 : "0");
        }
    } else {
        o += snprintf(text + o, sizeof text - (size_t)o, "%c.%sE%d", digits[0],
                      n > 1 ? digits + 1 : "0", e);
    }
    strbuf_add(out, text, (size_t)o);
}

/* ---- a message's key and value ------------------------------------------- */

int connect_type_of(const char *typname)
{
    static const struct {
        const char *name;
        enum connect_type type;
    } types[] = {
        {"text", CONNECT_STRING}, {"varchar", CONNECT_STRING}, {"bpchar", CONNECT_STRING},
        {"json", CONNECT_JSON},   {"jsonb", CONNECT_JSON},     {"uuid", CONNECT_UUID},
        {"int2", CONNECT_INT16},  {"int4", CONNECT_INT32},     {"int8", CONNECT_INT64},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(typname, types[i].name))
            return (int)types[i].type;
    return -1;
}

/* The schema Debezium's PostgreSQL connector gives column @p c, as
 * JsonConverter writes it: type, optional, then a logical type's name and version. */
static void column_schema(struct strbuf *out, const struct connect_column *c)
{
    static const char *const types[] = { [CONNECT_STRING] = "string", [CONNECT_JSON] = "string",
                                         [CONNECT_UUID] = "string", [CONNECT_INT16] = "int16",
                                         [CONNECT_INT32] = "int32", [CONNECT_INT64] = "int64" };
    strbuf_printf(out, "{\"type\":\"%s\",\"optional\":%s", types[c->type],
                  c->optional ? "true" : "false");
    if (c->type == CONNECT_JSON)
        strbuf_printf(out, ",\"name\":\"io.debezium.data.Json\",\"version\":1");
    else if (c->type == CONNECT_UUID)
        strbuf_printf(out, ",\"name\":\"io.debezium.data.Uuid\",\"version\":1");
    strbuf_lit(out, "}");
}

static const struct connect_columns no_columns;

int connect_key(const struct event_row *row, const struct event_style *style,
                struct strbuf *out)
{
    strbuf_reset(out);
    bool with_schema = style->key_converter == EVENT_CONVERTER_JSON_SCHEMA;
    if (with_schema) {
        strbuf_lit(out, "{\"schema\":");
        column_schema(out, &(style->columns ? style->columns : &no_columns)->key);
        strbuf_lit(out, ",\"payload\":");
    }
    /* A NULL key under a schema of an optional string is written "null". */
    if (row->aggregate_id)
        connect_json_string(out, row->aggregate_id, strlen(row->aggregate_id));
    else
        strbuf_lit(out, "null");
    if (with_schema)
        strbuf_lit(out, "}");
    return out->oom ? -ENOMEM : 0;
}

/* The payload as JsonConverter writes it (null, its expansion, or a
 * string) into @p value, and its schema into @p schema unless NULL. */
static int payload_parts(const struct event_row *row, const struct event_style *style,
                         bool in_envelope, struct strbuf *value, struct strbuf *schema,
                         char *errbuf, size_t errlen)
{
    int rc = row->payload && style->expand_payload
                 ? connect_expand(value, schema,
                                  style->payload_column ? style->payload_column : "payload",
                                  row->payload, row->payload_len, in_envelope, errbuf, errlen)
                 : CONNECT_EXPAND_KEPT;
    if (rc < 0 || rc == CONNECT_EXPAND_DONE)
        return rc < 0 ? rc : 0;
    if (row->payload)
        connect_json_string(value, row->payload, row->payload_len);
    else
        strbuf_lit(value, "null");
    if (schema && rc == CONNECT_EXPAND_KEPT_NO_SCHEMA)
        strbuf_lit(schema, "null");
    else if (schema)
        column_schema(schema, &(style->columns ? style->columns : &no_columns)->payload);
    return 0;
}

/* The envelope's members after the payload: the placed columns. */
static void envelope_members(const struct event_row *row, const struct event_placement *pl,
                             struct strbuf *out)
{
    for (size_t i = 0; i < pl->n; i++) {
        if (pl->where[i] != EVENT_PLACE_ENVELOPE)
            continue;
        const char *v = i < row->n_placed ? row->placed[i] : NULL;
        strbuf_lit(out, ",");
        connect_json_string(out, pl->name[i], strlen(pl->name[i]));
        strbuf_lit(out, ":");
        /* Integer columns are numbers, PostgreSQL's text of them the same
         * digits; the others (text, uuid, json) strings. */
        if (!v)
            strbuf_lit(out, "null");
        else if (row->placed_number[i])
            strbuf_add(out, v, strlen(v));
        else
            connect_json_string(out, v, strlen(v));
    }
}

/* The schema of a member: @p schema (a JSON object) with "field" last. */
static void field_schema(struct strbuf *out, const struct strbuf *schema, const char *name)
{
    strbuf_add(out, strbuf_str(schema), schema->len ? schema->len - 1 : 0);
    strbuf_lit(out, ",\"field\":");
    connect_json_string(out, name, strlen(name));
    strbuf_lit(out, "}");
}

#define NAMES_MAX 10000

void connect_names_free(struct connect_names *names)
{
    for (size_t i = 0; i < names->cap; i++) {
        free(names->v[i].schema);
        free(names->v[i].routed);
    }
    free(names->v);
    memset(names, 0, sizeof *names);
}

/* The routing value the envelope of @p payload_schema is named after: the
 * first one seen with that payload schema, @p routed when it is new. */
static const char *routed_name(struct connect_names *names, const struct strbuf *payload_schema,
                               const char *routed)
{
    if (!names)
        return routed;
    const char *s = strbuf_str(payload_schema);
    uint64_t h = vcheck_hash(VCHECK_SEED, s, payload_schema->len);
    if (names->n * 2 >= names->cap && names->n < NAMES_MAX) {
        struct connect_names grown = { .cap = names->cap ? names->cap * 2 : 64 };
        if (!(grown.v = calloc(grown.cap, sizeof *grown.v)))
            return routed;
        for (size_t i = 0; i < names->cap; i++) {
            if (!names->v[i].schema)
                continue;
            size_t k = names->v[i].hash & (grown.cap - 1);
            while (grown.v[k].schema)
                k = (k + 1) & (grown.cap - 1);
            grown.v[k] = names->v[i];
            grown.n++;
        }
        free(names->v);
        *names = grown;
    }
    size_t k = h & (names->cap - 1);
    for (; names->v[k].schema; k = (k + 1) & (names->cap - 1))
        if (names->v[k].hash == h && !strcmp(names->v[k].schema, s))
            return names->v[k].routed;
    if (names->n >= NAMES_MAX)
        return routed; /* Debezium evicts here; the relay stops remembering */
    char *sc = strdup(s), *ro = strdup(routed);
    if (!sc || !ro) {
        free(sc);
        free(ro);
        return routed;
    }
    names->v[k] = (struct connect_name){ .hash = h, .schema = sc, .routed = ro };
    names->n++;
    return ro;
}

/* The envelope's schema: a required struct named after the table and the
 * routing value ("<topic.prefix>.<schema>.<table>.<aggregatetype>.Value",
 * the first routing value of its payload schema: routed_name()), the
 * payload's schema first, then each placed column's. */
static void envelope_schema(const struct event_row *row, const struct event_style *style,
                            const struct strbuf *payload_schema, struct strbuf *out)
{
    const struct event_placement *pl = style->placement;
    const struct connect_columns *cols = style->columns ? style->columns : &no_columns;
    strbuf_lit(out, "{\"type\":\"struct\",\"fields\":[");
    field_schema(out, payload_schema, "payload");
    for (size_t i = 0; i < pl->n; i++) {
        if (pl->where[i] != EVENT_PLACE_ENVELOPE)
            continue;
        struct strbuf one = { 0 };
        column_schema(&one, &cols->placed[i]);
        strbuf_lit(out, ",");
        field_schema(out, &one, pl->name[i]);
        strbuf_free(&one);
    }
    strbuf_lit(out, "],\"optional\":false,\"name\":");
    struct strbuf name = { 0 };
    strbuf_printf(&name, "%s.%s.Value", style->envelope_name ? style->envelope_name : "",
                  routed_name(style->names, payload_schema,
                              row->aggregate_type ? row->aggregate_type : ""));
    connect_json_string(out, strbuf_str(&name), name.len);
    strbuf_free(&name);
    strbuf_lit(out, "}");
}

int connect_value(const struct event_row *row, const struct event_style *style,
                  struct strbuf *out, char *errbuf, size_t errlen)
{
    strbuf_reset(out);
    const struct event_placement *pl = style->placement;
    size_t n_env = 0;
    for (size_t i = 0; pl && i < pl->n; i++)
        n_env += pl->where[i] == EVENT_PLACE_ENVELOPE;
    /* The schema goes first but is known only once the payload is: with
     * schemas the value is built apart, else straight into @p out. */
    bool with_schema = style->value_converter == EVENT_CONVERTER_JSON_SCHEMA;
    struct strbuf schema = { 0 }, value = { 0 }, *v = with_schema ? &value : out;
    if (n_env)
        strbuf_lit(v, "{\"payload\":");
    int rc = payload_parts(row, style, n_env > 0, v, with_schema ? &schema : NULL, errbuf,
                           errlen);
    if (!rc && n_env) {
        envelope_members(row, pl, v);
        strbuf_lit(v, "}");
    }
    if (!rc && with_schema) {
        strbuf_lit(out, "{\"schema\":");
        if (n_env)
            envelope_schema(row, style, &schema, out);
        else
            strbuf_add(out, strbuf_str(&schema), schema.len);
        strbuf_lit(out, ",\"payload\":");
        strbuf_add(out, strbuf_str(&value), value.len);
        strbuf_lit(out, "}");
    }
    strbuf_free(&schema);
    strbuf_free(&value);
    if (!rc && out->oom)
        rc = -ENOMEM;
    if (rc == -ENOMEM && errbuf && errlen)
        snprintf(errbuf, errlen, "out of memory building the message value");
    return rc;
}

int connect_message(const struct event_row *row, const struct event_style *style,
                    struct strbuf *key, struct strbuf *value, struct connect_bytes *out,
                    char *errbuf, size_t errlen)
{
    /* No aggregate id (Debezium's table allows it): no key, as Debezium sends it. */
    *out = (struct connect_bytes){
        .key = row->aggregate_id, .key_len = row->aggregate_id ? strlen(row->aggregate_id) : 0,
        .value = row->payload, .value_len = row->payload ? row->payload_len : 0};
    if (style->key_converter != EVENT_CONVERTER_STRING) {
        if (connect_key(row, style, key) < 0) {
            snprintf(errbuf, errlen, "out of memory building the message key");
            return -ENOMEM;
        }
        out->key = key->buf, out->key_len = key->len;
    }
    if (event_row_tombstone(row, style)) {
        out->value = NULL, out->value_len = 0;
    } else if (style->value_converter != EVENT_CONVERTER_STRING) {
        int rc = connect_value(row, style, value, errbuf, errlen);
        if (rc < 0)
            return rc;
        out->value = value->buf, out->value_len = value->len;
    }
    return 0;
}
