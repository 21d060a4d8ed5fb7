/* wal_event.c — an outbox event read by log-based capture; see wal_event.h.
 * pgoutput's values are not NUL-terminated (they run into the next column's
 * bytes), so every string an event carries is copied into one allocation it
 * owns. Its created_at and event_id texts are formatted by pg_binary.c, as a
 * claim formats them: both capture modes give the same header bytes. */
#include "core/wal_event.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errors.h"
#include "core/pg_binary.h"

#define US_PER_S INT64_C(1000000)
/* How much of an unreadable value or member name an error message quotes. */
#define SHOWN_MAX 64

/* Copies at most SHOWN_MAX bytes of @p s (@p len bytes) for an error message:
 * printable ASCII as is, anything else as \xNN, so the message can be stored
 * as last_error whatever the value held. */
static void shown(const char *s, size_t len, char out[4 * SHOWN_MAX + 4])
{
    size_t o = 0;
    for (size_t i = 0; i < len && i < SHOWN_MAX; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            out[o++] = (char)c;
        else
            o += (size_t)sprintf(out + o, "\\x%02x", c);
    }
    strcpy(out + o, len > SHOWN_MAX ? "..." : "");
}

void wal_event_clear(struct wal_event *ev)
{
    free(ev->owned);
    memset(ev, 0, sizeof *ev);
}

/* ---- text as pgoutput prints it ---- */

struct cursor {
    const char *p, *end;
};

static bool take(struct cursor *c, char ch)
{
    if (c->p == c->end || *c->p != ch)
        return false;
    c->p++;
    return true;
}

/* @p min to @p max decimal digits into *out. */
static bool take_digits(struct cursor *c, int min, int max, int64_t *out)
{
    int n = 0;
    int64_t v = 0;
    while (n < max && c->p != c->end && *c->p >= '0' && *c->p <= '9') {
        v = v * 10 + (*c->p++ - '0');
        n++;
    }
    *out = v;
    return n >= min;
}

