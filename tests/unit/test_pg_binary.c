/* Unit tests of relay/core/pg_binary.c: the binary values a claim reads. The
 * expected text is what the claim printed with to_char() before it read
 * binary, for every year PostgreSQL's to_char() prints unambiguously. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "core/pg_binary.h"

/* @p x as PostgreSQL sends an int8 or a timestamptz: 8 bytes, big-endian. */
static void be64(int64_t x, char out[8])
{
    for (int i = 7; i >= 0; i--, x = (int64_t)((uint64_t)x >> 8))
        out[i] = (char)(x & 0xff);
}

Test(pg_binary, int8_is_big_endian_and_signed)
{
    char v[8];
    be64(258, v);
    cr_assert_eq(pgb_int8(v), 258);
    be64(-2, v);
    cr_assert_eq(pgb_int8(v), -2);
    be64(INT64_MAX, v);
    cr_assert_eq(pgb_int8(v), INT64_MAX);
    be64(INT64_MIN, v);
    cr_assert_eq(pgb_int8(v), INT64_MIN);
}

Test(pg_binary, bool_is_one_byte)
{
    cr_assert(pgb_bool("\x01"));
    cr_assert_not(pgb_bool("\x00"));
}

Test(pg_binary, uuid_prints_as_postgresql_does)
{
    const char v[16] = { 0x0b, 0x8f, 0x7a, 0x1e, 0x2c, 0x1d, 0x4e, 0x8f,
                         (char)0x9a, 0x6b, 0x3c, 0x2d, 0x1e, 0x0f, (char)0x9a, (char)0x8b };
    char out[PGB_UUID_TEXT];
    pgb_uuid_text(v, out);
    cr_assert_str_eq(out, "0b8f7a1e-2c1d-4e8f-9a6b-3c2d1e0f9a8b");
}

Test(pg_binary, timestamp_text_and_milliseconds)
{
    char v[8], out[PGB_TIME_TEXT];
    be64(INT64_C(849613258123456), v); /* 2026-12-03 11:40:58.123456 UTC */
    int64_t t = pgb_timestamptz(v);
    pgb_time_text(t, out);
    cr_assert_str_eq(out, "2026-12-03T11:40:58.123456Z");
    cr_assert_eq(pgb_time_epoch_ms(t), INT64_C(1796298058123));

    pgb_time_text(0, out);
    cr_assert_str_eq(out, "2000-01-01T00:00:00.000000Z");
    cr_assert_eq(pgb_time_epoch_ms(0), INT64_C(946684800000));
}

/* floor, not truncation toward zero: a message must never carry a time
 * after its row's created_at. */
Test(pg_binary, times_before_an_epoch_round_down)
{
    char out[PGB_TIME_TEXT];
    int64_t t = -INT64_C(946684800000001); /* 1969-12-31 23:59:59.999999 UTC */
    pgb_time_text(t, out);
    cr_assert_str_eq(out, "1969-12-31T23:59:59.999999Z");
    cr_assert_eq(pgb_time_epoch_ms(t), -1);
    pgb_time_text(-1, out);
    cr_assert_str_eq(out, "1999-12-31T23:59:59.999999Z");
    cr_assert_eq(pgb_time_epoch_ms(-1), INT64_C(946684799999));
}

Test(pg_binary, leap_days_and_the_year_ends)
{
    char out[PGB_TIME_TEXT];
    int64_t day = INT64_C(86400000000);
    pgb_time_text(59 * day, out); /* 2000 is a leap year */
    cr_assert_str_eq(out, "2000-02-29T00:00:00.000000Z");
    pgb_time_text(366 * day - 1, out);
    cr_assert_str_eq(out, "2000-12-31T23:59:59.999999Z");
    pgb_time_text((365 * 100 + 25) * day, out); /* 2100 is not */
    cr_assert_str_eq(out, "2100-01-01T00:00:00.000000Z");
}

/* Outside 1-9999 to_char() printed 44 BC as "0044" (the same as AD 44):
 * ISO 8601's expanded years keep them apart. */
Test(pg_binary, years_outside_rfc3339_use_expanded_form)
{
    char out[PGB_TIME_TEXT];
    pgb_time_text(-INT64_C(64464465600000000), out); /* 0044-03-15 12:00 UTC BC */
    cr_assert_str_eq(out, "-0043-03-15T12:00:00.000000Z");
    pgb_time_text(INT64_C(326456697600000000), out); /* 12345-01-01 */
    cr_assert_str_eq(out, "+12345-01-01T00:00:00.000000Z");
}

/* A row stamped infinity made every claim fail before ("cannot convert
 * infinity to bigint"): now it is published, stamped when it is sent. */
Test(pg_binary, infinite_times)
{
    char out[PGB_TIME_TEXT];
    pgb_time_text(INT64_MAX, out);
    cr_assert_str_eq(out, "infinity");
    pgb_time_text(INT64_MIN, out);
    cr_assert_str_eq(out, "-infinity");
    cr_assert(pgb_time_infinite(INT64_MAX) && pgb_time_infinite(INT64_MIN));
    cr_assert_eq(pgb_time_epoch_ms(INT64_MAX), 0);
    cr_assert_eq(pgb_time_epoch_ms(INT64_MIN), 0);
}
