/* config_doc.c — the documentation of every configuration key, generated from
 * the parameter table (config_table.c) and the producer's own settings
 * (producer.c): the shipped conffile, outbox-relay.conf(5) and docs/configuration.md's
 * table. The committed files are compared with this output by a test, so a
 * key added to the table without its documentation, or a changed default,
 * fails the build's tests instead of drifting.
 *
 * What the table's one-line descriptions cannot say lives in doc_keys[],
 * next to the section introductions. Text uses one markup: `code`. */
#include "cmd/config_doc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/kafka_rules.h"
#include "io/producer.h"

/* A key without an entry is documented by its table row's description. */
static const struct {
    const char *name; /* section.key */
    const char *text; /* paragraphs separated by "\n\n"; "- " lines form a list */
} doc_keys[] = {
    {"postgres.conninfo",
     "libpq connection string (`host=db.internal dbname=app user=outbox_relay`) or URI "
     "(`postgresql://outbox_relay@db.internal/app?sslmode=verify-full`), given to libpq as is. "
     "Empty: libpq's defaults, its `PG*` environment variables (`PGHOST`, `PGDATABASE`, "
     "`PGUSER`, ...) and its password file.\n\n"
     "Under systemd, HOME is /nonexistent: name a password file with `passfile=` here, or set "
     "`PGPASSFILE` in a drop-in. A local database over its Unix socket with peer "
     "authentication needs no password: `host=/run/postgresql dbname=app` (with a PostgreSQL "
     "role named outbox-relay)."},
    {"relay.ack_timeout_ms",
     "Readiness (`/readyz`, check `acks`) fails when messages have been in flight this long "
     "(milliseconds) without any acknowledgement from Kafka: a hung broker keeps its connections "
     "open and looks up until a request to it times out (`kafka.socket.timeout.ms`, 10 s by "
     "default), and again after each reconnect. `0` turns the check off."},
    {"relay.allow_row_security",
     "Row-level security: when a policy on the outbox table hides rows from the relay's role (no "
     "BYPASSRLS, not the owner, or FORCE ROW LEVEL SECURITY), the relay refuses to run, since "
     "hidden rows would never be published. `true` relays the visible rows anyway; the backlog "
     "is then reported as unknown."},
    {"relay.batch_size", "Rows claimed and produced per round."},
    {"relay.fencing",
     "How a leader that lost its leadership (paused, stalled, cut off from PostgreSQL but not from "
     "Kafka) is kept from publishing what it still had queued after another relay took over:\n\n"
     "- `transactional`: batches are published in Kafka transactions of `transactional_id`; a new leader "
     "initialises transactions before producing, which fences the old one: its late writes are "
     "aborted and never reach consumers reading with `isolation.level=read_committed` "
     "(librdkafka's default; the Java client's default is `read_uncommitted`).\n"
     "- `none`: the idempotent producer alone; a deposed leader may publish older events after "
     "newer ones of the same aggregate."},
    {"relay.max_attempts",
     "Retriable failures of a row before `on_poison` applies; a permanent failure applies it "
     "after the first."},
    {"relay.on_poison",
     "A row Kafka will not take (too large, an invalid topic, headers that are not an object of "
     "strings, a permanent broker error) is a poison row. Each failure counts in the row's "
     "`attempts` and `last_error` columns; after `max_attempts` retriable failures (a permanent "
     "error: after the first) this decides:\n\n"
     "- `hold_aggregate`: the row is set aside (`dead_at`) and later rows of the same aggregate "
     "wait until it is requeued or dropped (`outbox-relay dead requeue`, `dead drop`); every "
     "other aggregate keeps flowing. Keeps the order per aggregate.\n"
     "- `dead_letter`: the row is set aside and later rows of its aggregate go on.\n"
     "- `halt`: relaying stops (readiness fails) with one log line naming the row, until an "
     "operator acts."},
    {"relay.on_sent",
     "After Kafka acknowledged a row: `mark` it sent (`sent_at`), or `delete` it (still "
     "conditional; nothing is then left to audit)."},
    {"relay.notify_channel",
     "LISTEN/NOTIFY channel that wakes the relay when rows are inserted (`migrate` creates the "
     "trigger that notifies it; the trigger sends nothing while the leader claims one batch after "
     "another). A plain identifier."},
    {"relay.poll_interval_ms",
     "Poll the table this often (milliseconds) even without a notification; also how soon a "
     "standby notices that the leader is gone."},
    {"relay.reconnect_interval_ms",
     "After losing PostgreSQL, the first wait (milliseconds) before reconnecting; each failed "
     "attempt doubles it, with jitter, up to `reconnect_max_ms`."},
    {"relay.reconnect_max_ms",
     "The longest wait (milliseconds) between two attempts to reconnect to PostgreSQL."},
    {"relay.retention",
     "Delete sent rows older than this, in batches of 1000: `N` (seconds), `Ns`, `Nm`, `Nh` or "
     "`Nd`; `0` keeps them for ever."},
    {"relay.schema", "Schema of the outbox table (a plain identifier: letters, digits, `_`)."},
    {"relay.shutdown_timeout_ms",
     "On SIGTERM, how long (milliseconds) to wait for Kafka to acknowledge the batches in "
     "flight; what is not acknowledged stays unsent for the next start."},
    {"relay.table", "Name of the outbox table (a plain identifier)."},
    {"relay.transactional_id",
     "The Kafka `transactional.id` of `fencing = transactional`; empty means "
     "`outbox-relay.<schema>.<table>`. Every relay of one outbox table must use the same id, "
     "relays of different tables on one Kafka cluster different ones (two databases with an "
     "outbox of the same schema and name: set it). The relay also uses the same id with "
     "`.spare` appended, while a commit of the first cannot complete at its coordinator; "
     "its principal needs Write on both."},
    {"relay.topic",
     "Topic for rows whose `topic` column is NULL. Placeholders: `${aggregate_type}` and "
     "`${event_type}`. Topics starting with `__` are Kafka's own and refused."},
    {"http.listen",
     "`IPv4:port` or `[IPv6]:port` of the status endpoint: GET `/livez` (liveness), `/healthz` "
     "(the same), `/readyz` (readiness), `/metrics` (Prometheus) and `/status` (JSON). Empty "
     "disables it. The port must be above 1023 (the service has no privileges) and differ "
     "between relays on one host; `0.0.0.0:8423` or `[::]:8423` serve every address (in a "
     "container, the probes need that)."},
    {"verify.interval",
     "Check periodically that Kafka holds what the table says was sent (as `outbox-relay verify` "
     "does), on the leader, off the relay loop: every interval, the rows created between (now - "
     "lag - window) and (now - lag). Results in /metrics (`outbox_relay_verify_*`) and /status. "
     "`0` turns it off."},
    {"verify.lag",
     "Rows younger than this are not checked yet: leave the relay time to send them."},
    {"verify.window",
     "How far back the checked window reaches from its end; every message of the window's topics "
     "from its start on is read once per run."},
    {"log.format", "Line format: `logfmt` (`ts=... level=... msg=... key=value`) or `json`."},
    {"log.level", "Lowest level written to stderr (the journal, under systemd)."},
};

