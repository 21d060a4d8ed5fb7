/* test_wal_event.c — outbox events read by log-based capture: an Insert's
 * columns, byte by byte as pgoutput sends them, and a logical message's JSON
 * envelope, turned into the event_row a claim would give. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "core/wal_event.h"

/* 2026-12-04T05:41:13.123456Z, since 2000-01-01, as a Commit carries it. */
#define COMMIT_US INT64_C(849678073123456)

static char err[256];

struct buf {
    uint8_t b[4096];
    size_t n;
};

static void u(struct buf *w, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--)
        w->b[w->n++] = (uint8_t)(v >> (8 * i));
}

static void bytes(struct buf *w, const char *p, size_t len)
{
    memcpy(w->b + w->n, p, len);
    w->n += len;
}

static void s(struct buf *w, const char *str)
{
    bytes(w, str, strlen(str) + 1);
}

/* The outbox table's columns as pgoutput describes and sends them. */
static const char *const table_cols[] = { "id", "event_id", "aggregate_type", "aggregate_id",
                                          "event_type", "topic", "payload", "headers",
                                          "created_at", "sent_at", "attempts", "last_error",
                                          "dead_at" };
#define N_TABLE_COLS 13

static const char *const full_row[N_TABLE_COLS] = {
    "9007199254740993", "0b8f7a1e-2c1d-4e8f-9a6b-3c2d1e0f9a8b", "order", "42", "OrderPlaced",
    "orders.v1", "{\"total\": 12.5, \"items\": [1, 2]}", "{\"trace_id\": \"abc\"}",
    "2026-12-04 05:41:13.123456+00", NULL, "0", NULL, NULL,
};

/* Decodes a Relation of @p cols then an Insert of @p vals (NULL = SQL NULL)
 * and reads its event. The frame is scribbled over afterwards: the event
 * must not point into it. */
static int read_insert_cols(const char *const *cols, const char *const *vals, int n,
                            const struct wal_columns *names, struct wal_event *ev);

static int read_insert(const char *const *cols, const char *const *vals, int n,
                       struct wal_event *ev)
{
    return read_insert_cols(cols, vals, n, NULL, ev);
}

/* As read_insert(), the columns named by @p names (NULL: the relay's table). */
static int read_insert_cols(const char *const *cols, const char *const *vals, int n,
                            const struct wal_columns *names, struct wal_event *ev)
{
    struct pgo_relations rels = { 0 };
    struct pgo_msg m;
    struct buf w = { .n = 0 };
    u(&w, 'R', 1);
    u(&w, 16400, 4);
    s(&w, "public");
    s(&w, "outbox");
    u(&w, 'd', 1);
    u(&w, (uint64_t)n, 2);
    for (int i = 0; i < n; i++) {
        u(&w, i == 0, 1);
        s(&w, cols[i]);
        u(&w, 25, 4);
        u(&w, (uint32_t)-1, 4);
    }
    cr_assert_eq(pgo_decode(&rels, w.b, w.n, &m), 0);

    w.n = 0;
    u(&w, 'I', 1);
    u(&w, 16400, 4);
    u(&w, 'N', 1);
    u(&w, (uint64_t)n, 2);
    for (int i = 0; i < n; i++) {
        if (!vals[i]) {
            u(&w, 'n', 1);
            continue;
        }
        u(&w, 't', 1);
        u(&w, strlen(vals[i]), 4);
        bytes(&w, vals[i], strlen(vals[i]));
    }
    cr_assert_eq(pgo_decode(&rels, w.b, w.n, &m), 0);
    err[0] = '\0';
    /* with columns named, as the stream reads a change */
    int rc = names ? wal_event_from_change(&m, 0, COMMIT_US, names, ev, err, sizeof err)
                   : wal_event_from_insert(&m, COMMIT_US, ev, err, sizeof err);
    memset(w.b, 'X', sizeof w.b);
    pgo_relations_free(&rels);
    return rc;
}

/* The full row with column @p col's value replaced by @p value. */
static int read_row_with(const char *col, const char *value, struct wal_event *ev)
{
    const char *vals[N_TABLE_COLS];
    memcpy(vals, full_row, sizeof vals);
    for (int i = 0; i < N_TABLE_COLS; i++)
        if (!strcmp(table_cols[i], col))
            vals[i] = value;
    return read_insert(table_cols, vals, N_TABLE_COLS, ev);
}

