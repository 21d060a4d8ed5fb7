/* Unit tests of relay/core/event.c: topic templates, topic names and headers. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/event.h"

static char err[256];

Test(event, template_check_accepts_known_placeholders)
{
    cr_assert_eq(event_topic_template_check("outbox.${aggregate_type}", err, sizeof err), 0);
    cr_assert_eq(event_topic_template_check("${aggregate_type}.${event_type}.v1", err,
                                            sizeof err),
                 0);
    cr_assert_eq(event_topic_template_check("orders", err, sizeof err), 0);
}

Test(event, template_check_rejects_unknown_placeholder)
{
    cr_assert_eq(event_topic_template_check("outbox.${aggregate}", err, sizeof err), -EINVAL);
    cr_assert_not_null(strstr(err, "${aggregate}"), "%s", err);
    cr_assert_eq(event_topic_template_check("${}", err, sizeof err), -EINVAL);
    cr_assert_eq(event_topic_template_check("${AGGREGATE_TYPE}", err, sizeof err), -EINVAL);
}

Test(event, template_check_rejects_unterminated_placeholder)
{
    cr_assert_eq(event_topic_template_check("outbox.${aggregate_type", err, sizeof err),
                 -EINVAL);
    cr_assert_not_null(strstr(err, "unterminated"), "%s", err);
}

Test(event, template_check_rejects_text_no_topic_can_hold)
{
    cr_assert_eq(event_topic_template_check("", err, sizeof err), -EINVAL);
    cr_assert_eq(event_topic_template_check("out box.${event_type}", err, sizeof err), -EINVAL);
    cr_assert_eq(event_topic_template_check("a/${event_type}", err, sizeof err), -EINVAL);
    cr_assert_eq(event_topic_template_check("cost$", err, sizeof err), -EINVAL);
}

Test(event, render_substitutes_row_values)
{
    char out[64];
    cr_assert_eq(event_topic_render("outbox.${aggregate_type}", "order", "created", out,
                                    sizeof out),
                 12);
    cr_assert_str_eq(out, "outbox.order");
    cr_assert_eq(event_topic_render("${aggregate_type}-${event_type}.${event_type}", "a", "b",
                                    out, sizeof out),
                 5);
    cr_assert_str_eq(out, "a-b.b");
    cr_assert_eq(event_topic_render("fixed", "a", "b", out, sizeof out), 5);
    cr_assert_str_eq(out, "fixed");
}

Test(event, render_reports_short_buffer)
{
    char out[13];
    cr_assert_eq(event_topic_render("outbox.${aggregate_type}", "order", "x", out, sizeof out),
                 12); /* exactly fits with its NUL */
    cr_assert_eq(event_topic_render("outbox.${aggregate_type}", "orders", "x", out, sizeof out),
                 -ENOSPC);
    cr_assert_eq(event_topic_render("", "a", "b", out, 0), -ENOSPC);
}

/* A row's own topic wins over the template; a template that does not fit
 * gives no topic at all, which no check accepts. */
Test(event, row_topic_is_its_own_else_the_template)
{
    char out[16];
    struct event_row e = {.aggregate_type = "order", .event_type = "created"};
    event_row_topic("outbox.${aggregate_type}", &e, out, sizeof out);
    cr_assert_str_eq(out, "outbox.order");
    e.topic = "";
    event_row_topic("outbox.${aggregate_type}", &e, out, sizeof out);
    cr_assert_str_eq(out, "outbox.order");
    e.topic = "audit";
    event_row_topic("outbox.${aggregate_type}", &e, out, sizeof out);
    cr_assert_str_eq(out, "audit");
    e.topic = NULL;
    e.aggregate_type = "a-much-longer-type";
    event_row_topic("outbox.${aggregate_type}", &e, out, sizeof out);
    cr_assert_str_eq(out, "");
}

Test(event, render_rejects_unknown_placeholder)
{
    char out[64];
    cr_assert_eq(event_topic_render("outbox.${nope}", "a", "b", out, sizeof out), -EINVAL);
    cr_assert_eq(event_topic_render("outbox.${event_type", "a", "b", out, sizeof out), -EINVAL);
}

Test(event, topic_valid_follows_kafka_rules)
{
    char longest[251];
    memset(longest, 'a', 249);
    longest[249] = '\0';

    cr_assert(event_topic_valid("a"));
    cr_assert(event_topic_valid("orders.v1_x-Y9"));
    cr_assert(event_topic_valid("..."));
    cr_assert(event_topic_valid(longest));

    longest[249] = 'a';
    longest[250] = '\0';
    cr_assert_not(event_topic_valid(longest));
    cr_assert_not(event_topic_valid(NULL));
    cr_assert_not(event_topic_valid(""));
    cr_assert_not(event_topic_valid("."));
    cr_assert_not(event_topic_valid(".."));
    cr_assert_not(event_topic_valid("a/b"));
    cr_assert_not(event_topic_valid("a b"));
    cr_assert_not(event_topic_valid("caf\xc3\xa9"));
}

static struct event_row sample_row(const char *headers_json)
{
    return (struct event_row){
        .id = 9007199254740993LL,
        .event_id = "0b8f7a1e-2c1d-4e8f-9a6b-3c2d1e0f9a8b",
        .aggregate_type = "order",
        .aggregate_id = "42",
        .event_type = "order.created",
        .payload = "{}",
        .payload_len = 2,
        .headers_json = headers_json,
        .created_ms = 1700000000123,
        .created_at = "2023-11-14T22:13:20.123000Z",
    };
}

static void assert_header(const rd_kafka_headers_t *h, size_t idx, const char *name,
                          const char *value)
{
    const char *n;
    const void *v;
    size_t len;
    cr_assert_eq(rd_kafka_header_get_all(h, idx, &n, &v, &len), RD_KAFKA_RESP_ERR_NO_ERROR,
                 "no header #%zu", idx);
    cr_assert_str_eq(n, name, "header #%zu", idx);
    cr_assert_eq(len, strlen(value), "header %s", name);
    cr_assert_eq(memcmp(v, value, len), 0, "header %s", name);
}

static void assert_fixed_headers(const rd_kafka_headers_t *h)
{
    assert_header(h, 0, "event_id", "0b8f7a1e-2c1d-4e8f-9a6b-3c2d1e0f9a8b");
    assert_header(h, 1, "event_type", "order.created");
    assert_header(h, 2, "aggregate_type", "order");
    assert_header(h, 3, "aggregate_id", "42");
    assert_header(h, 4, "outbox_id", "9007199254740993");
    assert_header(h, 5, "created_at", "2023-11-14T22:13:20.123000Z");
}

Test(event, headers_fixed_then_row_headers_in_document_order)
{
    struct event_row row = sample_row("{\"trace_id\": \"abc\", \"tenant\": \"t1\", \"a\": \"\"}");
    rd_kafka_headers_t *h = NULL;
    cr_assert_eq(event_headers_build(&row, &h, err, sizeof err), 0, "%s", err);
    cr_assert_not_null(h);
    cr_assert_eq(rd_kafka_header_cnt(h), 9);
    assert_fixed_headers(h);
    assert_header(h, 6, "trace_id", "abc");
    assert_header(h, 7, "tenant", "t1");
    assert_header(h, 8, "a", "");
    rd_kafka_headers_destroy(h);
}

Test(event, headers_without_row_headers)
{
    struct event_row row = sample_row(NULL);
    rd_kafka_headers_t *h = NULL;
    cr_assert_eq(event_headers_build(&row, &h, err, sizeof err), 0);
    cr_assert_eq(rd_kafka_header_cnt(h), 6);
    assert_fixed_headers(h);
    rd_kafka_headers_destroy(h);

    row = sample_row("{}");
    cr_assert_eq(event_headers_build(&row, &h, err, sizeof err), 0);
    cr_assert_eq(rd_kafka_header_cnt(h), 6);
    rd_kafka_headers_destroy(h);
}

Test(event, headers_negative_outbox_id_is_decimal)
{
    struct event_row row = sample_row(NULL);
    row.id = -5;
    rd_kafka_headers_t *h = NULL;
    cr_assert_eq(event_headers_build(&row, &h, err, sizeof err), 0);
    assert_header(h, 4, "outbox_id", "-5");
    rd_kafka_headers_destroy(h);
}

/* An event with no outbox row (a logical message) has id 0: no outbox_id
 * header, the others as for a row, in the same order. */
