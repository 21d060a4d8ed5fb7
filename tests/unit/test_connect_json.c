/* Unit tests of relay/core/connect_json.c: what JsonConverter (schemas off)
 * writes for the Event Router's key, value, expanded payload and envelope.
 * The expected bytes follow Jackson, Kafka Connect's JsonConverter and the
 * Event Router's JsonSchemaData; tests/e2e/debezium_compat.py compares them
 * with the real thing. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "core/connect_expand.h"
#include "core/connect_json.h"

static char err[256];

static const char *str(const char *s, size_t len)
{
    static struct strbuf sb;
    strbuf_reset(&sb);
    connect_json_string(&sb, s, len);
    return strbuf_str(&sb);
}

static const char *dbl(double d)
{
    static struct strbuf sb;
    strbuf_reset(&sb);
    connect_json_double(&sb, d);
    return strbuf_str(&sb);
}

/* The expansion of @p json: its text, "(kept)" or "(fails)". */
static const char *expand(const char *json)
{
    static struct strbuf sb;
    strbuf_reset(&sb);
    int rc = connect_expand(&sb, NULL, "payload", json, strlen(json), false, err, sizeof err);
    return rc == CONNECT_EXPAND_DONE ? strbuf_str(&sb)
           : rc >= 0                 ? (sb.len ? "(kept, but wrote)" : "(kept)")
           : rc == -EINVAL           ? "(fails)"
                                     : "(error)";
}

Test(connect_json, strings_escaped_as_jackson_writes_them)
{
    cr_assert_str_eq(str("a\"b\\c", 5), "\"a\\\"b\\\\c\"");
    cr_assert_str_eq(str("\b\t\n\f\r", 5), "\"\\b\\t\\n\\f\\r\"");
    cr_assert_str_eq(str("\x01\x1f\x7f", 3), "\"\\u0001\\u001F\x7f\"");
    cr_assert_str_eq(str("x\0y", 3), "\"x\\u0000y\"");
    cr_assert_str_eq(str("caf\xc3\xa9 / \xe2\x98\x83", 11), "\"caf\xc3\xa9 / \xe2\x98\x83\"");
    cr_assert_str_eq(str("", 0), "\"\"");
    /* beyond the BMP: an escaped surrogate pair */
    cr_assert_str_eq(str("a\xf0\x9f\x98\x80" "b", 6), "\"a\\uD83D\\uDE00b\"");
}

Test(connect_json, doubles_as_java_writes_them)
{
    /* Checked against Double.toString of OpenJDK 17. */
    cr_assert_str_eq(dbl(1.0), "1.0");
    cr_assert_str_eq(dbl(100.0), "100.0");
    cr_assert_str_eq(dbl(0.1), "0.1");
    cr_assert_str_eq(dbl(39.98), "39.98");
    cr_assert_str_eq(dbl(1e-7), "1.0E-7");
    cr_assert_str_eq(dbl(12345678.9), "1.23456789E7");
    cr_assert_str_eq(dbl(1e7), "1.0E7");
    cr_assert_str_eq(dbl(9999999.0), "9999999.0");
    cr_assert_str_eq(dbl(0.001), "0.001");
    cr_assert_str_eq(dbl(0.0001), "1.0E-4");
    cr_assert_str_eq(dbl(-2.5), "-2.5");
    cr_assert_str_eq(dbl(4.9e-324), "4.9E-324");
    cr_assert_str_eq(dbl(1.7976931348623157e308), "1.7976931348623157E308");
    cr_assert_str_eq(dbl(-0.0), "-0.0");
    cr_assert_str_eq(dbl(123456.789), "123456.789");
    cr_assert_str_eq(dbl(2.5e-5), "2.5E-5");
    cr_assert_str_eq(dbl(1e21), "1.0E21");
    cr_assert_str_eq(dbl(INFINITY), "\"Infinity\"");
    /* JDK 19 and later; JDK 17 writes 1.9999999999999998E23. */
    cr_assert_str_eq(dbl(2e23), "2.0E23");
}