/* A table row's one-line description as a sentence, for keys without text. */
static const char *sentence(const char *desc)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s", desc);
    if (buf[0] >= 'a' && buf[0] <= 'z')
        buf[0] = (char)(buf[0] - 'a' + 'A');
    size_t n = strlen(buf);
    if (n && buf[n - 1] != '.' && n + 1 < sizeof buf) {
        buf[n] = '.';
        buf[n + 1] = '\0';
    }
    return buf;
}

static const char *key_doc(const struct config_param_info *p)
{
    char name[128];
    snprintf(name, sizeof name, "%s.%s", p->section, p->key);
    for (size_t i = 0; i < sizeof doc_keys / sizeof doc_keys[0]; i++) {
        if (!strcmp(doc_keys[i].name, name))
            return doc_keys[i].text;
    }
    return sentence(p->desc);
}

/* Section introductions; [kafka] has its own generator. */
static const char *section_intro(const char *section)
{
    if (!strcmp(section, "postgres"))
        return "Where the outbox table is.";
    if (!strcmp(section, "relay"))
        return "The outbox table, the topics, and what happens to rows.";
    if (!strcmp(section, "http"))
        return "The status endpoint.";
    if (!strcmp(section, "log"))
        return "Logs go to standard error.";
    if (!strcmp(section, "verify"))
        return "The periodic check that Kafka holds what was sent (see `outbox-relay verify`).";
    return "";
}

