/* hex.h — one hexadecimal digit's value, for the parsers that read hex
 * (conninfo escapes in redact.c, UUIDs in verify_check.c). */
#ifndef OUTBOX_HEX_H
#define OUTBOX_HEX_H

/** @return 0..15, or -1 when @p c is not a hexadecimal digit. */
static inline int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif
