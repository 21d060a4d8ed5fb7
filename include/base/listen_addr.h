/* listen_addr.h — parsing http.listen, apart from the server that binds it,
 * so the configuration's checks and the status command need no server. */
#ifndef OUTBOX_LISTEN_ADDR_H
#define OUTBOX_LISTEN_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

/** Parses an http.listen value: "IPv4:port" or "[IPv6]:port" (literals, port
 *  0..65535; 0 = any free port) into @p addr (may be NULL).
 *  @return 0, or -EINVAL with errbuf saying why. */
int listen_addr_parse(const char *listen, struct sockaddr_storage *addr, char *errbuf,
                      size_t errlen);

/** The config table's check for http.listen: "" (disabled) or listen_addr_parse(). */
int listen_addr_check(const char *value, char *errbuf, size_t errlen);

#endif