static const char kafka_intro[] =
    "Every key in this section is a librdkafka producer property, handed to librdkafka as is "
    "(see CONFIGURATION.md of librdkafka); librdkafka rejects unknown ones. "
    "`bootstrap.servers` is required by `run` and `check-config`. The relay sets the "
    "properties below before this section's; those marked enforced cannot be changed "
    "(delivery depends on them), the others can. Also refused: `acks` other than `all`, more "
    "than 5 requests in flight, `retries=0`, and `transactional.id`: with "
    "`relay.fencing = transactional` the relay sets it (from `relay.transactional_id`) and "
    "`transaction.timeout.ms=60000`. Every secret property (`sasl.password`, "
    "`ssl.key.password`, `sasl.oauthbearer.client.secret`, ...) has a `_file` twin "
    "(`sasl.password_file`) naming a file that holds it, readable by the relay's user only "
    "(group or others: refused); a relative path is read from `$CREDENTIALS_DIRECTORY` "
    "when systemd sets it (`LoadCredential=`). Refused at start and by `check-config`, "
    "naming the key: `security.protocol=SASL_*` without `sasl.mechanism`, a mechanism "
    "librdkafka 2.0 does not have (it has GSSAPI, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, "
    "OAUTHBEARER) or one without its credentials or without a SASL protocol, a client key "
    "without its certificate, and a CA, certificate, key, CRL, keystore or keytab file the "
    "relay cannot read.";

/* Examples in the [kafka] section of the conffile (commented out). */
static const char *const kafka_examples[][3] = {
    {"bootstrap.servers", "kafka-1:9092,kafka-2:9092",
     "The brokers to bootstrap from, host:port[,host:port...]. Required."},
    {"security.protocol", "SASL_SSL", "Encryption and authentication, e.g. SASL/SCRAM over TLS:"},
    {"sasl.mechanism", "SCRAM-SHA-512", NULL},
    {"sasl.username", "outbox-relay", NULL},
    {"sasl.password", "change-me", NULL},
    {"ssl.ca.location", "/etc/ssl/certs/ca-certificates.crt", NULL},
};

/* ---- text helpers ------------------------------------------------------- */

/* Writes @p text (no newlines) wrapped at @p width columns, each line
 * starting with @p prefix (the first with @p first if not NULL). Backticks are
 * dropped. */
static void wrap_plain(FILE *out, const char *text, size_t len, const char *first,
                       const char *prefix, size_t width)
{
    char buf[4096];
    size_t n = 0;
    for (size_t i = 0; i < len && n < sizeof buf - 1; i++) {
        if (text[i] != '`')
            buf[n++] = text[i];
    }
    buf[n] = '\0';
    const char *lead = first ? first : prefix;
    const char *s = buf;
    while (*s) {
        size_t room = width > strlen(lead) ? width - strlen(lead) : 20;
        size_t take = strlen(s);
        if (take > room) {
            take = room;
            while (take > 0 && s[take] != ' ')
                take--;
            if (take == 0) { /* one long word: let it overflow */
                take = strcspn(s, " ");
            }
        }
        fprintf(out, "%s%.*s\n", lead, (int)take, s);
        s += take;
        while (*s == ' ')
            s++;
        lead = prefix;
    }
}