Test(connect_json, expand_writes_the_struct_the_event_router_infers)
{
    /* Null members and empty arrays are left out; numbers keep their kind;
     * members in the document's order; whitespace gone. */
    cr_assert_str_eq(expand("{\"seq\": 1, \"name\": \"x\", \"n\": [1, 2, null], "
                            "\"o\": {\"k\": \"v\", \"z\": null}, \"t\": true, \"e\": [], "
                            "\"f\": 2.50, \"big\": 5000000000, \"neg\": -0, \"x\": 1e2}"),
                     "{\"seq\":1,\"name\":\"x\",\"n\":[1,2,null],\"o\":{\"k\":\"v\"},\"t\":true,"
                     "\"f\":2.5,\"big\":5000000000,\"neg\":0,\"x\":100.0}");
    cr_assert_str_eq(expand("{}"), "{}");
    cr_assert_str_eq(expand("{\"o\": {}}"), "{\"o\":{}}");
    cr_assert_str_eq(expand("{\"s\": \"\\u00e9\\n\\/\\ud83d\\ude00\"}"),
                     "{\"s\":\"\xc3\xa9\\n/\\uD83D\\uDE00\"}");
    /* a name given twice: the first place, the last value */
    cr_assert_str_eq(expand("{\"a\": 1, \"b\": 2, \"a\": \"x\"}"), "{\"a\":\"x\",\"b\":2}");
    /* Jackson reads the first value and ignores what follows */
    cr_assert_str_eq(expand("{\"a\": 1} trailing"), "{\"a\":1}");
    cr_assert_str_eq(expand("{\"l\": [[1, 2], [3]]}"), "{\"l\":[[1,2],[3]]}");
}

Test(connect_json, expand_merges_the_objects_of_an_array)
{
    /* A member missing from one object is null in it; one null in an object
     * and a string in another is a string. */
    cr_assert_str_eq(expand("{\"items\": [{\"id\": 1, \"d\": null}, {\"id\": 2, \"d\": \"x\"}]}"),
                     "{\"items\":[{\"id\":1,\"d\":null},{\"id\":2,\"d\":\"x\"}]}");
    cr_assert_str_eq(expand("{\"items\": [{\"id\": 1}, {\"id\": 2, \"extra\": true}]}"),
                     "{\"items\":[{\"id\":1,\"extra\":null},{\"id\":2,\"extra\":true}]}");
    /* objects of one shape may stand beside nulls */
    cr_assert_str_eq(expand("{\"same\": [{\"k\": 1}, null, {\"k\": 2}]}"),
                     "{\"same\":[{\"k\":1},null,{\"k\":2}]}");
}

Test(connect_json, expand_keeps_the_text_where_the_event_router_does)
{
    cr_assert_str_eq(expand("\"just a string\""), "(kept)");
    cr_assert_str_eq(expand("42"), "(kept)");
    cr_assert_str_eq(expand(" {\"a\": 1}"), "(kept)"); /* it must start with { or [ */
    cr_assert_str_eq(expand("{\"a\":"), "(kept)");
    cr_assert_str_eq(expand("{\"a\": 01}"), "(kept)");
    cr_assert_str_eq(expand("{\"a\": \"\x01\"}"), "(kept)");
    cr_assert_str_eq(expand("{\"a\": \"\\ud800\"}"), "(kept)");
    cr_assert_str_eq(expand("{\"l\": [1, 2.5]}"), "(kept)");         /* int32 and float64 */
    cr_assert_str_eq(expand("{\"l\": [1, 5000000000]}"), "(kept)");  /* int32 and int64 */
    cr_assert_str_eq(expand("{\"l\": [1, \"a\"]}"), "(kept)");
    cr_assert_str_eq(expand("{\"l\": [null, null]}"), "(kept)");
    cr_assert_str_eq(expand("{\"l\": [[], [1]]}"), "(kept)");
    cr_assert_str_eq(expand("[]"), "(kept)");
}