Test(wal_event, an_insert_of_every_column)
{
    struct wal_event ev;
    cr_assert_eq(read_insert(table_cols, full_row, N_TABLE_COLS, &ev), 0, "%s", err);
    const struct event_row *r = &ev.row;
    cr_assert_eq(r->id, INT64_C(9007199254740993));
    cr_assert_str_eq(r->event_id, "0b8f7a1e-2c1d-4e8f-9a6b-3c2d1e0f9a8b");
    cr_assert_eq(r->event_id, r->event_id_text, "a uuid is kept where a claim keeps it");
    cr_assert_str_eq(r->aggregate_type, "order");
    cr_assert_str_eq(r->aggregate_id, "42");
    cr_assert_str_eq(r->event_type, "OrderPlaced");
    cr_assert_str_eq(r->topic, "orders.v1");
    cr_assert_str_eq(r->payload, "{\"total\": 12.5, \"items\": [1, 2]}");
    cr_assert_eq(r->payload_len, strlen(r->payload));
    cr_assert_str_eq(r->headers_json, "{\"trace_id\": \"abc\"}");
    cr_assert_eq(r->created_ms, INT64_C(1796362873123));
    cr_assert_str_eq(r->created_at, "2026-12-04T05:41:13.123456Z");
    cr_assert_eq(r->created_at, r->created_at_text);
    wal_event_clear(&ev);
    cr_assert_null(ev.owned);
    wal_event_clear(&ev); /* twice is harmless */
}

Test(wal_event, an_insert_with_the_optional_columns_null)
{
    const char *vals[N_TABLE_COLS];
    memcpy(vals, full_row, sizeof vals);
    vals[5] = vals[6] = vals[7] = NULL; /* topic, payload, headers */
    struct wal_event ev;
    cr_assert_eq(read_insert(table_cols, vals, N_TABLE_COLS, &ev), 0, "%s", err);
    cr_assert_null(ev.row.topic);
    cr_assert_null(ev.row.payload, "a NULL payload is a tombstone");
    cr_assert_eq(ev.row.payload_len, 0);
    cr_assert_null(ev.row.headers_json);
    cr_assert_str_eq(ev.row.aggregate_id, "42");
    wal_event_clear(&ev);
}

/* Empty strings are values, not NULL: "" payload is not a tombstone. */
Test(wal_event, an_insert_with_empty_strings)
{
    struct wal_event ev;
    cr_assert_eq(read_row_with("topic", "", &ev), 0, "%s", err);
    cr_assert_str_eq(ev.row.topic, "");
    wal_event_clear(&ev);
}

Test(wal_event, a_required_column_missing_or_null_is_named)
{
    static const char *const required[] = { "id", "event_id", "aggregate_type", "aggregate_id",
                                            "event_type" };
    for (size_t k = 0; k < sizeof required / sizeof required[0]; k++) {
        struct wal_event ev;
        cr_assert_eq(read_row_with(required[k], NULL, &ev), -EINVAL, "%s NULL", required[k]);
        cr_assert_not_null(strstr(err, required[k]), "\"%s\" does not name %s", err, required[k]);
        cr_assert_not_null(strstr(err, "NULL"), "%s", err);
        cr_assert_null(ev.owned);

        /* The same table without that column. */
        const char *cols[N_TABLE_COLS], *vals[N_TABLE_COLS];
        int n = 0;
        for (int i = 0; i < N_TABLE_COLS; i++)
            if (strcmp(table_cols[i], required[k]) != 0) {
                cols[n] = table_cols[i];
                vals[n++] = full_row[i];
            }
        cr_assert_eq(read_insert(cols, vals, n, &ev), -EINVAL, "without %s", required[k]);
        cr_assert_not_null(strstr(err, required[k]), "\"%s\" does not name %s", err, required[k]);
        cr_assert_not_null(strstr(err, "no column"), "%s", err);
    }
}

Test(wal_event, an_unreadable_id_is_named)
{
    static const char *const bad[] = { "", "12a", "-", "9223372036854775808", "1 " };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        struct wal_event ev;
        cr_assert_eq(read_row_with("id", bad[k], &ev), -EINVAL, "id \"%s\" taken", bad[k]);
        cr_assert_not_null(strstr(err, "column id"), "%s", err);
    }
    struct wal_event ev;
    cr_assert_eq(read_row_with("id", "-9223372036854775808", &ev), 0, "%s", err);
    cr_assert_eq(ev.row.id, INT64_MIN);
    wal_event_clear(&ev);
}

