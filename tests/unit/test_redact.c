/* Unit tests of relay/base/redact.c and the -X scrub: a conninfo's secrets are
 * found in every form libpq reads, and never survive in a message libpq wrote
 * about that conninfo, nor in the bytes of a scrubbed override. */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "base/redact.h"

/* Redacts @p message for @p conninfo; asserts that none of the NULL-terminated
 * @p secrets is left and that @p keep (the part that makes the error clear) is.
 * @return the redacted text (caller frees). */
static char *check(const char *conninfo, const char *message, const char *keep,
                   const char *const *secrets)
{
    char *out = redact_message(conninfo, message);
    cr_assert_not_null(out);
    for (size_t i = 0; secrets[i]; i++)
        cr_assert_null(strstr(out, secrets[i]), "conninfo [%s]: \"%s\" leaks \"%s\"", conninfo, out,
                       secrets[i]);
    if (keep)
        cr_assert_not_null(strstr(out, keep), "conninfo [%s]: \"%s\" lost \"%s\"", conninfo, out, keep);
    return out;
}

/* libpq's own parse error for @p conninfo (the text the relay used to log). */
static char *libpq_parse_error(const char *conninfo)
{
    char *err = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &err);
    PQconninfoFree(opts);
    cr_assert_not_null(err, "libpq parsed [%s]", conninfo);
    char *copy = strdup(err);
    PQfreemem(err);
    return copy;
}

struct leak_case {
    const char *conninfo;
    const char *keep;               /* what the redacted error still says */
    const char *secrets[6];
};

/* The forms an adversarial tester used, and their relatives: libpq quotes
 * the secret (or a piece of it) in each of these errors. */
static const struct leak_case parse_cases[] = {
    {"postgresql://relay:pa%zzss-w0rd@db/app", "invalid percent-encoded token",
     {"pa%zzss-w0rd", "zzss-w0rd", NULL}},
    {"postgres://relay:s3cr%et@db/app", "invalid percent-encoded token", {"s3cr%et", "s3cr", NULL}},
    {"postgresql://relay:p%00wned@db/app", "forbidden value %00", {"p%00wned", "00wned", NULL}},
    {"host=db port=5432 password=correct horse", "missing \"=\"", {"correct", "horse", NULL}},
    {"host=db password=first second third=x", "missing \"=\"", {"first", "second", NULL}},
    {"POSTGRESQL://relay:Sup3rSecret@db:5432/app", "missing \"=\"", {"Sup3rSecret", NULL}},
    {"Postgres://relay:Sup3rSecret@db/app", "missing \"=\"", {"Sup3rSecret", NULL}},
    {"postgresql://relay:Sup3rSecret@[::1", "matching \"]\"", {"Sup3rSecret", NULL}},
    {"postgresql://relay@db/app?password=x%zzsecret", "invalid percent-encoded token",
     {"x%zzsecret", "zzsecret", NULL}},
    {"postgresql://relay@db/app?pass%77ord=x%zzsecret&sslmode=require",
     "invalid percent-encoded token", {"zzsecret", NULL}},
};

Test(redact, libpq_parse_errors_lose_the_password)
{
    for (size_t i = 0; i < sizeof parse_cases / sizeof parse_cases[0]; i++) {
        const struct leak_case *c = &parse_cases[i];
        char *err = libpq_parse_error(c->conninfo);
        free(check(c->conninfo, err, c->keep, c->secrets));
        free(err);
    }
}

/* libpq rejects a bad port before any network I/O: with a '/' in a URI
 * password it reads "relay:sec" as host and port, and quotes "sec". */
Test(redact, connect_error_quoting_a_fragment)
{
    const char *conninfo = "postgresql://relay:sec/ret@db:5432/app";
    PGconn *conn = PQconnectStart(conninfo);
    cr_assert_eq(PQstatus(conn), CONNECTION_BAD);
    const char *secrets[] = {"\"sec\"", "ret@", NULL};
    char *out = check(conninfo, PQerrorMessage(conn), "connection option \"port\"", secrets);
    free(out);
    PQfinish(conn);
}

