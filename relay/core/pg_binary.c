/* pg_binary.c — PostgreSQL's binary wire format; see pg_binary.h. */
#include "core/pg_binary.h"

#include <string.h>

#define US_PER_S INT64_C(1000000)
#define S_PER_DAY INT64_C(86400)

int64_t pgb_int8(const char *v)
{
    const unsigned char *b = (const unsigned char *)v;
    uint64_t x = 0;
    for (int i = 0; i < 8; i++)
        x = x << 8 | b[i];
    return (int64_t)x;
}

bool pgb_bool(const char *v)
{
    return v[0] != 0;
}

void pgb_uuid_text(const char *v, char out[PGB_UUID_TEXT])
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *b = (const unsigned char *)v;
    char *o = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *o++ = '-';
        *o++ = hex[b[i] >> 4];
        *o++ = hex[b[i] & 15];
    }
    *o = '\0';
}

int64_t pgb_timestamptz(const char *v)
{
    return pgb_int8(v);
}

bool pgb_time_infinite(int64_t t)
{
    return t == INT64_MIN || t == INT64_MAX;
}

/* Floor division: timestamps before an epoch are negative. */
static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

int64_t pgb_time_epoch_ms(int64_t t)
{
    if (pgb_time_infinite(t))
        return 0;
    return floor_div(t, 1000) + PGB_EPOCH_UNIX_S * 1000;
}

/* The proleptic Gregorian date of @p days since 1970-01-01 (astronomical
 * years: 0 is 1 BC), after Howard Hinnant's civil_from_days. */
static void civil_from_days(int64_t days, int64_t *y, int *m, int *d)
{
    days += 719468;
    int64_t era = floor_div(days, 146097);
    int64_t doe = days - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

/* @p n (< 10^@p width) as @p width digits at @p o. @return the end. */
static char *digits(char *o, unsigned long long n, int width)
{
    for (int i = width - 1; i >= 0; i--, n /= 10)
        o[i] = (char)('0' + n % 10);
    return o + width;
}

/* By hand, not snprintf(): this runs for every row a claim reads, and
 * snprintf() took about 1 µs of it. */
void pgb_time_text(int64_t t, char out[PGB_TIME_TEXT])
{
    if (pgb_time_infinite(t)) {
        strcpy(out, t > 0 ? "infinity" : "-infinity");
        return;
    }
    int64_t s = floor_div(t, US_PER_S), us = t - s * US_PER_S;
    s += PGB_EPOCH_UNIX_S;
    int64_t days = floor_div(s, S_PER_DAY), sod = s - days * S_PER_DAY;
    int64_t y;
    int m, d;
    civil_from_days(days, &y, &m, &d);
    char *o = out;
    if (y >= 1 && y <= 9999) {
        o = digits(o, (unsigned long long)y, 4);
    } else {
        /* PostgreSQL's years run from 4714 BC to 294276. */
        unsigned long long a = (unsigned long long)(y < 0 ? -y : y);
        int width = a >= 100000 ? 6 : a >= 10000 ? 5 : 4;
        *o++ = y < 0 ? '-' : '+';
        o = digits(o, a, width);
    }
    *o++ = '-';
    o = digits(o, (unsigned)m, 2);
    *o++ = '-';
    o = digits(o, (unsigned)d, 2);
    *o++ = 'T';
    o = digits(o, (unsigned long long)(sod / 3600), 2);
    *o++ = ':';
    o = digits(o, (unsigned long long)(sod / 60 % 60), 2);
    *o++ = ':';
    o = digits(o, (unsigned long long)(sod % 60), 2);
    *o++ = '.';
    o = digits(o, (unsigned long long)us, 6);
    *o++ = 'Z';
    *o = '\0';
}