Test(connect_json, expand_fails_where_debeziums_task_does)
{
    cr_assert_str_eq(expand("[1, 2]"), "(fails)");
    struct strbuf sb = { 0 };
    cr_assert_eq(connect_expand(&sb, NULL, "payload", "[]", 2, true, err, sizeof err), -EINVAL);
    cr_assert_eq(connect_expand(&sb, NULL, "payload", "[]", 2, false, err, sizeof err),
                 CONNECT_EXPAND_KEPT_NO_SCHEMA);
    strbuf_free(&sb);
    cr_assert_not_null(strstr(err, "top-level array"), "%s", err);
    cr_assert_str_eq(expand("{\"x\": 123456789012345678901234}"), "(fails)");
    cr_assert_not_null(strstr(err, "64 bits"), "%s", err);
    cr_assert_str_eq(expand("{\"l\": [{\"x\": 1}, {\"x\": \"s\"}]}"), "(fails)");
    cr_assert_str_eq(expand("{\"l\": [{\"x\": 5000000000}, {\"x\": 1}]}"), "(fails)");
    /* a merged struct is required: a null beside it fails */
    cr_assert_str_eq(expand("{\"l\": [{\"id\": 1}, null, {\"id\": 2, \"x\": true}]}"), "(fails)");
}

static struct event_placement envelope_placement(void)
{
    struct event_placement pl;
    cr_assert_eq(event_placement_parse("tenant:envelope,type:header:eventType,v:envelope:version",
                                       &pl, err, sizeof err),
                 0, "%s", err);
    return pl;
}

Test(connect_json, value_alone_and_in_the_envelope)
{
    struct strbuf out = { 0 };
    struct event_row row = { .payload = "{\"a\": [1, 2]}", .payload_len = 13 };
    struct event_style style = { .value_converter = EVENT_CONVERTER_JSON };
    cr_assert_eq(connect_value(&row, &style, &out, err, sizeof err), 0);
    cr_assert_str_eq(strbuf_str(&out), "\"{\\\"a\\\": [1, 2]}\"");
    style.expand_payload = true;
    cr_assert_eq(connect_value(&row, &style, &out, err, sizeof err), 0);
    cr_assert_str_eq(strbuf_str(&out), "{\"a\":[1,2]}");
    row.payload = NULL;
    cr_assert_eq(connect_value(&row, &style, &out, err, sizeof err), 0);
    cr_assert_str_eq(strbuf_str(&out), "null");

    struct event_placement pl = envelope_placement();
    style.placement = &pl;
    row = (struct event_row){ .payload = "{\"a\": 1}", .payload_len = 8, .n_placed = 3,
                              .placed = { "t\"1", "Ev", "7" }, .placed_number = { 0, 0, 1 } };
    cr_assert_eq(connect_value(&row, &style, &out, err, sizeof err), 0);
    cr_assert_str_eq(strbuf_str(&out), "{\"payload\":{\"a\":1},\"tenant\":\"t\\\"1\",\"version\":7}");
    row.payload = NULL;
    row.placed[0] = NULL;
    cr_assert_eq(connect_value(&row, &style, &out, err, sizeof err), 0);
    cr_assert_str_eq(strbuf_str(&out), "{\"payload\":null,\"tenant\":null,\"version\":7}");
    row.payload = "[1]";
    row.payload_len = 3;
    cr_assert_eq(connect_value(&row, &style, &out, err, sizeof err), -EINVAL);
    strbuf_free(&out);
}

Test(connect_json, key_as_a_json_string)
{
    struct strbuf out = { 0 };
    struct event_row row = { .aggregate_id = "order-\"1\"" };
    struct event_style style = { .key_converter = EVENT_CONVERTER_JSON };
    cr_assert_eq(connect_key(&row, &style, &out), 0);
    cr_assert_str_eq(strbuf_str(&out), "\"order-\\\"1\\\"\"");
    row.aggregate_id = NULL;
    cr_assert_eq(connect_key(&row, &style, &out), 0);
    cr_assert_str_eq(strbuf_str(&out), "null");
    strbuf_free(&out);
}