Test(redact, every_form_of_the_secret)
{
    const char *none[] = {NULL};
    /* decoded percent-encoding */
    const char *dec[] = {"p@ssw0rd", "p%40ssw0rd", NULL};
    free(check("postgresql://u:p%40ssw0rd@h/db", "x p@ssw0rd y p%40ssw0rd", "x ", dec));
    /* quoted, with an escaped quote: as written and as libpq reads it */
    const char *quoted[] = {"open sesame's door", "sesame\\'s", "sesame", "door", NULL};
    free(check("host=h password='open sesame\\'s door'", "a open sesame's door b sesame\\'s", "a ",
               quoted));
    /* a dbname that is a connection string of its own */
    const char *nested[] = {"deepsecret", NULL};
    free(check("dbname='host=h password=deepsecret' user=u", "got deepsecret", "got ", nested));
    /* a password keyword of another case or prefix */
    const char *ssl[] = {"k3yk3y", NULL};
    free(check("host=h sslpassword=k3yk3y", "bad k3yk3y", "bad ", ssl));
    /* nothing secret: the message is left as it is */
    char *out = check("host=db dbname=app user=relay", "database \"app\" does not exist", NULL, none);
    cr_assert_str_eq(out, "database \"app\" does not exist");
    free(out);
    out = check(NULL, "plain", NULL, none);
    cr_assert_str_eq(out, "plain");
    free(out);
}

Test(redact, short_pieces_only_as_whole_words)
{
    char *out = redact_message("host=h password=pw", "pwd \"pw\" upward pw");
    cr_assert_str_eq(out, "pwd \"********\" upward ********");
    free(out);
    /* a single character of a fragment is not worth blanking a message for */
    out = redact_message("postgresql://u:a/bcdef@h/db", "a host named a, bcdef");
    cr_assert_str_eq(out, "a host named a, ********");
    free(out);
}

Test(redact, unparsable_rest_is_secret)
{
    /* nothing says what "oops" was: it may be half of something secret */
    const char *oops[] = {"oops", NULL};
    free(check("host=h oops", "missing \"=\" after \"oops\"", "missing \"=\"", oops));
    char *masked = redact_conninfo("host=h port=1 password=abc def user=u");
    cr_assert_str_eq(masked, "host=h port=1 password=********");
    free(masked);
}

Test(redact, conninfo_uri_scheme_in_any_case)
{
    char *masked = redact_conninfo("POSTGRESQL://relay:Sup3rSecret@db/app?sslmode=require");
    cr_assert_str_eq(masked, "POSTGRESQL://relay:********@db/app?sslmode=require");
    free(masked);
}

/* The override is changed in place, keeping its length (ps shows the same
 * number of bytes), with the secret gone. */
static void assert_scrubbed(const char *in, const char *want)
{
    size_t len = strlen(in);
    char buf[256];
    memset(buf, 'Z', sizeof buf);
    memcpy(buf, in, len + 1);
    config_scrub_override(buf);
    cr_assert_str_eq(buf, want);
    for (size_t i = strlen(buf); i <= len; i++)
        cr_assert_eq(buf[i], '\0', "[%s]: byte %zu not zeroed", in, i);
    cr_assert_eq(buf[len + 1], 'Z', "[%s]: wrote past the end", in);
}

Test(redact, scrub_override)
{
    assert_scrubbed("postgres.conninfo=host=db password=hunter2hunter2 dbname=app",
                    "postgres.conninfo=host=db password=******** dbname=app");
    assert_scrubbed("postgres.conninfo=postgresql://u:longpassword@db/app",
                    "postgres.conninfo=postgresql://u:********@db/app");
    /* a short password: the redacted text is longer and is cut, never the reverse */
    assert_scrubbed("postgres.conninfo=host=db password=ab dbname=app",
                    "postgres.conninfo=host=db password=******** dbna");
    assert_scrubbed("kafka.sasl.password=s3cr3t-s3cr3t", "kafka.sasl.password=********");
    assert_scrubbed("kafka.sasl.password=abc", "kafka.sasl.password=***");
    assert_scrubbed("kafka.ssl.key.password=k", "kafka.ssl.key.password=*");
    assert_scrubbed("kafka.sasl.oauthbearer.client.secret=xyzxyzxyz",
                    "kafka.sasl.oauthbearer.client.secret=********");
    assert_scrubbed("kafka.sasl.username=bob", "kafka.sasl.username=bob");
    assert_scrubbed("relay.table=outbox", "relay.table=outbox");
    assert_scrubbed("postgres.conninfo=host=db dbname=app", "postgres.conninfo=host=db dbname=app");
    assert_scrubbed("malformed", "malformed");
}
