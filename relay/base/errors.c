/* errors.c — see errors.h. */
#include "base/errors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

int errbuf_fail(char *errbuf, size_t errlen, const char *fmt, ...)
{
    if (errbuf && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errbuf, errlen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}