Test(connect_json, placement_parses_envelope_and_default_names)
{
    struct event_placement pl = envelope_placement();
    cr_assert_eq(pl.n, 3);
    cr_assert_str_eq(pl.name[0], "tenant");
    cr_assert_eq(pl.where[0], EVENT_PLACE_ENVELOPE);
    cr_assert_str_eq(pl.name[1], "eventType");
    cr_assert_eq(pl.where[1], EVENT_PLACE_HEADER);
    cr_assert_str_eq(pl.name[2], "version");
    cr_assert_eq(event_placement_parse("x:envelope:payload", &pl, err, sizeof err), -EINVAL);
    cr_assert_eq(event_placement_parse("x:body:y", &pl, err, sizeof err), -EINVAL);
}

Test(connect_json, expanded_schema_as_jsonconverter_writes_it)
{
    struct strbuf v = { 0 }, sc = { 0 };
    const char *p = "{\"id\": 1, \"items\": [{\"a\": 1}], \"s\": \"x\", \"f\": 1.5, "
                    "\"n\": {\"k\": true}, \"l\": [[{\"z\": 1}]], \"m\": [{\"a\": 1}, {\"b\": 2}]}";
    cr_assert_eq(connect_expand(&v, &sc, "payload", p, strlen(p), false, err, sizeof err),
                 CONNECT_EXPAND_DONE, "%s", err);
    cr_assert_str_eq(strbuf_str(&sc),
        "{\"type\":\"struct\",\"fields\":["
        "{\"type\":\"int32\",\"optional\":true,\"field\":\"id\"},"
        "{\"type\":\"array\",\"items\":{\"type\":\"struct\",\"fields\":["
        "{\"type\":\"int32\",\"optional\":true,\"field\":\"a\"}],\"optional\":true,"
        "\"name\":\"payload.items\"},\"optional\":true,\"field\":\"items\"},"
        "{\"type\":\"string\",\"optional\":true,\"field\":\"s\"},"
        "{\"type\":\"double\",\"optional\":true,\"field\":\"f\"},"
        "{\"type\":\"struct\",\"fields\":[{\"type\":\"boolean\",\"optional\":true,"
        "\"field\":\"k\"}],\"optional\":true,\"name\":\"payload.n\",\"field\":\"n\"},"
        /* an array of arrays: the inner objects have no name, their members no prefix */
        "{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"struct\","
        "\"fields\":[{\"type\":\"int32\",\"optional\":true,\"field\":\"z\"}],"
        "\"optional\":true},\"optional\":true},\"optional\":true,\"field\":\"l\"},"
        /* objects merged: required */
        "{\"type\":\"array\",\"items\":{\"type\":\"struct\",\"fields\":["
        "{\"type\":\"int32\",\"optional\":true,\"field\":\"a\"},"
        "{\"type\":\"int32\",\"optional\":true,\"field\":\"b\"}],\"optional\":false,"
        "\"name\":\"payload.m\"},\"optional\":true,\"field\":\"m\"}"
        "],\"optional\":true,\"name\":\"payload\"}");
    strbuf_free(&v);
    strbuf_free(&sc);
}