/* created_at as the walsender prints it with DateStyle ISO, and the header
 * text a claim would give for the same instant. */
Test(wal_event, created_at_in_every_offset_form)
{
    static const struct {
        const char *in, *text;
        int64_t ms;
    } cases[] = {
        { "2026-12-04 05:41:13.123456+00", "2026-12-04T05:41:13.123456Z", INT64_C(1796362873123) },
        { "2026-12-04 11:11:13.5+05:30", "2026-12-04T05:41:13.500000Z", INT64_C(1796362873500) },
        { "2026-12-03 21:41:13-08", "2026-12-04T05:41:13.000000Z", INT64_C(1796362873000) },
        { "2026-12-04 05:41:13+00", "2026-12-04T05:41:13.000000Z", INT64_C(1796362873000) },
        { "2026-12-04 02:11:13.000001-03:30", "2026-12-04T05:41:13.000001Z",
          INT64_C(1796362873000) },
        /* A historical zone's offset in seconds (Amsterdam's local mean time). */
        { "1900-01-01 00:00:00+00:19:32", "1899-12-31T23:40:28.000000Z",
          INT64_C(-2208989972000) },
        { "1969-12-31 23:59:59.9995+00", "1969-12-31T23:59:59.999500Z", INT64_C(-1) },
        { "2024-02-29 00:00:00+00", "2024-02-29T00:00:00.000000Z", INT64_C(1709164800000) },
        { "0044-03-15 12:00:00+00 BC", "-0043-03-15T12:00:00.000000Z",
          INT64_C(-63517780800000) },
        { "infinity", "infinity", 0 },
        { "-infinity", "-infinity", 0 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct wal_event ev;
        cr_assert_eq(read_row_with("created_at", cases[k].in, &ev), 0, "%s: %s", cases[k].in, err);
        cr_assert_str_eq(ev.row.created_at, cases[k].text, "%s", cases[k].in);
        cr_assert_eq(ev.row.created_ms, cases[k].ms, "%s: %lld", cases[k].in,
                     (long long)ev.row.created_ms);
        wal_event_clear(&ev);
    }
}

Test(wal_event, created_at_in_another_form_is_refused)
{
    static const char *const bad[] = {
        "2026-12-04T05:41:13Z",           /* RFC 3339, not what timestamptz_out prints */
        "2026-12-04 05:41:13",            /* no offset: a timestamp without time zone */
        "Fri Dec 04 05:41:13.123456 2026 UTC", /* DateStyle Postgres */
        "12/04/2026 05:41:13.123456 UTC", /* DateStyle SQL */
        "2026-02-30 00:00:00+00", "2026-13-01 00:00:00+00", "2026-12-04 24:00:00+00",
        "2026-12-04 05:41:13.1234567+00", "2026-12-04 05:41:13.+00", "2026-12-04 05:41:13+5",
        "2026-12-04 05:41:13+00 AD", "2026-12-04 05:41:13+16", "0000-01-01 00:00:00+00", "",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        struct wal_event ev;
        cr_assert_eq(read_row_with("created_at", bad[k], &ev), -EINVAL, "\"%s\" taken", bad[k]);
        cr_assert_not_null(strstr(err, "created_at"), "%s", err);
    }
}

Test(wal_event, created_at_missing_or_null_is_the_commit_time)
{
    struct wal_event ev;
    cr_assert_eq(read_row_with("created_at", NULL, &ev), 0, "%s", err);
    cr_assert_str_eq(ev.row.created_at, "2026-12-04T05:41:13.123456Z");
    cr_assert_eq(ev.row.created_ms, INT64_C(1796362873123));
    wal_event_clear(&ev);

    cr_assert_eq(read_insert(table_cols, full_row, 8, &ev), 0, "%s", err);
    cr_assert_str_eq(ev.row.created_at, "2026-12-04T05:41:13.123456Z");
    wal_event_clear(&ev);
}

/* A text event_id of any length is read as its text, as a claim reads it. */
Test(wal_event, a_long_text_event_id)
{
    const char *id = "order-42-placed-at-2026-12-04T05:41:13.123456Z-by-checkout";
    struct wal_event ev;
    cr_assert_eq(read_row_with("event_id", id, &ev), 0, "%s", err);
    cr_assert_str_eq(ev.row.event_id, id);
    wal_event_clear(&ev);
}

Test(wal_event, not_an_insert)
{
    struct pgo_msg m = { .kind = PGO_BEGIN };
    struct wal_event ev;
    cr_assert_eq(wal_event_from_insert(&m, 0, &ev, err, sizeof err), -EINVAL);
}

/* ---- logical messages ---- */

static int read_message(const char *content, uint64_t lsn, struct wal_event *ev)
{
    struct buf w = { .n = 0 };
    u(&w, 'M', 1);
    u(&w, 1, 1);
    u(&w, lsn, 8);
    s(&w, "outbox");
    u(&w, strlen(content), 4);
    bytes(&w, content, strlen(content));
    u(&w, 'Z', 1); /* what follows in the frame is not content */
    struct pgo_msg m;
    cr_assert_eq(pgo_decode(NULL, w.b, w.n - 1, &m), 0);
    err[0] = '\0';
    /* as the stream reads a change: a message needs no columns */
    int rc = wal_event_from_change(&m, lsn, COMMIT_US, NULL, ev, err, sizeof err);
    memset(w.b, 'X', sizeof w.b);
    return rc;
}

Test(wal_event, an_envelope_with_every_member)
{
    struct wal_event ev;
    cr_assert_eq(read_message("{\"aggregate_type\": \"order\", \"aggregate_id\": \"42\",\n"
                              " \"event_type\": \"OrderPlaced\",\n"
                              " \"payload\": { \"total\" : 12.5, \"items\": [ 1, 2 ],"
                              " \"note\": \"caf\xc3\xa9 \\\"x\\\"\" },\n"
                              " \"headers\": { \"trace_id\": \"abc\", \"tenant\": \"t1\" },\n"
                              " \"topic\": \"orders.v1\",\n"
                              " \"event_id\": \"0B8F7A1E-2C1D-4E8F-9A6B-3C2D1E0F9A8B\"}\n",
                              0x16B3748, &ev),
                 0, "%s", err);
    const struct event_row *r = &ev.row;
    cr_assert_eq(r->id, 0, "a message has no outbox row");
    cr_assert_str_eq(r->event_id, "0b8f7a1e-2c1d-4e8f-9a6b-3c2d1e0f9a8b", "lower-cased");
    cr_assert_str_eq(r->aggregate_type, "order");
    cr_assert_str_eq(r->aggregate_id, "42");
    cr_assert_str_eq(r->event_type, "OrderPlaced");
    cr_assert_str_eq(r->topic, "orders.v1");
    cr_assert_str_eq(r->payload, "{\"total\":12.5,\"items\":[1,2],\"note\":\"caf\xc3\xa9 \\\"x\\\"\"}",
                     "the payload is printed compact");
    cr_assert_eq(r->payload_len, strlen(r->payload));
    cr_assert_str_eq(r->headers_json, "{\"trace_id\":\"abc\",\"tenant\":\"t1\"}");
    cr_assert_str_eq(r->created_at, "2026-12-04T05:41:13.123456Z");
    cr_assert_eq(r->created_ms, INT64_C(1796362873123));

    /* The headers a claimed row would get, outbox_id left out. */
    rd_kafka_headers_t *h = NULL;
    cr_assert_eq(event_headers_build(r, &h, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rd_kafka_header_cnt(h), 7);
    const void *v;
    size_t len;
    cr_assert_eq(rd_kafka_header_get_last(h, "outbox_id", &v, &len), RD_KAFKA_RESP_ERR__NOENT);
    cr_assert_eq(rd_kafka_header_get_last(h, "tenant", &v, &len), RD_KAFKA_RESP_ERR_NO_ERROR);
    cr_assert_eq(len, 2);
    rd_kafka_headers_destroy(h);
    wal_event_clear(&ev);
}

Test(wal_event, an_envelope_with_only_the_required_members)
{
    struct wal_event ev;
    cr_assert_eq(read_message("{\"aggregate_type\":\"order\",\"aggregate_id\":\"42\","
                              "\"event_type\":\"OrderCancelled\"}",
                              1, &ev),
                 0, "%s", err);
    cr_assert_null(ev.row.payload, "no payload is a tombstone");
    cr_assert_eq(ev.row.payload_len, 0);
    cr_assert_null(ev.row.headers_json);
    cr_assert_null(ev.row.topic);
    wal_event_clear(&ev);

    /* null is absent for every optional member. */
    cr_assert_eq(read_message("{\"aggregate_type\":\"order\",\"aggregate_id\":\"42\","
                              "\"event_type\":\"OrderCancelled\",\"payload\":null,"
                              "\"headers\":null,\"topic\":null,\"event_id\":null}",
                              1, &ev),
                 0, "%s", err);
    cr_assert_null(ev.row.payload);
    cr_assert_null(ev.row.headers_json);
    cr_assert_null(ev.row.topic);
    cr_assert_str_eq(ev.row.event_id, "00000000-0000-8000-8000-000000000001");
    wal_event_clear(&ev);
}

/* Any JSON is a payload: a scalar is published as its JSON text. */
Test(wal_event, a_payload_that_is_not_an_object)
{
    static const struct { const char *in, *out; } cases[] = {
        { "\"text\"", "\"text\"" }, { "12", "12" }, { "[ ]", "[]" }, { "false", "false" },
        { "{ }", "{}" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char content[256];
        snprintf(content, sizeof content,
                 "{\"aggregate_type\":\"a\",\"aggregate_id\":\"1\",\"event_type\":\"e\","
                 "\"payload\":%s}",
                 cases[k].in);
        struct wal_event ev;
        cr_assert_eq(read_message(content, 1, &ev), 0, "%s: %s", cases[k].in, err);
        cr_assert_str_eq(ev.row.payload, cases[k].out);
        wal_event_clear(&ev);
    }
}

Test(wal_event, an_envelope_missing_a_required_member_or_of_the_wrong_type)
{
    static const char *const names[] = { "aggregate_type", "aggregate_id", "event_type" };
    static const char *const bad_values[] = { NULL, "null", "\"\"", "42", "{}", "[\"a\"]", "true" };
    for (size_t k = 0; k < 3; k++) {
        for (size_t b = 0; b < sizeof bad_values / sizeof bad_values[0]; b++) {
            char content[256];
            size_t n = (size_t)snprintf(content, sizeof content, "{");
            for (size_t j = 0; j < 3; j++) {
                if (j == k && !bad_values[b])
                    continue;
                n += (size_t)snprintf(content + n, sizeof content - n, "%s\"%s\":%s",
                                      n > 1 ? "," : "", names[j],
                                      j == k ? bad_values[b] : "\"x\"");
            }
            snprintf(content + n, sizeof content - n, "}");
            struct wal_event ev;
            cr_assert_eq(read_message(content, 1, &ev), -EINVAL, "%s taken", content);
            cr_assert_not_null(strstr(err, names[k]), "\"%s\" does not name %s", err, names[k]);
            cr_assert_not_null(strstr(err, bad_values[b] ? "not a non-empty string" : "missing"),
                               "%s: %s", content, err);
            cr_assert_null(ev.owned);
        }
    }
}

#define REQUIRED "\"aggregate_type\":\"a\",\"aggregate_id\":\"1\",\"event_type\":\"e\""

Test(wal_event, optional_members_of_the_wrong_type)
{
    static const struct { const char *content, *says; } cases[] = {
        { "{" REQUIRED ",\"topic\":5}", "\"topic\" is not a string" },
        { "{" REQUIRED ",\"topic\":[\"t\"]}", "\"topic\" is not a string" },
        { "{" REQUIRED ",\"event_id\":7}", "\"event_id\" is not a string" },
        { "{" REQUIRED ",\"headers\":\"trace=abc\"}", "\"headers\" is not an object" },
        { "{" REQUIRED ",\"headers\":[\"a\"]}", "\"headers\" is not an object" },
        { "{" REQUIRED ",\"headers\":{\"a\":\"x\",\"n\":5}}", "headers member \"n\" is not a string" },
        { "{" REQUIRED ",\"headers\":{\"o\":{\"a\":\"b\"}}}", "headers member \"o\" is not a string" },
        { "{" REQUIRED ",\"headers\":{\"z\":null}}", "headers member \"z\" is not a string" },
        { "{" REQUIRED ",\"paylod\":{}}", "member \"paylod\" is unknown" },
        { "{" REQUIRED ",\"payload\":{},\"payload\":null}", "member \"payload\" appears twice" },
        { "{" REQUIRED ",\"aggregate_id\":\"2\"}", "member \"aggregate_id\" appears twice" },
        { "{" REQUIRED ",\"\\u0001x\":1}", "member \"\\x01x\" is unknown" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct wal_event ev;
        cr_assert_eq(read_message(cases[k].content, 1, &ev), -EINVAL, "%s taken", cases[k].content);
        cr_assert_not_null(strstr(err, cases[k].says), "%s: \"%s\"", cases[k].content, err);
    }
}

Test(wal_event, content_that_is_not_an_envelope)
{
    static const struct { const char *content, *says; } cases[] = {
        { "", "not JSON" },
        { "{\"aggregate_type\":", "not JSON" },
        { "order placed", "not JSON" },
        { "[" "{" REQUIRED "}" "]", "not a JSON object" },
        { "\"x\"", "not a JSON object" },
        { "{" REQUIRED "} {}", "more after its JSON value" },
        { "{" REQUIRED "}x", "more after its JSON value" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct wal_event ev;
        cr_assert_eq(read_message(cases[k].content, 1, &ev), -EINVAL, "%s taken", cases[k].content);
        cr_assert_not_null(strstr(err, cases[k].says), "%s: \"%s\"", cases[k].content, err);
    }
    /* Whitespace around the object is fine. */
    struct wal_event ev;
    cr_assert_eq(read_message(" \n{" REQUIRED "}\r\n\t ", 1, &ev), 0, "%s", err);
    wal_event_clear(&ev);
}

Test(wal_event, an_invalid_event_id)
{
    static const char *const bad[] = {
        "", "0b8f7a1e2c1d4e8f9a6b3c2d1e0f9a8b", "{0b8f7a1e-2c1d-4e8f-9a6b-3c2d1e0f9a8b}",
        "0b8f7a1e-2c1d-4e8f-9a6b-3c2d1e0f9a8", "0b8f7a1e-2c1d-4e8f-9a6b-3c2d1e0f9a8bb",
        "0b8f7a1e-2c1d-4e8f-9a6b_3c2d1e0f9a8b", "0b8f7a1g-2c1d-4e8f-9a6b-3c2d1e0f9a8b",
        "0b8f7a1e-2c1d-4e8f-9a6b-3c2d1e0f9a8\xc3",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char content[256];
        snprintf(content, sizeof content, "{" REQUIRED ",\"event_id\":\"%s\"}", bad[k]);
        struct wal_event ev;
        cr_assert_eq(read_message(content, 1, &ev), -EINVAL, "%s taken", content);
        cr_assert_not_null(strstr(err, "\"event_id\" is not a uuid"), "%s", err);
    }
}

/* An envelope without event_id: derived from the LSN, so the same message
 * read again (after a restart, on a standby) has the same id. */
Test(wal_event, a_derived_event_id_is_stable_and_differs_by_lsn)
{
    static const struct { uint64_t lsn; const char *id; } cases[] = {
        { 0x16B3748, "00000000-0000-8000-8000-0000016b3748" },
        { 0x16B3749, "00000000-0000-8000-8000-0000016b3749" },
        { UINT64_C(0x1000016B3748), "00001000-0000-8000-8000-0000016b3748" },
        { UINT64_MAX, "ffffffff-0000-8000-8000-0000ffffffff" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct wal_event a, b;
        cr_assert_eq(read_message("{" REQUIRED "}", cases[k].lsn, &a), 0, "%s", err);
        cr_assert_eq(read_message("{" REQUIRED ",\"payload\":{\"other\":1}}", cases[k].lsn, &b), 0,
                     "%s", err);
        cr_assert_str_eq(a.row.event_id, cases[k].id);
        cr_assert_str_eq(b.row.event_id, cases[k].id, "the id depends on the LSN only");
        /* Version 8, RFC 4122 variant: a valid uuid, never a gen_random_uuid(). */
        cr_assert_eq(a.row.event_id[14], '8');
        cr_assert_eq(a.row.event_id[19], '8');
        wal_event_clear(&a);
        wal_event_clear(&b);
    }
}

Test(wal_event, not_a_message)
{
    struct pgo_msg m = { .kind = PGO_INSERT };
    struct wal_event ev;
    cr_assert_eq(wal_event_from_message(&m, 1, 0, &ev, err, sizeof err), -EINVAL);
    m.kind = PGO_BEGIN; /* a change that is neither an Insert nor a message holds no event */
    cr_assert_eq(wal_event_from_change(&m, 1, 0, NULL, &ev, err, sizeof err), -EINVAL);
}

/* Debezium's outbox table: a NULL aggregateid is an event without a key, as
 * the Event Router sends it; a table without the column is refused. */
Test(wal_event, debezium_columns_and_a_null_aggregateid)
{
    static const char *const cols[] = { "id", "aggregatetype", "aggregateid", "type", "payload" };
    const char *vals[] = { "0b8f7a1e-2c1d-4e8f-9a6b-3c2d1e0f9a8b", "order", "42", "Placed", "{}" };
    const struct wal_columns names = {
        .event_id = "id", .aggregate_type = "aggregatetype", .aggregate_id = "aggregateid",
        .event_type = "type", .payload = "payload",
    };
    struct wal_event ev;
    cr_assert_eq(read_insert_cols(cols, vals, 5, &names, &ev), 0, "%s", err);
    cr_assert_str_eq(ev.row.aggregate_id, "42");
    cr_assert_str_eq(ev.row.event_id, "0b8f7a1e-2c1d-4e8f-9a6b-3c2d1e0f9a8b");
    wal_event_clear(&ev);

    vals[2] = NULL;
    cr_assert_eq(read_insert_cols(cols, vals, 5, &names, &ev), 0, "%s", err);
    cr_assert_null(ev.row.aggregate_id, "no key");
    cr_assert_str_eq(ev.row.aggregate_type, "order");
    wal_event_clear(&ev);

    /* Still required as a value in the relay's own table (NOT NULL there). */
    cr_assert_eq(read_row_with("aggregate_id", NULL, &ev), -EINVAL);
    cr_assert_not_null(strstr(err, "aggregate_id"), "%s", err);

    /* A column the names point to must be there. */
    const struct wal_columns other = {
        .event_id = "id", .aggregate_type = "aggregatetype", .aggregate_id = "aggregate_key",
        .event_type = "type", .payload = "payload",
    };
    vals[2] = "42";
    cr_assert_eq(read_insert_cols(cols, vals, 5, &other, &ev), -EINVAL);
    cr_assert_not_null(strstr(err, "no column aggregate_key"), "%s", err);
}

/* Which messages of the stream are events: the outbox table's unsettled
 * Inserts and the logical messages with the relay's prefix. */
Test(wal_event, only_unsettled_inserts_into_the_outbox_and_prefixed_messages_are_events)
{
    char *names[] = { "id", "sent_at", "dead_at" };
    struct pgo_relation rel = { .nspname = "app", .relname = "outbox", .ncols = 3, .colnames = names };
    struct pgo_msg m = { .kind = PGO_INSERT, .rel = &rel, .ncols = 3 };
    m.cols[0].text = "1";
    cr_assert(wal_event_wanted(&m, "app", "outbox", "outbox"));
    cr_assert_not(wal_event_wanted(&m, "app", "other", "outbox"), "another table");
    cr_assert_not(wal_event_wanted(&m, "public", "outbox", "outbox"), "another schema");
    m.cols[2].text = "2026-01-01 00:00:00+00";
    cr_assert_not(wal_event_wanted(&m, "app", "outbox", "outbox"), "a dead row the relay wrote");
    m.cols[2].text = NULL;
    m.cols[1].text = "2026-01-01 00:00:00+00";
    cr_assert_not(wal_event_wanted(&m, "app", "outbox", "outbox"), "inserted as sent");
    struct pgo_msg msg = { .kind = PGO_MESSAGE, .prefix = "outbox" };
    cr_assert(wal_event_wanted(&msg, "app", "outbox", "outbox"));
    cr_assert_not(wal_event_wanted(&msg, "app", "outbox", "outbox-relay-heartbeat"));
    struct pgo_msg begin = { .kind = PGO_BEGIN };
    cr_assert_not(wal_event_wanted(&begin, "app", "outbox", "outbox"));
}

Test(wal_event, a_message_that_is_no_event_says_what_it_held)
{
    struct pgo_msg m = { .kind = PGO_MESSAGE, .prefix = "outbox", .content = "{\"a\":\n1}",
                         .content_len = 8 };
    char e[64] = "not an envelope";
    wal_event_message_context(&m, e, sizeof e);
    cr_assert_str_eq(e, "not an envelope; content: {\"a\":?1}");
    char small[20] = "not an envelope";
    wal_event_message_context(&m, small, sizeof small);
    cr_assert_eq(strlen(small), sizeof small - 1, "cut at the buffer's end: %s", small);
}