/* roff: '-' as \-, '\' as \e, `code` in bold; a line never starts with '.' or '\''. */
static void roff_text(FILE *out, const char *s, size_t len)
{
    bool bold = false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '`') {
            fputs(bold ? "\\fR" : "\\fB", out);
            bold = !bold;
        } else if (c == '-') {
            fputs("\\-", out);
        } else if (c == '\\') {
            fputs("\\e", out);
        } else if (c == '\n') {
            fputc('\n', out);
            if (i + 1 < len && (s[i + 1] == '.' || s[i + 1] == '\''))
                fputs("\\&", out);
        } else {
            fputc(c, out);
        }
    }
    if (bold)
        fputs("\\fR", out);
}

/* roff_text() of a whole paragraph, one sentence per source line. */
static void roff_para(FILE *out, const char *s, size_t len)
{
    if (len && (s[0] == '.' || s[0] == '\''))
        fputs("\\&", out);
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        bool end = i + 1 < len && s[i + 1] == ' ' && (s[i] == '.' || s[i] == ';' || s[i] == ':');
        if (end) {
            roff_text(out, s + start, i + 1 - start);
            fputc('\n', out);
            start = i + 2;
            i++;
            if (start < len && (s[start] == '.' || s[start] == '\''))
                fputs("\\&", out);
        }
    }
    roff_text(out, s + start, len - start);
    fputc('\n', out);
}

/* Iterates the paragraphs of a doc text: calls @p fn(text, len, is_list_item). */
typedef void (*para_fn)(FILE *out, const char *text, size_t len, bool item, void *arg);
static void each_para(FILE *out, const char *text, para_fn fn, void *arg)
{
    const char *s = text;
    while (*s) {
        bool item = !strncmp(s, "- ", 2);
        const char *end = item ? strchr(s, '\n') : strstr(s, "\n\n");
        size_t len = end ? (size_t)(end - s) : strlen(s);
        fn(out, item ? s + 2 : s, item ? len - 2 : len, item, arg);
        s += len;
        while (*s == '\n')
            s++;
    }
}

/* "1..100000", the choices, "reloadable" — what the table knows besides the text. */
static void facts(const struct config_param_info *p, char *buf, size_t len, bool markup,
                  bool choices)
{
    const char *q = markup ? "`" : "";
    size_t n = 0;
    if (p->is_int)
        n += (size_t)snprintf(buf + n, len - n, "%ld to %ld", p->min, p->max);
    if (choices && p->choices) {
        for (const char *const *c = p->choices; *c && n < len; c++)
            n += (size_t)snprintf(buf + n, len - n, "%s%s%s%s", c == p->choices ? "" : ", ", q, *c, q);
    }
    if (n < len)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "; " : "",
                              p->reloadable ? "changes on reload" : "needs a restart");
}

/* ---- the conffile ------------------------------------------------------- */

static void conf_para(FILE *out, const char *text, size_t len, bool item, void *arg)
{
    bool *first = arg;
    if (!*first && !item)
        fputs("#\n", out);
    *first = false;
    if (item)
        wrap_plain(out, text, len, "#   ", "#       ", 80);
    else
        wrap_plain(out, text, len, NULL, "# ", 80);
}

static void conf_doc(FILE *out, const char *text)
{
    bool first = true;
    each_para(out, text, conf_para, &first);
}

static void gen_conf(FILE *out)
{
    fputs("# /etc/outbox-relay/outbox-relay.conf: configuration of outbox-relay(8),\n"
          "# described in outbox-relay.conf(5).\n"
          "#\n"
          "# Generated from the relay's parameter table (outbox-relay config-doc --format conf);\n"
          "# edit relay/config/config_table.c or relay/cmd/config_doc.c, not this file, in the\n"
          "# source tree.\n"
          "#\n"
          "# Every key is shown commented out with its default; uncomment and edit what you\n"
          "# need. Lines starting with '#' or ';' are comments. Check your edits with\n"
          "#     outbox-relay check-config\n"
          "# which prints the effective configuration (passwords masked) or names the key\n"
          "# it rejects. Unknown sections or keys are rejected, never ignored.\n"
          "#\n"
          "# Precedence, lowest first: the defaults below < this file < OUTBOX_RELAY_*\n"
          "# environment variables < `-X section.key=value` on the command line.\n"
          "#\n"
          "# This file may hold passwords: keep it mode 0640, owner root, group\n"
          "# outbox-relay (the package sets that up).\n"
          "#\n"
          "# The service does not start on its own after installation. When [postgres]\n"
          "# and [kafka] point at your database and your brokers:\n"
          "#     outbox-relay migrate        (creates the outbox table; safe to repeat)\n"
          "#     systemctl enable --now outbox-relay\n",
          out);
    size_t n_sec;
    const char *const *sec = config_sections(&n_sec);
    for (size_t s = 0; s < n_sec; s++) {
        fprintf(out, "\n[%s]\n", sec[s]);
        if (!strcmp(sec[s], "kafka")) {
            conf_doc(out, kafka_intro);
            size_t n;
            const struct kafka_setting *ps = kafka_producer_settings(&n);
            for (int enforced = 1; enforced >= 0; enforced--) {
                fputs(enforced ? "#\n# Set by the relay, enforced:\n"
                               : "#\n# Set by the relay, may be changed here:\n",
                      out);
                for (size_t i = 0; i < n; i++) {
                    if (ps[i].enforced == (enforced == 1))
                        fprintf(out, "#%s = %s\n", ps[i].key, ps[i].value);
                }
            }
            for (size_t i = 0; i < sizeof kafka_examples / sizeof kafka_examples[0]; i++) {
                if (kafka_examples[i][2]) {
                    fputs("#\n", out);
                    conf_doc(out, kafka_examples[i][2]);
                }
                fprintf(out, "#%s = %s\n", kafka_examples[i][0], kafka_examples[i][1]);
            }
            continue;
        }
        conf_doc(out, section_intro(sec[s]));
        struct config_param_info p;
        for (size_t i = 0; config_param_info(i, &p); i++) {
            if (strcmp(p.section, sec[s]) != 0)
                continue;
            fputs("#\n", out);
            conf_doc(out, key_doc(&p));
            char f[512];
            facts(&p, f, sizeof f, false, true);
            char line[600];
            snprintf(line, sizeof line, "(%s%s)", p.choices && !p.is_int ? "one of " : "", f);
            wrap_plain(out, line, strlen(line), NULL, "# ", 80);
            fprintf(out, "#%s =%s%s\n", p.key, *p.def ? " " : "", p.def);
        }
    }
}

/* ---- outbox-relay.conf(5) ------------------------------------------------ */

static void man_para(FILE *out, const char *text, size_t len, bool item, void *arg)
{
    bool *first = arg;
    if (item) {
        fputs(".RS\n.IP \\(bu 2\n", out);
        roff_para(out, text, len);
        fputs(".RE\n", out);
    } else {
        if (!*first)
            fputs(".IP\n", out);
        roff_para(out, text, len);
    }
    *first = false;
}

static void man_literal(FILE *out, const char *s)
{
    roff_text(out, s, strlen(s));
}

