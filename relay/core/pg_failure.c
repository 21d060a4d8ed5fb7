/* pg_failure.c — see pg_failure.h. */
#include "core/pg_failure.h"

#include <stddef.h>
#include <string.h>

/* One row per failure: what libpq's message (or the server's, which libpq
 * passes on) says, and what to change. Both sides' words are stable across
 * libpq 15 to 17 and OpenSSL 3. The first row whose every needle is in the
 * message wins: the more particular rows come first. */
static const struct {
    const char *needle[2];
    const char *hint;
} failures[] = {
    {{"certificate verify failed", NULL},
     "the server's certificate does not come from a CA in sslrootcert, or has expired: "
     "give sslrootcert the CA that signed it"},
    {{"does not match host name", NULL},
     "the server's certificate does not name the host the conninfo connects to: connect "
     "by a name (or address) the certificate has, or have it reissued with this one"},
    {{"connection requires a valid client certificate", NULL},
     "the server requires a client certificate for this role: set sslcert and sslkey"},
    {{"alert certificate expired", NULL},
     "the server refused the client certificate (sslcert) as expired: renew it"},
    {{"alert unknown ca", NULL},
     "the server does not trust the CA that signed the client certificate (sslcert): "
     "use one its ssl_ca_file trusts"},
    {{"alert bad certificate", NULL},
     "the server refused the client certificate (sslcert)"},
    {{"certificate authentication failed", NULL},
     "the client certificate's common name is not the role (user) the conninfo names"},
    {{"password authentication failed", NULL},
     "the server refused the password (password, passfile or PGPASSFILE) for this user"},
    {{"no password supplied", NULL},
     "the server asks for a password: set it in a passfile, or in the conninfo read "
     "from postgres.conninfo_file"},
    {{"no pg_hba.conf entry", "no encryption"},
     "the server takes this connection only over TLS: set sslmode=verify-full and "
     "sslrootcert"},
    {{"server does not support SSL", NULL},
     "the server does not take TLS (ssl = off there): enable it, or lower sslmode"},
};

const char *pg_failure_hint(const char *msg)
{
    if (!msg)
        return NULL;
    for (size_t i = 0; i < sizeof failures / sizeof failures[0]; i++) {
        const char *const *n = failures[i].needle;
        if (strstr(msg, n[0]) && (!n[1] || strstr(msg, n[1])))
            return failures[i].hint;
    }
    return NULL;
}