Test(connect_json, key_and_value_with_schemas)
{
    struct strbuf out = { 0 };
    struct connect_columns cols = { .key = { CONNECT_STRING, false },
                                    .payload = { CONNECT_JSON, true } };
    struct event_style style = { .key_converter = EVENT_CONVERTER_JSON_SCHEMA,
                                 .value_converter = EVENT_CONVERTER_JSON_SCHEMA,
                                 .columns = &cols, .payload_column = "payload" };
    struct event_row row = { .aggregate_id = "k1", .payload = "{\"a\": 1}", .payload_len = 8 };
    cr_assert_eq(connect_key(&row, &style, &out), 0);
    cr_assert_str_eq(strbuf_str(&out),
                     "{\"schema\":{\"type\":\"string\",\"optional\":false},\"payload\":\"k1\"}");
    cr_assert_eq(connect_value(&row, &style, &out, err, sizeof err), 0);
    cr_assert_str_eq(strbuf_str(&out),
                     "{\"schema\":{\"type\":\"string\",\"optional\":true,\"name\":"
                     "\"io.debezium.data.Json\",\"version\":1},\"payload\":\"{\\\"a\\\": 1}\"}");
    style.expand_payload = true;
    cr_assert_eq(connect_value(&row, &style, &out, err, sizeof err), 0);
    cr_assert_str_eq(strbuf_str(&out),
                     "{\"schema\":{\"type\":\"struct\",\"fields\":[{\"type\":\"int32\","
                     "\"optional\":true,\"field\":\"a\"}],\"optional\":true,\"name\":\"payload\"},"
                     "\"payload\":{\"a\":1}}");
    row.payload = "[]";
    row.payload_len = 2;
    cr_assert_eq(connect_value(&row, &style, &out, err, sizeof err), 0);
    cr_assert_str_eq(strbuf_str(&out), "{\"schema\":null,\"payload\":\"[]\"}");
    row.payload = NULL;
    cr_assert_eq(connect_value(&row, &style, &out, err, sizeof err), 0);
    cr_assert_str_eq(strbuf_str(&out),
                     "{\"schema\":{\"type\":\"string\",\"optional\":true,\"name\":"
                     "\"io.debezium.data.Json\",\"version\":1},\"payload\":null}");
    strbuf_free(&out);
}

Test(connect_json, envelope_with_schemas)
{
    struct strbuf out = { 0 };
    struct event_placement pl = envelope_placement();
    struct connect_columns cols = { .payload = { CONNECT_JSON, true },
                                    .placed = { { CONNECT_STRING, true }, { 0 },
                                                { CONNECT_INT32, false } } };
    struct event_style style = { .value_converter = EVENT_CONVERTER_JSON_SCHEMA,
                                 .columns = &cols, .placement = &pl,
                                 .envelope_name = "pre.public.outbox" };
    struct event_row row = { .aggregate_type = "order", .payload = "{\"a\": 1}", .payload_len = 8,
                             .n_placed = 3, .placed = { "t1", "Ev", "7" },
                             .placed_number = { 0, 0, 1 } };
    cr_assert_eq(connect_value(&row, &style, &out, err, sizeof err), 0);
    cr_assert_str_eq(strbuf_str(&out),
        "{\"schema\":{\"type\":\"struct\",\"fields\":["
        "{\"type\":\"string\",\"optional\":true,\"name\":\"io.debezium.data.Json\",\"version\":1,"
        "\"field\":\"payload\"},"
        "{\"type\":\"string\",\"optional\":true,\"field\":\"tenant\"},"
        "{\"type\":\"int32\",\"optional\":false,\"field\":\"version\"}],"
        "\"optional\":false,\"name\":\"pre.public.outbox.order.Value\"},"
        "\"payload\":{\"payload\":\"{\\\"a\\\": 1}\",\"tenant\":\"t1\",\"version\":7}}");

    /* The Event Router names an envelope's schema once per payload schema:
     * a later routing value with the same payload schema keeps the first name. */
    struct connect_names names = { 0 };
    style.names = &names;
    cr_assert_eq(connect_value(&row, &style, &out, err, sizeof err), 0);
    row.aggregate_type = "invoice";
    cr_assert_eq(connect_value(&row, &style, &out, err, sizeof err), 0);
    cr_assert_not_null(strstr(strbuf_str(&out), "\"pre.public.outbox.order.Value\""), "%s",
                       strbuf_str(&out));
    style.expand_payload = true; /* another payload schema: named after its own first */
    cr_assert_eq(connect_value(&row, &style, &out, err, sizeof err), 0);
    cr_assert_not_null(strstr(strbuf_str(&out), "\"pre.public.outbox.invoice.Value\""), "%s",
                       strbuf_str(&out));
    connect_names_free(&names);
    strbuf_free(&out);
}
