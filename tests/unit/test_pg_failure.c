/* test_pg_failure.c — the hint for each way PostgreSQL refuses a
 * connection over TLS, read from libpq's own messages (as libpq 15 and
 * OpenSSL 3 word them against tests/support/pg_tls.sh's server), and none
 * for failures libpq's words already explain. */
#include <string.h>

#include <criterion/criterion.h>

#include "core/pg_failure.h"

#define AT "connection to server at \"localhost\" (127.0.0.1), port 5432 failed: "

static void expect_hint(const char *msg, const char *needle)
{
    const char *hint = pg_failure_hint(msg);
    cr_assert_not_null(hint, "no hint for: %s", msg);
    cr_expect(strstr(hint, needle), "the hint for \"%s\" is \"%s\", without \"%s\"", msg, hint,
              needle);
}

Test(pg_failure, the_servers_certificate)
{
    expect_hint(AT "SSL error: certificate verify failed", "sslrootcert");
    expect_hint("connection to server at \"127.0.0.1\", port 5432 failed: server certificate for "
                "\"localhost\" (and 1 other name) does not match host name \"db.invalid\"",
                "does not name the host");
}

Test(pg_failure, the_clients_certificate)
{
    expect_hint(AT "FATAL:  connection requires a valid client certificate", "set sslcert and sslkey");
    expect_hint(AT "SSL error: sslv3 alert certificate expired", "as expired");
    expect_hint(AT "SSL error: tlsv1 alert unknown ca", "does not trust the CA");
    expect_hint(AT "FATAL:  certificate authentication failed for user \"relay\"", "common name");
}

Test(pg_failure, passwords_and_tls_the_server_demands)
{
    expect_hint(AT "FATAL:  password authentication failed for user \"relay_scram\"\npassword "
                   "retrieved from file \"/etc/outbox-relay/pgpass\"",
                "refused the password");
    expect_hint(AT "fe_sendauth: no password supplied", "passfile");
    expect_hint(AT "FATAL:  no pg_hba.conf entry for host \"127.0.0.1\", user \"relay\", database "
                   "\"app\", no encryption",
                "sslmode=verify-full");
    expect_hint(AT "server does not support SSL, but SSL was required", "ssl = off");
}

Test(pg_failure, no_hint_where_libpq_says_enough)
{
    cr_expect_null(pg_failure_hint(AT "Connection refused\n\tIs the server running on that host "
                                      "and accepting TCP/IP connections?"));
    cr_expect_null(pg_failure_hint(AT "FATAL:  no pg_hba.conf entry for host \"127.0.0.1\", user "
                                      "\"relay\", database \"app\", SSL encryption"));
    cr_expect_null(pg_failure_hint("no answer within connect_timeout (2 s)"));
    cr_expect_null(pg_failure_hint(""));
    cr_expect_null(pg_failure_hint(NULL));
}