Test(event, headers_without_an_outbox_row_leave_out_outbox_id)
{
    struct event_row row = sample_row("{\"trace_id\": \"abc\"}");
    row.id = 0;
    rd_kafka_headers_t *h = NULL;
    cr_assert_eq(event_headers_build(&row, &h, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rd_kafka_header_cnt(h), 6);
    assert_header(h, 0, "event_id", "0b8f7a1e-2c1d-4e8f-9a6b-3c2d1e0f9a8b");
    assert_header(h, 1, "event_type", "order.created");
    assert_header(h, 2, "aggregate_type", "order");
    assert_header(h, 3, "aggregate_id", "42");
    assert_header(h, 4, "created_at", "2023-11-14T22:13:20.123000Z");
    assert_header(h, 5, "trace_id", "abc");
    const void *v;
    size_t len;
    cr_assert_eq(rd_kafka_header_get_last(h, "outbox_id", &v, &len), RD_KAFKA_RESP_ERR__NOENT);
    rd_kafka_headers_destroy(h);

    /* Still reserved: a message's headers may not forge it. */
    row = sample_row("{\"outbox_id\": \"7\"}");
    row.id = 0;
    cr_assert_eq(event_headers_build(&row, &h, err, sizeof err), -EINVAL);
}

Test(event, headers_member_must_be_a_string)
{
    struct event_row row = sample_row("{\"ok\": \"x\", \"n\": 5}");
    rd_kafka_headers_t *h = (rd_kafka_headers_t *)&row; /* must be reset */
    cr_assert_eq(event_headers_build(&row, &h, err, sizeof err), -EINVAL);
    cr_assert_null(h);
    cr_assert_str_eq(err, "headers member \"n\" is not a string");

    row = sample_row("{\"nested\": {\"a\": \"b\"}}");
    cr_assert_eq(event_headers_build(&row, &h, err, sizeof err), -EINVAL);
    cr_assert_str_eq(err, "headers member \"nested\" is not a string");

    row = sample_row("{\"nul\": null}");
    cr_assert_eq(event_headers_build(&row, &h, err, sizeof err), -EINVAL);
    cr_assert_str_eq(err, "headers member \"nul\" is not a string");
}

Test(event, headers_must_be_an_object)
{
    const char *bad[] = {"[\"a\"]", "\"text\"", "42", "null"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct event_row row = sample_row(bad[i]);
        rd_kafka_headers_t *h = NULL;
        cr_assert_eq(event_headers_build(&row, &h, err, sizeof err), -EINVAL, "%s", bad[i]);
        cr_assert_null(h);
        cr_assert_str_eq(err, "headers is not a JSON object", "%s", bad[i]);
    }
}

Test(event, headers_invalid_json)
{
    struct event_row row = sample_row("{\"a\": ");
    rd_kafka_headers_t *h = NULL;
    cr_assert_eq(event_headers_build(&row, &h, err, sizeof err), -EINVAL);
    cr_assert_null(h);
    cr_assert_not_null(strstr(err, "headers"), "%s", err);
}

Test(event, topic_internal_names_refused)
{
    cr_assert_eq(event_topic_check("__consumer_offsets", err, sizeof err), -EINVAL);
    cr_assert_not_null(strstr(err, "__consumer_offsets"), "%s", err);
    cr_assert_not_null(strstr(err, "reserved for Kafka's internal topics"), "%s", err);
    cr_assert_not(event_topic_valid("__transaction_state"));
    cr_assert_not(event_topic_valid("__"));
    /* One underscore, or two later on, is an ordinary name. */
    cr_assert(event_topic_valid("_private"));
    cr_assert(event_topic_valid("a__b"));
    cr_assert_eq(event_topic_check("_x", err, sizeof err), 0);
}

Test(event, topic_check_says_why_in_printable_ascii)
{
    cr_assert_eq(event_topic_check("bad type", err, sizeof err), -EINVAL);
    cr_assert_str_eq(err, "invalid topic name \"bad type\": only A-Z a-z 0-9 . _ - are allowed in "
                          "a Kafka topic");
    /* Non-ASCII is escaped: a message cut inside a UTF-8 character could not
     * be stored as last_error. */
    cr_assert_eq(event_topic_check("caf\xc3\xa9", err, sizeof err), -EINVAL);
    cr_assert_not_null(strstr(err, "\"caf\\xc3\\xa9\""), "%s", err);
    for (const char *p = err; *p; p++)
        cr_assert((unsigned char)*p < 0x80 || !strncmp(p, "…", strlen("…")), "%s", err);

    char longest[300];
    memset(longest, 'x', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    cr_assert_eq(event_topic_check(longest, err, sizeof err), -EINVAL);
    cr_assert_not_null(strstr(err, "longer than 249 characters"), "%s", err);
    cr_assert_lt(strlen(err), 200, "the error quotes the whole topic: %s", err);

    cr_assert_eq(event_topic_check("", err, sizeof err), -EINVAL);
    cr_assert_eq(event_topic_check("..", err, sizeof err), -EINVAL);
    cr_assert_eq(event_topic_check(NULL, err, sizeof err), -EINVAL);
}

Test(event, topic_template_for_internal_topics_refused)
{
    cr_assert_eq(event_topic_template_check("__${aggregate_type}", err, sizeof err), -EINVAL);
    cr_assert_not_null(strstr(err, "__"), "%s", err);
    cr_assert_eq(event_topic_template_check("_${aggregate_type}", err, sizeof err), 0);
    /* The rendered name is what counts: "_" + "_x" is refused at the row. */
    char topic[64];
    cr_assert_gt(event_topic_render("_${aggregate_type}", "_x", "e", topic, sizeof topic), 0);
    cr_assert_not(event_topic_valid(topic));
}

Test(event, headers_reserved_names_refused)
{
    for (size_t i = 0; event_header_name(i); i++) {
        const char *name = event_header_name(i);
        char json[128];
        snprintf(json, sizeof json, "{\"trace\": \"t\", \"%s\": \"forged\"}", name);
        struct event_row row = sample_row(json);
        rd_kafka_headers_t *h = (rd_kafka_headers_t *)&row; /* must be reset */
        cr_assert_eq(event_headers_build(&row, &h, err, sizeof err), -EINVAL, "%s", json);
        cr_assert_null(h);
        cr_assert_not_null(strstr(err, name), "%s", err);
        cr_assert_not_null(strstr(err, "reserved"), "%s", err);
        cr_assert(event_header_reserved(name, strlen(name)));
    }
    /* The list is the one the relay writes: six names, in the documented order. */
    static const char *const documented[] = {"event_id", "event_type", "aggregate_type",
                                             "aggregate_id", "outbox_id", "created_at"};
    for (size_t i = 0; i < sizeof documented / sizeof documented[0]; i++)
        cr_assert_str_eq(event_header_name(i), documented[i]);
    cr_assert_null(event_header_name(sizeof documented / sizeof documented[0]));

    /* Names are bytes, as Kafka compares them: other spellings are the row's own. */
    cr_assert_not(event_header_reserved("Event_ID", 8));
    cr_assert_not(event_header_reserved("event_id_x", 10));
    cr_assert_not(event_header_reserved("event_i", 7));
    struct event_row row = sample_row("{\"Event_ID\": \"mine\", \"outbox_idx\": \"y\"}");
    rd_kafka_headers_t *h = NULL;
    cr_assert_eq(event_headers_build(&row, &h, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rd_kafka_header_cnt(h), 8);
    assert_fixed_headers(h);
    assert_header(h, 6, "Event_ID", "mine");
    rd_kafka_headers_destroy(h);
}

Test(event, headers_error_quotes_a_bounded_printable_name)
{
    /* 300 × "é": the message must keep its reason and stay valid text when
     * it is cut to fit, as it becomes last_error. */
    char json[1024] = "{\"";
    for (int i = 0; i < 300; i++)
        strcat(json, "\xc3\xa9");
    strcat(json, "\": 5}");
    struct event_row row = sample_row(json);
    rd_kafka_headers_t *h = NULL;
    char small[512];
    cr_assert_eq(event_headers_build(&row, &h, small, sizeof small), -EINVAL);
    cr_assert_not_null(strstr(small, "\\xc3\\xa9"), "%s", small);
    cr_assert_not_null(strstr(small, "\\xa9...\" is not a string"), "%s", small);
    for (const char *p = small; *p; p++)
        cr_assert_lt((unsigned char)*p, 0x80, "%s", small);
}

/* The header replay adds is reserved like the relay's own: a row that forged
 * it would pass a first delivery off as a replay. */
Test(event, replay_header_is_reserved)
{
    cr_assert(event_header_reserved(EVENT_REPLAY_HEADER, strlen(EVENT_REPLAY_HEADER)));
    cr_assert_not(event_header_reserved("Replay", 6));
    struct event_row row = {.id = 1, .event_id = "e", .aggregate_type = "t", .aggregate_id = "a",
                            .event_type = "x", .created_at = "c", .headers_json = "{\"replay\": \"x\"}"};
    rd_kafka_headers_t *h = NULL;
    char why[256];
    cr_assert_eq(event_headers_build(&row, &h, why, sizeof why), -EINVAL);
    cr_assert_null(h);
}

Test(event, routed_by_value_is_the_aggregate_type)
{
    char out[64];
    cr_assert_eq(event_topic_template_check("outbox.event.${routedByValue}", NULL, 0), 0);
    cr_assert_eq(event_topic_render("outbox.event.${routedByValue}", "order", "E", out, sizeof out),
                 (int)strlen("outbox.event.order"));
    cr_assert_str_eq(out, "outbox.event.order");
}

Test(event, additional_placement_items)
{
    struct event_placement pl;
    char why[256];
    cr_assert_eq(event_placement_parse("type:header:eventType, tenant:header:tenant", &pl, why,
                                       sizeof why), 0, "%s", why);
    cr_assert_eq(pl.n, 2);
    cr_assert_str_eq(pl.column[1], "tenant");
    cr_assert_str_eq(pl.name[0], "eventType");
    cr_assert_eq(event_placement_parse("type:envelope:t", &pl, why, sizeof why), 0, "%s", why);
    cr_assert_eq(pl.where[0], EVENT_PLACE_ENVELOPE);
    /* without a name, the column's, as the Event Router names it */
    cr_assert_eq(event_placement_parse("type:header", &pl, why, sizeof why), 0, "%s", why);
    cr_assert_str_eq(pl.name[0], "type");
    cr_assert_eq(pl.where[0], EVENT_PLACE_HEADER);
    cr_assert_eq(event_placement_parse("part:partition", &pl, why, sizeof why), 0, "%s", why);
    cr_assert_eq(pl.where[0], EVENT_PLACE_PARTITION);
    cr_assert_eq(event_placement_parse("type:body:t", &pl, why, sizeof why), -EINVAL);
    cr_assert_not_null(strstr(why, "header, envelope or partition"), "%s", why);
}

Test(event, debezium_style_headers)
{
    struct event_placement pl;
    cr_assert_eq(event_placement_parse("type:header:eventType,tenant:header:tenant", &pl, NULL, 0), 0);
    struct event_row row = {.event_id = "e1", .aggregate_id = "k", .n_placed = 2,
                            .placed = {"T", NULL}};
    struct event_style st = {.relay_headers = false, .id_header = "id", .placement = &pl};
    rd_kafka_headers_t *h = NULL;
    cr_assert_eq(event_headers_build_styled(&row, &st, &h, NULL, 0), 0);
    cr_assert_eq(rd_kafka_header_cnt(h), 3);
    const char *name;
    const void *v;
    size_t len;
    cr_assert_eq(rd_kafka_header_get_all(h, 0, &name, &v, &len), 0);
    cr_assert_str_eq(name, "id");
    cr_assert_eq(rd_kafka_header_get_all(h, 2, &name, &v, &len), 0);
    cr_assert_str_eq(name, "tenant");
    cr_assert_null(v);
    rd_kafka_headers_destroy(h);
}

Test(event, partition_and_tombstone_of_a_styled_row)
{
    struct event_placement pl;
    char why[256];
    cr_assert_eq(event_placement_parse("t:header,p:partition", &pl, why, sizeof why), 0, "%s", why);
    struct event_style style = { .placement = &pl };
    struct event_row row = { .n_placed = 2, .placed = { "x", "3" } };
    cr_assert_eq(event_row_partition(&row, &style), 3);
    row.placed[1] = NULL; /* NULL: the partitioner's choice, by key */
    cr_assert_eq(event_row_partition(&row, &style), RD_KAFKA_PARTITION_UA);
    style.placement = NULL;
    cr_assert_eq(event_row_partition(&row, &style), RD_KAFKA_PARTITION_UA);

    row.payload = " \n\t";
    row.payload_len = 3;
    cr_assert(!event_row_tombstone(&row, &style));
    style.tombstone_on_empty = true;
    cr_assert(event_row_tombstone(&row, &style));
    row.payload = NULL;
    cr_assert(event_row_tombstone(&row, &style));
    row.payload = " {}";
    cr_assert(!event_row_tombstone(&row, &style));
}
