/* Unit tests of relay/base/log_limit.c: the first lines of a kind in full, the
 * rest counted into one summary line per interval, kinds kept apart by
 * message and error, and no count lost when kinds outnumber the slots.
 * stderr is captured in an anonymous temporary file (tmpfile). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log_limit.h"

static FILE *sink;
static int saved_stderr = -1;

static void capture(void)
{
    sink = tmpfile();
    cr_assert_not_null(sink);
    fflush(stderr);
    saved_stderr = dup(STDERR_FILENO);
    dup2(fileno(sink), STDERR_FILENO);
    log_set_level(LOG_LVL_INFO);
}

static void restore(void)
{
    if (saved_stderr >= 0) {
        dup2(saved_stderr, STDERR_FILENO);
        close(saved_stderr);
        saved_stderr = -1;
    }
    if (sink)
        fclose(sink);
    sink = NULL;
}

/* Everything logged since capture(): each line is one write(2) to the shared descriptor. */
static char *captured(void)
{
    static char buf[65536];
    ssize_t n = pread(fileno(sink), buf, sizeof(buf) - 1, 0);
    cr_assert(n >= 0);
    buf[n] = '\0';
    return buf;
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

TestSuite(log_limit, .init = capture, .fini = restore);

static const char DEAD[] = "row dead-lettered";
static const char FAILED[] = "delivery failed";

Test(log_limit, burst_in_full_then_one_summary_per_interval)
{
    struct log_limit l;
    log_limit_init(&l, 10, 3);
    int full = 0;
    for (int i = 0; i < 3000; i++)
        full += log_limit_allow(&l, 100.0 + i * 0.001, LOG_LVL_ERROR, DEAD, "too large", 1000 + i);
    cr_assert_eq(full, 3);
    log_limit_flush(&l, 105.0); /* the interval is not over: nothing yet */
    cr_assert_eq(count(captured(), "more rows failed"), 0);
    log_limit_flush(&l, 110.0);
    char *out = captured();
    cr_assert_eq(count(out, "msg=\"more rows failed like this\""), 1, "%s", out);
    cr_assert(strstr(out, "level=error"), "%s", out);
    cr_assert(strstr(out, "like=\"row dead-lettered\" rows=2997 seconds=3.0 error=\"too large\" "
                          "first_outbox_id=1003 last_outbox_id=3999"),
              "%s", out);
    /* A new interval: full lines again, and a flush with nothing counted is silent. */
    cr_assert(log_limit_allow(&l, 111.0, LOG_LVL_ERROR, DEAD, "too large", 5000));
    log_limit_flush(&l, INFINITY);
    cr_assert_eq(count(captured(), "more rows failed"), 1);
}

Test(log_limit, kinds_apart_by_message_and_error)
{
    struct log_limit l;
    log_limit_init(&l, 10, 1);
    cr_assert(log_limit_allow(&l, 0, LOG_LVL_ERROR, DEAD, "a", 1));
    cr_assert(log_limit_allow(&l, 0, LOG_LVL_ERROR, DEAD, "b", 2));
    cr_assert(log_limit_allow(&l, 0, LOG_LVL_WARN, FAILED, "a", 3));
    cr_assert_not(log_limit_allow(&l, 1, LOG_LVL_ERROR, DEAD, "a", 4));
    cr_assert_not(log_limit_allow(&l, 1, LOG_LVL_ERROR, DEAD, "b", 5));
    cr_assert_not(log_limit_allow(&l, 2, LOG_LVL_ERROR, DEAD, "b", 6));
    /* A kind whose interval ended starts over on its next line, writing its summary. */
    cr_assert(log_limit_allow(&l, 12, LOG_LVL_ERROR, DEAD, "a", 7));
    char *out = captured();
    cr_assert(strstr(out, "rows=1 seconds=1.0 error=\"a\" first_outbox_id=4 last_outbox_id=4"), "%s", out);
    log_limit_flush(&l, INFINITY);
    out = captured();
    cr_assert(strstr(out, "rows=2 seconds=2.0 error=\"b\" first_outbox_id=5 last_outbox_id=6"), "%s", out);
    cr_assert_eq(count(out, "more rows failed"), 2, "the warn kind counted nothing: no summary. %s", out);
}

/* More kinds than slots: the oldest is summed up early, no row goes uncounted. */
Test(log_limit, more_kinds_than_slots_lose_no_count)
{
    struct log_limit l;
    log_limit_init(&l, 10, 0);
    char err[32];
    for (int k = 0; k < LOG_LIMIT_KINDS + 4; k++) {
        snprintf(err, sizeof(err), "error %d", k);
        for (int i = 0; i < 10; i++)
            cr_assert_not(log_limit_allow(&l, k * 0.01, LOG_LVL_WARN, FAILED, err, k * 100 + i));
    }
    log_limit_flush(&l, INFINITY);
    char *out = captured();
    cr_assert_eq(count(out, "msg=\"more rows failed like this\""), LOG_LIMIT_KINDS + 4, "%s", out);
    cr_assert_eq(count(out, " rows=10 "), LOG_LIMIT_KINDS + 4, "%s", out);
}

Test(log_limit, below_the_log_level_nothing_is_written_or_counted)
{
    struct log_limit l;
    log_limit_init(&l, 10, 5);
    log_set_level(LOG_LVL_ERROR);
    for (int i = 0; i < 100; i++)
        cr_assert_not(log_limit_allow(&l, 0, LOG_LVL_WARN, FAILED, "x", i));
    log_limit_flush(&l, INFINITY);
    cr_assert_str_eq(captured(), "");
}
