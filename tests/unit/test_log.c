/* Unit tests of relay/base/log.c: the logfmt line, the JSON line converted from
 * the callers' logfmt pairs, and lines that stay whole and valid whatever
 * the values hold. stderr is captured in a temporary file. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"

static char path[64];
static int saved_stderr = -1;

static void capture(void)
{
    strcpy(path, "/tmp/outbox-relay-log-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    fflush(stderr);
    saved_stderr = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
    log_set_level(LOG_LVL_DEBUG);
}

/* @return what was logged since capture() (caller frees). */
static char *captured(void)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return strdup(buf);
}

static void restore(void)
{
    if (saved_stderr >= 0) {
        dup2(saved_stderr, STDERR_FILENO);
        close(saved_stderr);
        saved_stderr = -1;
    }
    unlink(path);
    log_set_format(LOG_FORMAT_LOGFMT);
    log_set_level(LOG_LVL_INFO);
}

TestSuite(log, .init = capture, .fini = restore);

Test(log, formats_parse)
{
    cr_assert_eq(log_format_parse("logfmt"), LOG_FORMAT_LOGFMT);
    cr_assert_eq(log_format_parse("json"), LOG_FORMAT_JSON);
    cr_assert_eq(log_format_parse("JSON"), -1);
    cr_assert_eq(log_format_parse("text"), -1);
}

Test(log, logfmt_line)
{
    log_info("became leader", "schema=%s table=%s", "public", "outbox");
    char *s = captured();
    cr_assert(strncmp(s, "ts=", 3) == 0, "%s", s);
    cr_assert(strstr(s, " level=info msg=\"became leader\" schema=public table=outbox\n"), "%s", s);
    free(s);
}

static cJSON *only_line(char *s)
{
    size_t n = strlen(s);
    cr_assert(n > 0 && s[n - 1] == '\n', "no newline: %s", s);
    cr_assert(strchr(s, '\n') == s + n - 1, "more than one line: %s", s);
    cJSON *doc = cJSON_Parse(s);
    cr_assert_not_null(doc, "not JSON: %s", s);
    return doc;
}

Test(log, json_line_has_ts_level_msg_and_the_pairs_as_fields)
{
    log_set_format(LOG_FORMAT_JSON);
    log_warn("delivery failed", "outbox_id=%d error=%s permanent=false ratio=0.5 reason=%s", 42,
             "Local_MsgTimedOut", log_quote("a \"quoted\"\tvalue\nwith newline"));
    char *s = captured();
    cJSON *doc = only_line(s);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(doc, "ts")));
    cr_assert_eq(strlen(cJSON_GetObjectItem(doc, "ts")->valuestring), 24);
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "level")->valuestring, "warn");
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "msg")->valuestring, "delivery failed");
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(doc, "outbox_id")));
    cr_assert_eq(cJSON_GetObjectItem(doc, "outbox_id")->valueint, 42);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(doc, "permanent")));
    cr_assert_float_eq(cJSON_GetObjectItem(doc, "ratio")->valuedouble, 0.5, 1e-9);
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "error")->valuestring, "Local_MsgTimedOut");
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "reason")->valuestring,
                     "a \"quoted\"\tvalue\nwith newline");
    cJSON_Delete(doc);
    free(s);
}

Test(log, json_keeps_quoted_numbers_and_odd_bare_values_as_strings)
{
    log_set_format(LOG_FORMAT_JSON);
    log_info("m", "a=\"7\" b=007 c=1e5 d=-0.25 e=1. f=abc g=${x} h=");
    char *s = captured();
    cJSON *doc = only_line(s);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(doc, "a")));
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(doc, "b")));
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(doc, "c")));
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(doc, "d")));
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(doc, "e")));
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "g")->valuestring, "${x}");
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "h")->valuestring, "");
    cJSON_Delete(doc);
    free(s);
}

Test(log, json_does_not_let_a_pair_replace_the_line_fields)
{
    log_set_format(LOG_FORMAT_JSON);
    log_info("the message", "msg=other level=x ts=1");
    char *s = captured();
    cJSON *doc = only_line(s);
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "msg")->valuestring, "the message");
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "level")->valuestring, "info");
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "msg_")->valuestring, "other");
    cJSON_Delete(doc);
    free(s);
}

Test(log, json_stays_valid_with_bad_utf8_control_bytes_and_huge_values)
{
    log_set_format(LOG_FORMAT_JSON);
    char big[5000];
    memset(big, '\x01', sizeof(big) - 1); /* escapes to six bytes each: far over the line */
    big[sizeof(big) - 1] = '\0';
    log_error("bad \xff\xfe bytes \xc3\xa9", "v=\"\xed\xa0\x80 \xc3\" w=%s big=\"%s\" after=1", "\x80",
              big);
    char *s = captured();
    cJSON *doc = only_line(s);
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "msg")->valuestring,
                     "bad \xef\xbf\xbd\xef\xbf\xbd bytes \xc3\xa9");
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(doc, "v")));
    cr_assert_str_eq(cJSON_GetObjectItem(doc, "w")->valuestring, "\xef\xbf\xbd");
    cJSON_Delete(doc);
    free(s);
}

Test(log, levels_filter)
{
    log_set_level(LOG_LVL_WARN);
    log_info("hidden", "");
    log_debug("hidden too", "x=%d", 1);
    log_warn("shown", "");
    char *s = captured();
    cr_assert_null(strstr(s, "hidden"));
    cr_assert(strstr(s, "shown"));
    free(s);
}