/* A bigint as int8out prints it. */
static bool parse_int8(const char *s, size_t len, int64_t *out)
{
    struct cursor c = { s, s + len };
    bool neg = take(&c, '-');
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (c.p == c.end)
        return false;
    for (; c.p != c.end; c.p++) {
        if (*c.p < '0' || *c.p > '9' || v > (limit - (uint64_t)(*c.p - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*c.p - '0');
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* Days from 1970-01-01 to the proleptic Gregorian date @p y-@p m-@p d
 * (astronomical years: 0 is 1 BC), after Howard Hinnant's days_from_civil. */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int64_t days_in_month(int64_t y, int64_t m)
{
    static const int8_t days[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    bool leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    return m == 2 && leap ? 29 : days[m - 1];
}

/* The zone offset of timestamptz_out: "+HH", "+HH:MM" or "+HH:MM:SS" east
 * of UTC. @return false when there is none or it is out of range. */
static bool take_offset(struct cursor *c, int64_t *offset_s)
{
    int64_t sign = take(c, '+') ? 1 : take(c, '-') ? -1 : 0;
    int64_t h, m = 0, s = 0;
    if (!sign || !take_digits(c, 2, 2, &h))
        return false;
    if (take(c, ':') && (!take_digits(c, 2, 2, &m) || (take(c, ':') && !take_digits(c, 2, 2, &s))))
        return false;
    *offset_s = sign * (h * 3600 + m * 60 + s);
    return h <= 15 && m < 60 && s < 60;
}

/* A timestamptz as timestamptz_out prints it with DateStyle ISO: "2026-12-04
 * 05:41:13.123456+00", the fraction trimmed of its trailing zeros or absent,
 * the offset "+05:30" or "-08", " BC" after it for years before 1, and
 * "infinity", "-infinity". @return the microseconds since 2000-01-01 UTC in
 * *t (pg_binary.c's form), or false for any other text. */
static bool parse_timestamptz(const char *s, size_t len, bool bare_ok, int64_t *t)
{
    if ((len == 8 && !memcmp(s, "infinity", 8)) || (len == 9 && !memcmp(s, "-infinity", 9))) {
        *t = len == 8 ? INT64_MAX : INT64_MIN;
        return true;
    }
    struct cursor c = { s, s + len };
    int64_t y, mo, d, h, mi, sec, frac = 0, offset_s;
    if (!take_digits(&c, 4, 6, &y) || !take(&c, '-') || !take_digits(&c, 2, 2, &mo) ||
        !take(&c, '-') || !take_digits(&c, 2, 2, &d) || !take(&c, ' ') ||
        !take_digits(&c, 2, 2, &h) || !take(&c, ':') || !take_digits(&c, 2, 2, &mi) ||
        !take(&c, ':') || !take_digits(&c, 2, 2, &sec))
        return false;
    if (take(&c, '.')) {
        const char *start = c.p;
        if (!take_digits(&c, 1, 6, &frac))
            return false;
        for (ptrdiff_t n = c.p - start; n < 6; n++)
            frac *= 10;
    }
    /* A timestamp without time zone (@p bare_ok) has no offset: read as
     * UTC, as Debezium reads one (MicroTimestamp). */
    bool bare = bare_ok && (c.p == c.end || *c.p == ' ');
    offset_s = 0;
    if (y < 1 || (!bare && !take_offset(&c, &offset_s)))
        return false;
    if (c.end - c.p == 3 && !memcmp(c.p, " BC", 3)) {
        y = 1 - y;
        c.p += 3;
    }
    if (c.p != c.end || y > 294276 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) ||
        h > 23 || mi > 59 || sec > 59)
        return false;
    int64_t unix_s = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset_s;
    int64_t us;
    if (__builtin_mul_overflow(unix_s - PGB_EPOCH_UNIX_S, US_PER_S, &us) ||
        __builtin_add_overflow(us, frac, t))
        return false;
    return true;
}

/* ---- an Insert into the outbox table ---- */

/* The columns whose text an event carries, in the order they are copied;
 * the placed columns (relay.additional_placement) follow them. */
enum text_col { COL_EVENT_ID, COL_AGGREGATE_TYPE, COL_AGGREGATE_ID, COL_EVENT_TYPE, COL_TOPIC,
                COL_PAYLOAD, COL_HEADERS, N_TEXT_COLS };
#define N_COLS (N_TEXT_COLS + EVENT_PLACEMENT_MAX)

static const struct wal_columns relay_columns = {
    .relay_table = true, .event_id = "event_id", .aggregate_type = "aggregate_type",
    .aggregate_id = "aggregate_id", .event_type = "event_type", .payload = "payload",
    .created_at = "created_at",
};

/* What an insert must hold of a column. */
enum need { OPTIONAL, PRESENT /* the column, NULL or not */, VALUE /* the column, not NULL */ };

/* The name of column @p i (NULL when not read) and what is needed of it. */
static const char *col_name(const struct wal_columns *c, int i, enum need *need)
{
    const char *names[N_TEXT_COLS] = {
        [COL_EVENT_ID] = c->event_id, [COL_AGGREGATE_TYPE] = c->aggregate_type,
        [COL_AGGREGATE_ID] = c->aggregate_id, [COL_EVENT_TYPE] = c->event_type,
        [COL_TOPIC] = c->relay_table ? "topic" : NULL, [COL_PAYLOAD] = c->payload,
        [COL_HEADERS] = c->relay_table ? "headers" : NULL,
    };
    /* Debezium's Event Router sends a NULL aggregateid as a null key; the
     * relay's own table has the column NOT NULL. A missing column is still
     * refused: its key would be dropped without a word. */
    *need = OPTIONAL;
    if (i < COL_AGGREGATE_ID || (c->relay_table && (i == COL_AGGREGATE_ID || i == COL_EVENT_TYPE)))
        *need = VALUE;
    else if (i == COL_AGGREGATE_ID)
        *need = PRESENT;
    if (i >= N_TEXT_COLS) {
        size_t k = (size_t)(i - N_TEXT_COLS);
        *need = OPTIONAL;
        return c->placement && k < c->placement->n ? c->placement->column[k] : NULL;
    }
    return names[i] && *names[i] ? names[i] : NULL;
}

/* Column @p name of @p m, as @p need asks. */
static int column(const struct pgo_msg *m, const char *name, enum need need,
                  const struct pgo_value **out, char *errbuf, size_t errlen)
{
    const struct pgo_value *v = name ? pgo_column(m, name) : NULL;
    *out = v && v->text ? v : NULL;
    if (need != OPTIONAL && !v)
        return errbuf_fail(errbuf, errlen, "the outbox table has no column %s", name);
    if (need == VALUE && !v->text)
        return errbuf_fail(errbuf, errlen, "column %s is NULL", name);
    /* PostgreSQL's text never holds one; a string cut there would differ from the row. */
    if (*out && memchr(v->text, '\0', v->len))
        return errbuf_fail(errbuf, errlen, "column %s holds a NUL byte", name);
    return 0;
}

/* The row's id (the relay's table only) and created_at (@p commit_time_us
 * without the column, or when it is NULL). */
static int insert_id_and_time(const struct pgo_msg *m, const struct wal_columns *cols,
                              int64_t commit_time_us, struct event_row *row, char *errbuf,
                              size_t errlen)
{
    char what[4 * SHOWN_MAX + 4];
    const struct pgo_value *v;
    int rc = cols->relay_table ? column(m, "id", VALUE, &v, errbuf, errlen) : 0;
    if (rc)
        return rc;
    if (cols->relay_table && !parse_int8(v->text, v->len, &row->id)) {
        shown(v->text, v->len, what);
        return errbuf_fail(errbuf, errlen, "column id is not a bigint: \"%s\"", what);
    }
    int64_t t = commit_time_us;
    const char *name = cols->created_at && *cols->created_at ? cols->created_at : NULL;
    if ((rc = column(m, name, OPTIONAL, &v, errbuf, errlen)))
        return rc;
    if (v && !parse_timestamptz(v->text, v->len, !cols->relay_table, &t)) {
        shown(v->text, v->len, what);
        return errbuf_fail(errbuf, errlen,
                           "column %s is not a timestamp as PostgreSQL prints it "
                           "with DateStyle ISO: \"%s\"",
                           name, what);
    }
    row->created_ms = pgb_time_epoch_ms(t);
    pgb_time_text(t, row->created_at_text);
    row->created_at = row->created_at_text;
    return 0;
}

/* Copies the text columns into ev->owned and points the row at them. */
static int insert_copy(struct wal_event *ev, const struct pgo_value *const v[N_COLS],
                       size_t n_placed)
{
    size_t total = 0;
    for (int i = 0; i < N_COLS; i++)
        total += v[i] ? v[i]->len + 1 : 0;
    if (!(ev->owned = malloc(total ? total : 1)))
        return -ENOMEM;
    const char *text[N_COLS] = { NULL };
    char *o = ev->owned;
    for (int i = 0; i < N_COLS; i++) {
        if (!v[i])
            continue;
        /* A uuid fits the row's own buffer, as a claim formats it; a text
         * event_id of any length stays in owned. */
        char *dst = i == COL_EVENT_ID && v[i]->len < PGB_UUID_TEXT ? ev->row.event_id_text : o;
        memcpy(dst, v[i]->text, v[i]->len);
        dst[v[i]->len] = '\0';
        text[i] = dst;
        if (dst == o)
            o += v[i]->len + 1;
    }
    struct event_row *row = &ev->row;
    row->event_id = text[COL_EVENT_ID];
    row->aggregate_type = text[COL_AGGREGATE_TYPE];
    row->aggregate_id = text[COL_AGGREGATE_ID];
    row->event_type = text[COL_EVENT_TYPE];
    row->topic = text[COL_TOPIC];
    row->payload = text[COL_PAYLOAD];
    row->payload_len = v[COL_PAYLOAD] ? v[COL_PAYLOAD]->len : 0;
    row->headers_json = text[COL_HEADERS];
    row->n_placed = n_placed;
    for (size_t k = 0; k < n_placed; k++)
        row->placed[k] = text[N_TEXT_COLS + k];
    return 0;
}

int wal_event_from_insert(const struct pgo_msg *m, int64_t commit_time_us, struct wal_event *ev,
                          char *errbuf, size_t errlen)
{
    return wal_event_from_insert_cols(m, commit_time_us, &relay_columns, ev, errbuf, errlen);
}

int wal_event_from_insert_cols(const struct pgo_msg *m, int64_t commit_time_us,
                               const struct wal_columns *cols, struct wal_event *ev,
                               char *errbuf, size_t errlen)
{
    memset(ev, 0, sizeof *ev);
    if (m->kind != PGO_INSERT || !m->rel)
        return errbuf_fail(errbuf, errlen, "not an insert");
    const struct pgo_value *v[N_COLS] = { NULL };
    int rc = insert_id_and_time(m, cols, commit_time_us, &ev->row, errbuf, errlen);
    for (int i = 0; !rc && i < N_COLS; i++) {
        enum need need;
        const char *name = col_name(cols, i, &need);
        rc = column(m, name, need, &v[i], errbuf, errlen);
    }
    size_t n_placed = cols->placement ? cols->placement->n : 0;
    for (size_t k = 0; !rc && k < n_placed; k++) {
        /* int2, int4, int8: numbers where JsonConverter writes the value */
        uint32_t type = pgo_column_type(m, cols->placement->column[k]);
        ev->row.placed_number[k] = type == PGB_INT2OID || type == PGB_INT4OID ||
                                   type == PGB_INT8OID;
    }
    if (!rc && (rc = insert_copy(ev, v, n_placed)) == -ENOMEM && errbuf && errlen)
        snprintf(errbuf, errlen, "out of memory copying an insert");
    if (rc)
        wal_event_clear(ev);
    return rc;
}

/* ---- a logical message's envelope ---- */

enum env_member { ENV_AGGREGATE_TYPE, ENV_AGGREGATE_ID, ENV_EVENT_TYPE, ENV_TOPIC, ENV_EVENT_ID,
                  ENV_PAYLOAD, ENV_HEADERS, N_ENV };

/* Members' names; the first three are required non-empty strings. */
static const char *const env_names[N_ENV] = {
    [ENV_AGGREGATE_TYPE] = "aggregate_type", [ENV_AGGREGATE_ID] = "aggregate_id",
    [ENV_EVENT_TYPE] = "event_type",         [ENV_TOPIC] = "topic",
    [ENV_EVENT_ID] = "event_id",             [ENV_PAYLOAD] = "payload",
    [ENV_HEADERS] = "headers",
};

#define ENV_REQUIRED 3

/* The envelope's members into @p f, optional ones that are null as absent. Unknown and
 * repeated members are refused: a misspelt "paylod" would otherwise
 * publish a tombstone, and of two "payload"s one would be dropped unseen. */
static int envelope_members(const cJSON *root, const cJSON *f[N_ENV], char *errbuf,
                            size_t errlen)
{
    bool seen[N_ENV] = { false };
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        const char *name = it->string ? it->string : "";
        int k = 0;
        while (k < N_ENV && strcmp(env_names[k], name) != 0)
            k++;
        char what[4 * SHOWN_MAX + 4];
        shown(name, strlen(name), what);
        if (k == N_ENV)
            return errbuf_fail(errbuf, errlen, "envelope member \"%s\" is unknown", what);
        if (seen[k])
            return errbuf_fail(errbuf, errlen, "envelope member \"%s\" appears twice", what);
        seen[k] = true;
        f[k] = k >= ENV_REQUIRED && cJSON_IsNull(it) ? NULL : it;
    }
    for (int k = 0; k < ENV_REQUIRED; k++) {
        if (!f[k])
            return errbuf_fail(errbuf, errlen, "envelope member \"%s\" is missing", env_names[k]);
        if (!cJSON_IsString(f[k]) || !*f[k]->valuestring)
            return errbuf_fail(errbuf, errlen, "envelope member \"%s\" is not a non-empty string",
                               env_names[k]);
    }
    if (f[ENV_TOPIC] && !cJSON_IsString(f[ENV_TOPIC]))
        return errbuf_fail(errbuf, errlen, "envelope member \"topic\" is not a string");
    if (f[ENV_EVENT_ID] && !cJSON_IsString(f[ENV_EVENT_ID]))
        return errbuf_fail(errbuf, errlen, "envelope member \"event_id\" is not a string");
    return 0;
}

/* The headers object: its members strings, as event_headers_build() wants. */
static int envelope_headers(const cJSON *h, char *errbuf, size_t errlen)
{
    if (!cJSON_IsObject(h))
        return errbuf_fail(errbuf, errlen, "envelope member \"headers\" is not an object");
    const cJSON *it;
    cJSON_ArrayForEach(it, h) {
        if (!cJSON_IsString(it)) {
            const char *name = it->string ? it->string : "";
            char what[4 * SHOWN_MAX + 4];
            shown(name, strlen(name), what);
            return errbuf_fail(errbuf, errlen, "envelope headers member \"%s\" is not a string",
                               what);
        }
    }
    return 0;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* @p s as a uuid in its canonical form (8-4-4-4-12 hex digits), lowercased
 * into @p out as PostgreSQL prints one. */
static bool uuid_canonical(const char *s, char out[PGB_UUID_TEXT])
{
    if (strlen(s) != PGB_UUID_TEXT - 1)
        return false;
    for (int i = 0; i < PGB_UUID_TEXT - 1; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : hex_digit(s[i]) < 0)
            return false;
        out[i] = dash ? '-' : "0123456789abcdef"[hex_digit(s[i])];
    }
    out[PGB_UUID_TEXT - 1] = '\0';
    return true;
}

/* The id of a message whose envelope has none: see wal_event.h. */
void wal_event_lsn_id(uint64_t lsn, char out[PGB_UUID_TEXT])
{
    snprintf(out, PGB_UUID_TEXT, "%08" PRIx32 "-0000-8000-8000-0000%08" PRIx32,
             (uint32_t)(lsn >> 32), (uint32_t)lsn);
}

/* Copies the envelope's strings and the printed payload and headers into
 * ev->owned and points the row at them. */
static int envelope_copy(struct wal_event *ev, const cJSON *const f[N_ENV], const char *payload,
                         const char *headers)
{
    const char *src[] = { f[ENV_AGGREGATE_TYPE]->valuestring, f[ENV_AGGREGATE_ID]->valuestring,
                          f[ENV_EVENT_TYPE]->valuestring,
                          f[ENV_TOPIC] ? f[ENV_TOPIC]->valuestring : NULL, payload, headers };
    enum { N_SRC = sizeof src / sizeof src[0] };
    size_t len[N_SRC], total = 0;
    for (size_t i = 0; i < N_SRC; i++)
        total += src[i] ? (len[i] = strlen(src[i])) + 1 : 0;
    if (!(ev->owned = malloc(total)))
        return -ENOMEM;
    const char *dst[N_SRC] = { NULL };
    char *o = ev->owned;
    for (size_t i = 0; i < N_SRC; i++) {
        if (!src[i])
            continue;
        memcpy(o, src[i], len[i] + 1);
        dst[i] = o;
        o += len[i] + 1;
    }
    struct event_row *row = &ev->row;
    row->aggregate_type = dst[0];
    row->aggregate_id = dst[1];
    row->event_type = dst[2];
    row->topic = dst[3];
    row->payload = dst[4];
    row->payload_len = payload ? len[4] : 0;
    row->headers_json = dst[5];
    return 0;
}

/* The event of an envelope whose members envelope_members() checked. */
static int envelope_event(const cJSON *const f[N_ENV], uint64_t lsn, struct wal_event *ev,
                          char *errbuf, size_t errlen)
{
    if (f[ENV_HEADERS] && envelope_headers(f[ENV_HEADERS], errbuf, errlen))
        return -EINVAL;
    if (!f[ENV_EVENT_ID])
        wal_event_lsn_id(lsn, ev->row.event_id_text);
    else if (!uuid_canonical(f[ENV_EVENT_ID]->valuestring, ev->row.event_id_text))
        return errbuf_fail(errbuf, errlen,
                           "envelope member \"event_id\" is not a uuid (8-4-4-4-12 hex digits)");
    ev->row.event_id = ev->row.event_id_text;

    char *payload = f[ENV_PAYLOAD] ? cJSON_PrintUnformatted(f[ENV_PAYLOAD]) : NULL;
    char *headers = f[ENV_HEADERS] ? cJSON_PrintUnformatted(f[ENV_HEADERS]) : NULL;
    int rc = (f[ENV_PAYLOAD] && !payload) || (f[ENV_HEADERS] && !headers)
                 ? -ENOMEM
                 : envelope_copy(ev, f, payload, headers);
    cJSON_free(payload);
    cJSON_free(headers);
    if (rc && errbuf && errlen)
        snprintf(errbuf, errlen, "out of memory reading a message's envelope");
    return rc;
}

int wal_event_from_message(const struct pgo_msg *m, uint64_t lsn, int64_t commit_time_us,
                           struct wal_event *ev, char *errbuf, size_t errlen)
{
    memset(ev, 0, sizeof *ev);
    if (m->kind != PGO_MESSAGE)
        return errbuf_fail(errbuf, errlen, "not a logical message");
    const char *end = NULL, *stop = m->content ? m->content + m->content_len : NULL;
    cJSON *root = m->content ? cJSON_ParseWithLengthOpts(m->content, m->content_len, &end, 0)
                             : NULL;
    while (root && end < stop && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
        end++;
    int rc = 0;
    if (!root)
        rc = errbuf_fail(errbuf, errlen, "message content is not JSON");
    else if (end != stop)
        rc = errbuf_fail(errbuf, errlen, "message content has more after its JSON value");
    else if (!cJSON_IsObject(root))
        rc = errbuf_fail(errbuf, errlen, "message content is not a JSON object");
    const cJSON *f[N_ENV] = { NULL };
    if (!rc)
        rc = envelope_members(root, f, errbuf, errlen);
    if (!rc)
        rc = envelope_event(f, lsn, ev, errbuf, errlen);
    cJSON_Delete(root);
    if (rc) {
        wal_event_clear(ev);
        return rc;
    }
    ev->row.id = 0;
    ev->row.created_ms = pgb_time_epoch_ms(commit_time_us);
    pgb_time_text(commit_time_us, ev->row.created_at_text);
    ev->row.created_at = ev->row.created_at_text;
    return 0;
}

bool wal_event_wanted(const struct pgo_msg *m, const char *schema, const char *table,
                      const char *prefix)
{
    if (m->kind == PGO_MESSAGE)
        return strcmp(m->prefix, prefix) == 0;
    if (m->kind != PGO_INSERT || !m->rel || strcmp(m->rel->nspname, schema) != 0 ||
        strcmp(m->rel->relname, table) != 0)
        return false;
    const struct pgo_value *sent = pgo_column(m, "sent_at");
    const struct pgo_value *dead = pgo_column(m, "dead_at");
    return !(sent && sent->text) && !(dead && dead->text);
}

int wal_event_from_change(const struct pgo_msg *m, uint64_t lsn, int64_t commit_time_us,
                          const struct wal_columns *cols, struct wal_event *ev, char *errbuf,
                          size_t errlen)
{
    if (m->kind == PGO_INSERT)
        return wal_event_from_insert_cols(m, commit_time_us, cols, ev, errbuf, errlen);
    return wal_event_from_message(m, lsn, commit_time_us, ev, errbuf, errlen);
}

void wal_event_message_context(const struct pgo_msg *m, char *err, size_t len)
{
    size_t n = strlen(err);
    if (n + 1 >= len)
        return;
    n += (size_t)snprintf(err + n, len - n, "; content: ");
    for (size_t k = 0; k < m->content_len && n + 1 < len; k++)
        err[n++] = m->content[k] >= 0x20 && m->content[k] < 0x7f ? m->content[k] : '?';
    err[n < len ? n : len - 1] = '\0';
}