static void man_header(FILE *out)
{
    fputs(".\\\" outbox-relay.conf(5): generated from the relay's parameter table by\n"
          ".\\\" `outbox-relay config-doc --format man`; edit relay/config/config_table.c\n"
          ".\\\" or relay/cmd/config_doc.c and regenerate (ninja -C build update-docs).\n"
          ".TH OUTBOX\\-RELAY.CONF 5 \"\" \"outbox-relay\" \"File Formats\"\n"
          ".nh\n.ad l\n.nr HY 0\n"
          ".SH NAME\n"
          "outbox\\-relay.conf \\- configuration of outbox\\-relay\n"
          ".SH SYNOPSIS\n"
          ".I /etc/outbox\\-relay/outbox\\-relay.conf\n"
          ".br\n"
          ".IR /etc/outbox\\-relay/ name .conf\n"
          ".SH DESCRIPTION\n"
          "The configuration file of\n.BR outbox\\-relay (8)\n"
          "is in INI format:\n.BI [ section ]\nheaders, then\n.IB key \" = \" value\n"
          "lines; lines starting with\n.B #\nor\n.B ;\nare comments.\n"
          "Unknown sections and keys, malformed values and Kafka properties that would\n"
          "weaken delivery are rejected at start with exit status 78 and a message that\n"
          "names the key.\n"
          ".PP\n"
          "Precedence, lowest first: the defaults below, the file,\n"
          ".BI OUTBOX_RELAY_ SECTION _ KEY\n"
          "environment variables (see\n.BR outbox\\-relay (8)),\n"
          ".B \\-X\n.IB section . key = value\non the command line.\n"
          "Keys that change on reload take effect on SIGHUP; a change to any other key\n"
          "is logged and needs a restart.\n",
          out);
}

/* [kafka]: the properties the relay sets, then examples. */
static void man_kafka_section(FILE *out)
{
    roff_para(out, kafka_intro, strlen(kafka_intro));
    size_t n;
    const struct kafka_setting *ps = kafka_producer_settings(&n);
    for (size_t i = 0; i < n; i++) {
        fputs(".TP\n.B ", out);
        man_literal(out, ps[i].key);
        fputs(" = ", out);
        man_literal(out, ps[i].value);
        fputs(ps[i].enforced ? "\nenforced\n" : "\ndefault of the relay\n", out);
    }
    fputs(".PP\nFor example:\n.PP\n.RS\n.EX\n", out);
    for (size_t i = 0; i < sizeof kafka_examples / sizeof kafka_examples[0]; i++) {
        man_literal(out, kafka_examples[i][0]);
        fputs(" = ", out);
        man_literal(out, kafka_examples[i][1]);
        fputc('\n', out);
    }
    fputs(".EE\n.RE\n", out);
}

/* One key: its name, default and facts, then its documentation. */
static void man_key(FILE *out, const struct config_param_info *p)
{
    fputs(".TP\n.B ", out);
    man_literal(out, p->key);
    fputs("\n", out);
    char f[512];
    facts(p, f, sizeof f, true, true);
    fputs("Default: ", out);
    if (*p->def) {
        fputs("\\fB", out);
        man_literal(out, p->def);
        fputs("\\fR", out);
    } else {
        fputs("empty", out);
    }
    fputs(" (", out);
    if (p->choices && !p->is_int)
        fputs("one of ", out);
    roff_text(out, f, strlen(f));
    fputs(").\n.IP\n", out);
    bool first = true;
    each_para(out, key_doc(p), man_para, &first);
}

static void man_footer(FILE *out)
{
    fputs(".SH FILES\n"
          ".TP\n.I /etc/outbox\\-relay/outbox\\-relay.conf\n"
          "The configuration of\n.BR outbox\\-relay.service ;\n"
          "the package installs a commented one that lists every key.\n"
          ".TP\n.IR /etc/outbox\\-relay/ name .conf\n"
          "The configuration of the instance\n.BI outbox\\-relay@ name .service\\fR.\n"
          ".SH SEE ALSO\n"
          ".BR outbox\\-relay (8)\n",
          out);
}

static void gen_man(FILE *out)
{
    man_header(out);
    size_t n_sec;
    const char *const *sec = config_sections(&n_sec);
    for (size_t s = 0; s < n_sec; s++) {
        fprintf(out, ".SS [%s]\n", sec[s]);
        if (!strcmp(sec[s], "kafka")) {
            man_kafka_section(out);
            continue;
        }
        roff_para(out, section_intro(sec[s]), strlen(section_intro(sec[s])));
        struct config_param_info p;
        for (size_t i = 0; config_param_info(i, &p); i++) {
            if (strcmp(p.section, sec[s]) == 0)
                man_key(out, &p);
        }
    }
    man_footer(out);
}

