/* listen_addr.c — http.listen values: IP literals and a port, no names to resolve. */
#include "base/listen_addr.h"

#include <arpa/inet.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/errors.h"

int listen_addr_parse(const char *listen, struct sockaddr_storage *addr, char *errbuf,
                      size_t errlen)
{
    char host[INET6_ADDRSTRLEN + 32];
    const char *port;
    bool v6 = listen[0] == '[';

    if (v6) {
        const char *close = strchr(listen, ']');
        if (!close || close[1] != ':')
            return errbuf_fail(errbuf, errlen, "\"%s\" is not [IPv6]:port", listen);
        size_t n = (size_t)(close - listen - 1);
        if (n == 0 || n >= sizeof(host))
            return errbuf_fail(errbuf, errlen, "\"%s\": bad IPv6 address", listen);
        memcpy(host, listen + 1, n);
        host[n] = '\0';
        port = close + 2;
    } else {
        const char *colon = strrchr(listen, ':');
        if (!colon)
            return errbuf_fail(errbuf, errlen, "\"%s\" has no port (expected IPv4:port or [IPv6]:port)",
                        listen);
        size_t n = (size_t)(colon - listen);
        if (memchr(listen, ':', n))
            return errbuf_fail(errbuf, errlen, "\"%s\": an IPv6 address needs brackets ([::1]:port)",
                        listen);
        if (n == 0)
            return errbuf_fail(errbuf, errlen,
                        "\"%s\" has no address (0.0.0.0 or [::] listens on every interface)",
                        listen);
        if (n >= sizeof(host))
            return errbuf_fail(errbuf, errlen, "\"%s\": bad IPv4 address", listen);
        memcpy(host, listen, n);
        host[n] = '\0';
        port = colon + 1;
    }

    long p = 0;
    size_t digits = strspn(port, "0123456789");
    if (digits == 0 || digits > 5 || port[digits] != '\0' || (p = strtol(port, NULL, 10)) > 65535)
        return errbuf_fail(errbuf, errlen, "\"%s\": the port must be a number 0..65535", listen);

    struct sockaddr_storage scratch;
    if (!addr)
        addr = &scratch;
    memset(addr, 0, sizeof(*addr));
    int ok;
    if (v6) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)addr;
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)p);
        ok = inet_pton(AF_INET6, host, &a6->sin6_addr);
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)addr;
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)p);
        ok = inet_pton(AF_INET, host, &a4->sin_addr);
    }
    if (ok != 1)
        return errbuf_fail(errbuf, errlen, "\"%s\": \"%s\" is not an IP%s address literal", listen, host,
                    v6 ? "v6" : "v4");
    return 0;
}

int listen_addr_check(const char *value, char *errbuf, size_t errlen)
{
    if (!*value)
        return 0;
    return listen_addr_parse(value, NULL, errbuf, errlen);
}