/* ---- docs/configuration.md ------------------------------------------------ */

static void md_cell(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", out);
        else if (*s == '\n')
            fputc(' ', out);
        else
            fputc(*s, out);
    }
}

static void md_code(FILE *out, const char *s)
{
    fputc('`', out);
    md_cell(out, s);
    fputc('`', out);
}

/* One key: | key | type | default | allowed | reload | meaning | */
static void md_key(FILE *out, const struct config_param_info *p)
{
    fprintf(out, "| `%s.%s` | %s", p->section, p->key, p->type);
    if (*p->unit)
        fprintf(out, " (%s)", p->unit);
    fputs(" | ", out);
    if (*p->def)
        md_code(out, p->def);
    else
        fputs("empty", out);
    fputs(" | ", out);
    if (p->is_int)
        fprintf(out, "%ld to %ld", p->min, p->max);
    else if (p->choices)
        for (const char *const *c = p->choices; *c; c++) {
            fputs(c == p->choices ? "" : ", ", out);
            md_code(out, *c);
        }
    else if (!strcmp(p->type, "duration"))
        fputs("`N`, `Ns`, `Nm`, `Nh`, `Nd` (bare: seconds; `0`: off)", out);
    fprintf(out, " | %s | ", p->reloadable ? "yes" : "restart");
    md_cell(out, p->desc);
    fputs(" |\n", out);
}

static void md_kafka(FILE *out)
{
    fputs("| property | value | |\n|---|---|---|\n", out);
    size_t n;
    const struct kafka_setting *ps = kafka_producer_settings(&n);
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "| `%s` | ", ps[i].key);
        md_code(out, ps[i].value);
        fprintf(out, " | %s |\n", ps[i].enforced ? "enforced" : "default, may be set");
    }
}

static void gen_markdown(FILE *out)
{
    fputs("# Configuration reference\n\n"
          "<!-- Generated from the parameter table (relay/config/config_table.c) by\n"
          "     `outbox-relay config-doc --format markdown`; test config_doc checks it and\n"
          "     `ninja -C build update-docs` rewrites it. Do not edit by hand. -->\n\n"
          "The relay reads `/etc/outbox-relay/outbox-relay.conf` (INI; `-c FILE` for another), "
          "then `OUTBOX_RELAY_<SECTION>_<KEY>` environment variables, then `-X section.key=value` "
          "options; a later layer wins. Every value is checked once, at start: an unknown key, a "
          "value out of range or a choice not listed stops the relay with exit status 78 and a "
          "message naming the key. `outbox-relay check-config` runs the same checks "
          "and prints the effective configuration, secrets redacted. Keys "
          "marked *reload: yes* change on `SIGHUP` (`systemctl reload outbox-relay`); the others "
          "need a restart.\n",
          out);
    size_t n_sec;
    const char *const *sec = config_sections(&n_sec);
    for (size_t s = 0; s < n_sec; s++) {
        fprintf(out, "\n## [%s]\n\n", sec[s]);
        if (!strcmp(sec[s], "kafka")) {
            fprintf(out, "%s\n\n", kafka_intro);
            md_kafka(out);
            continue;
        }
        fprintf(out, "%s\n\n", section_intro(sec[s]));
        fputs("| key | type | default | allowed | reload | meaning |\n"
              "|---|---|---|---|---|---|\n", out);
        struct config_param_info p;
        for (size_t i = 0; config_param_info(i, &p); i++) {
            if (strcmp(p.section, sec[s]) == 0)
                md_key(out, &p);
        }
    }
}

int config_doc(const char *format, FILE *out)
{
    if (!strcmp(format, "conf"))
        gen_conf(out);
    else if (!strcmp(format, "man"))
        gen_man(out);
    else if (!strcmp(format, "markdown"))
        gen_markdown(out);
    else
        return -1;
    return ferror(out) ? -1 : 0;
}
