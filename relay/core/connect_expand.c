/* connect_expand.c — table.expand.json.payload (see connect_json.h): the
 * payload is parsed into a tree as Jackson's readTree builds it, its Connect
 * schema inferred as the Event Router's JsonSchemaData does, then written
 * value by value against that schema as JsonConverter writes a Struct. */
#include "core/connect_expand.h"
#include "core/connect_json.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errors.h"
#include "base/hex.h"

/* Jackson's default limit of nesting; a deeper document does not parse. */
#define JSON_MAX_DEPTH 1000

/* ---- the tree Jackson's readTree builds ----------------------------------- */

enum jkind { J_NULL, J_FALSE, J_TRUE, J_INT, J_LONG, J_BIG, J_DOUBLE, J_STRING, J_ARRAY, J_OBJECT };

/* Nodes and schemas live in arrays and refer to each other by index; 0 is none. */
struct jnode {
    enum jkind kind;
    uint32_t child, next;   /* first element or member; next sibling */
    size_t key, key_len;    /* a member's name in tree.text */
    size_t str, str_len;    /* J_STRING: its text in tree.text */
    int64_t i;
    double d;
};

enum stype { S_BOOL = 1, S_INT32, S_INT64, S_FLOAT64, S_STRING, S_ARRAY, S_STRUCT };

/* A schema's name: the key path of the member it came from (JsonSchemaData's
 * "payload.lineItems"), in tree.text; unset for the elements of an array of
 * arrays, whose key is null there. */
struct skey {
    bool set;
    size_t off, len;
};

struct jschema {
    enum stype t;
    uint32_t elem;          /* S_ARRAY: the elements' schema */
    uint32_t field;         /* S_STRUCT: the first field */
    bool required;          /* a struct merged from several: null is not a value of it */
    struct skey name;       /* S_STRUCT */
};

struct jfield {
    uint32_t next, schema;
    size_t key, key_len;
};

struct tree {
    const char *in, *end;
    struct strbuf text;     /* decoded strings and names */
    struct jnode *node;
    size_t n_node, cap_node;
    struct jschema *schema;
    size_t n_schema, cap_schema;
    struct jfield *field;
    size_t n_field, cap_field;
    bool names;             /* the schema is written too: structs need their names */
    bool oom;
};

/* A new zeroed element of array @p v (@p size bytes each); 0 when out of memory. */
static uint32_t grow(void **v, size_t *n, size_t *cap, size_t size, bool *oom)
{
    if (*n == 0)
        *n = 1; /* index 0 means none */
    if (*n >= *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        void *g = c < UINT32_MAX ? realloc(*v, c * size) : NULL;
        if (!g) {
            *oom = true;
            return 0;
        }
        *v = g;
        *cap = c;
    }
    memset((char *)*v + *n * size, 0, size);
    return (uint32_t)(*n)++;
}

/* A new element of the tree's array @p a (node, schema or field). */
#define NEW(t, a) grow((void **)&(t)->a, &(t)->n_##a, &(t)->cap_##a, sizeof *(t)->a, &(t)->oom)

static void skip_ws(struct tree *t)
{
    while (t->in < t->end && (*t->in == ' ' || *t->in == '\t' || *t->in == '\n' || *t->in == '\r'))
        t->in++;
}

static int hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex_value(p[i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

static void put_utf8(struct strbuf *sb, uint32_t cp)
{
    char b[4];
    size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    if (n == 1)
        b[0] = (char)cp;
    else {
        for (size_t i = n - 1; i > 0; i--, cp >>= 6)
            b[i] = (char)(0x80 | (cp & 0x3f));
        b[0] = (char)((n == 2 ? 0xc0 : n == 3 ? 0xe0 : 0xf0) | cp);
    }
    strbuf_add(sb, b, n);
}

/* One \u escape (and the low half of a pair) at t->in, past the 'u'. */
static bool unicode_escape(struct tree *t)
{
    int hi = t->end - t->in >= 4 ? hex4(t->in) : -1;
    if (hi < 0)
        return false;
    t->in += 4;
    uint32_t cp = (uint32_t)hi;
    if (hi >= 0xd800 && hi < 0xdc00) {
        int lo = t->end - t->in >= 6 && t->in[0] == '\\' && t->in[1] == 'u' ? hex4(t->in + 2) : -1;
        if (lo < 0xdc00 || lo > 0xdfff)
            return false; /* a lone surrogate: Jackson could not write it as UTF-8 */
        t->in += 6;
        cp = 0x10000 + (((uint32_t)hi - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
    } else if (hi >= 0xdc00 && hi <= 0xdfff) {
        return false;
    }
    put_utf8(&t->text, cp);
    return true;
}

/* A string at t->in (past its quote), decoded into t->text. */
static bool parse_string(struct tree *t, size_t *off, size_t *len)
{
    *off = t->text.len;
    while (t->in < t->end && *t->in != '"') {
        const char *run = t->in;
        while (t->in < t->end && *t->in != '"' && *t->in != '\\' &&
               (unsigned char)*t->in >= 0x20)
            t->in++;
        strbuf_add(&t->text, run, (size_t)(t->in - run));
        if (t->in >= t->end || *t->in == '"')
            break;
        unsigned char c = (unsigned char)*t->in++;
        if (c < 0x20)
            return false; /* unescaped control characters are not JSON */
        if (t->in >= t->end)
            return false;
        char e = *t->in++;
        const char *m = strchr("\"\"\\\\//b\bf\fn\nr\rt\t", e);
        if (e == 'u') {
            if (!unicode_escape(t))
                return false;
        } else if (e && m && ((m - "\"\"\\\\//b\bf\fn\nr\rt\t") % 2) == 0) {
            strbuf_add(&t->text, m + 1, 1);
        } else {
            return false;
        }
    }
    if (t->in >= t->end)
        return false;
    t->in++;
    *len = t->text.len - *off;
    return !t->text.oom;
}

/* A number at t->in: int32, int64, a larger integer or a double, as Jackson
 * tells them apart (an integer has neither fraction nor exponent). */
static bool parse_number(struct tree *t, struct jnode *n)
{
    const char *p = t->in;
    if (p < t->end && *p == '-')
        p++;
    const char *digits = p;
    while (p < t->end && *p >= '0' && *p <= '9')
        p++;
    if (p == digits || (*digits == '0' && p - digits > 1))
        return false;
    bool integral = true;
    if (p < t->end && *p == '.') {
        const char *f = ++p;
        while (p < t->end && *p >= '0' && *p <= '9')
            p++;
        if (p == f)
            return false;
        integral = false;
    }
    if (p < t->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < t->end && (*p == '+' || *p == '-'))
            p++;
        const char *x = p;
        while (p < t->end && *p >= '0' && *p <= '9')
            p++;
        if (p == x)
            return false;
        integral = false;
    }
    char buf[512];
    size_t len = (size_t)(p - t->in);
    if (len >= sizeof buf)
        return false;
    memcpy(buf, t->in, len);
    buf[len] = '\0';
    t->in = p;
    errno = 0;
    if (integral) {
        long long v = strtoll(buf, NULL, 10);
        n->i = v;
        n->kind = errno == ERANGE ? J_BIG : v >= INT32_MIN && v <= INT32_MAX ? J_INT : J_LONG;
        return true;
    }
    n->d = strtod(buf, NULL); /* overflow gives an infinity, as Java's parseDouble */
    n->kind = J_DOUBLE;
    return true;
}

static uint32_t parse_value(struct tree *t, int depth);

/* At an object's or array's start (past its opening): true, past @p close,
 * when it is empty. */
static bool container_empty(struct tree *t, char close)
{
    skip_ws(t);
    if (t->in < t->end && *t->in == close) {
        t->in++;
        return true;
    }
    return false;
}

/* After a member or element: 1 when another follows (past the comma), 0 at
 * the end (past @p close), -1 for anything else. */
static int container_next(struct tree *t, char close)
{
    skip_ws(t);
    if (t->in < t->end && *t->in == ',') {
        t->in++;
        return 1;
    }
    return t->in < t->end && *t->in++ == close ? 0 : -1;
}

/* A member's name and colon at t->in: into *key, *key_len. */
static bool member_name(struct tree *t, size_t *key, size_t *key_len)
{
    skip_ws(t);
    if (t->in >= t->end || *t->in++ != '"' || !parse_string(t, key, key_len))
        return false;
    skip_ws(t);
    return t->in < t->end && *t->in++ == ':';
}

/* Links member @p v (named at @p key) into object @p obj after *last; a name
 * given twice keeps its first place and its last value, as Jackson's
 * ObjectNode. */
static void link_member(struct tree *t, uint32_t obj, uint32_t v, size_t key, size_t key_len,
                        uint32_t *last)
{
    t->node[v].key = key;
    t->node[v].key_len = key_len;
    uint32_t prev = 0, same = t->node[obj].child;
    for (; same; prev = same, same = t->node[same].next)
        if (t->node[same].key_len == key_len &&
            !memcmp(t->text.buf + t->node[same].key, t->text.buf + key, key_len))
            break;
    if (same) {
        t->node[v].next = t->node[same].next;
        *(prev ? &t->node[prev].next : &t->node[obj].child) = v;
        *last = *last == same ? v : *last;
    } else {
        *(*last ? &t->node[*last].next : &t->node[obj].child) = v;
        *last = v;
    }
}

/* The members of an object or the elements of an array at t->in (past its
 * '{' or '[') under node @p c. */
static bool parse_container(struct tree *t, uint32_t c, int depth)
{
    bool object = t->node[c].kind == J_OBJECT;
    char close = object ? '}' : ']';
    uint32_t last = 0;
    if (container_empty(t, close))
        return true;
    int more = 1;
    for (; more > 0; more = container_next(t, close)) {
        size_t key = 0, key_len = 0;
        if (object && !member_name(t, &key, &key_len))
            return false;
        uint32_t v = parse_value(t, depth + 1);
        if (!v)
            return false;
        if (object) {
            link_member(t, c, v, key, key_len, &last);
        } else {
            *(last ? &t->node[last].next : &t->node[c].child) = v;
            last = v;
        }
    }
    return more == 0;
}

static bool literal(struct tree *t, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(t->end - t->in) < n || memcmp(t->in, word, n) != 0)
        return false;
    t->in += n;
    return true;
}

/* @return the node of the value at t->in, 0 if it is not JSON. */
static uint32_t parse_value(struct tree *t, int depth)
{
    skip_ws(t);
    uint32_t v = depth < JSON_MAX_DEPTH ? NEW(t, node) : 0;
    if (!v || t->in >= t->end)
        return 0;
    struct jnode tmp = { 0 };
    bool ok;
    switch (*t->in) {
    case '{':
    case '[':
        t->node[v].kind = *t->in++ == '{' ? J_OBJECT : J_ARRAY;
        return parse_container(t, v, depth) ? v : 0;
    case '"':
        t->in++;
        tmp.kind = J_STRING;
        ok = parse_string(t, &tmp.str, &tmp.str_len);
        break;
    case 't':
        tmp.kind = J_TRUE;
        ok = literal(t, "true");
        break;
    case 'f':
        tmp.kind = J_FALSE;
        ok = literal(t, "false");
        break;
    case 'n':
        tmp.kind = J_NULL;
        ok = literal(t, "null");
        break;
    default:
        ok = parse_number(t, &tmp);
    }
    t->node[v] = tmp;
    return ok ? v : 0;
}

/* ---- the schema the Event Router infers (JsonSchemaData) ------------------ */

/* Inference fails (the Event Router then keeps the payload as text): */
#define KEEP_TEXT (-1)

static bool same_schema(const struct tree *t, uint32_t a, uint32_t b)
{
    if (a == b)
        return true;
    if (!a || !b || t->schema[a].t != t->schema[b].t ||
        t->schema[a].required != t->schema[b].required)
        return false;
    if (t->schema[a].t == S_ARRAY)
        return same_schema(t, t->schema[a].elem, t->schema[b].elem);
    uint32_t fa = t->schema[a].field, fb = t->schema[b].field;
    for (; fa && fb; fa = t->field[fa].next, fb = t->field[fb].next)
        if (t->field[fa].key_len != t->field[fb].key_len ||
            memcmp(t->text.buf + t->field[fa].key, t->text.buf + t->field[fb].key,
                   t->field[fa].key_len) != 0 ||
            !same_schema(t, t->field[fa].schema, t->field[fb].schema))
            return false;
    return !fa && !fb;
}

/* Appends a field to struct schema @p s unless it has one of that name. */
static int add_field(struct tree *t, uint32_t s, size_t key, size_t key_len, uint32_t schema)
{
    uint32_t last = 0;
    for (uint32_t f = t->schema[s].field; f; f = t->field[f].next) {
        if (t->field[f].key_len == key_len &&
            !memcmp(t->text.buf + t->field[f].key, t->text.buf + key, key_len))
            return 0;
        last = f;
    }
    uint32_t f = NEW(t, field);
    if (!f)
        return -ENOMEM;
    t->field[f] = (struct jfield){ .schema = schema, .key = key, .key_len = key_len };
    *(last ? &t->field[last].next : &t->schema[s].field) = f;
    return 0;
}

static int infer(struct tree *t, uint32_t n, struct skey key, uint32_t *out);

/* The key of member @p name (@p name_len bytes in tree.text) under @p key:
 * "<key>.<name>", or the name alone under a null or blank key. */
static int child_key(struct tree *t, struct skey key, size_t name, size_t name_len,
                     struct skey *out)
{
    bool prefix = false;
    for (size_t i = 0; key.set && i < key.len; i++)
        prefix |= (unsigned char)t->text.buf[key.off + i] > ' ';
    size_t total = (prefix ? key.len + 1 : 0) + name_len, o = 0;
    char *tmp = malloc(total ? total : 1); /* tree.text may move as it grows */
    if (!tmp)
        return -ENOMEM;
    if (prefix) {
        memcpy(tmp, t->text.buf + key.off, key.len);
        o = key.len;
        tmp[o++] = '.';
    }
    memcpy(tmp + o, t->text.buf + name, name_len);
    *out = (struct skey){ .set = true, .off = t->text.len, .len = total };
    strbuf_add(&t->text, tmp, total);
    free(tmp);
    return t->text.oom ? -ENOMEM : 0;
}

static enum stype number_type(enum jkind k)
{
    return k == J_INT ? S_INT32 : k == J_LONG ? S_INT64 : S_FLOAT64;
}

static bool is_number(enum jkind k)
{
    return k == J_INT || k == J_LONG || k == J_BIG || k == J_DOUBLE;
}

static bool same_node_type(enum jkind a, enum jkind b)
{
    if (is_number(a) || is_number(b))
        return is_number(a) && is_number(b);
    if (a == J_TRUE || a == J_FALSE)
        return b == J_TRUE || b == J_FALSE;
    return a == b;
}

/* The elements' schema of non-empty array @p n: every non-null element of
 * the first one's type (numbers of one schema), the objects' schemas merged
 * in the order of the elements (the Event Router merges them in a hash
 * set's order, which only matters when two objects list new members in
 * different orders). */
static int infer_elements(struct tree *t, uint32_t n, struct skey key, uint32_t *out)
{
    uint32_t ref = 0;
    for (uint32_t e = t->node[n].child; e; e = t->node[e].next) {
        enum jkind k = t->node[e].kind;
        if (k == J_NULL)
            continue;
        if (!ref)
            ref = e;
        else if (!same_node_type(k, t->node[ref].kind) ||
                 (is_number(k) && number_type(k) != number_type(t->node[ref].kind)))
            return KEEP_TEXT;
    }
    if (!ref)
        return KEEP_TEXT;
    if (t->node[ref].kind != J_OBJECT) {
        int rc = infer(t, ref, (struct skey){ 0 }, out);
        return rc < 0 ? rc : *out ? 0 : KEEP_TEXT;
    }
    uint32_t merged = 0, first = 0;
    for (uint32_t e = t->node[n].child; e; e = t->node[e].next) {
        uint32_t s;
        int rc = t->node[e].kind == J_OBJECT ? infer(t, e, key, &s) : 1;
        if (rc < 0)
            return rc;
        if (rc > 0)
            continue;
        if (!merged) {
            merged = first = s;
            continue;
        }
        if (same_schema(t, s, first))
            continue;
        if (merged == first) {
            /* Connect's copy of a schema's basics leaves "optional" out: a
             * merged struct is required, and a null element fails the task. */
            if (!(merged = NEW(t, schema)))
                return -ENOMEM;
            t->schema[merged] = (struct jschema){ .t = S_STRUCT, .required = true,
                                                  .name = t->schema[first].name };
            for (uint32_t f = t->schema[first].field; f && !rc; f = t->field[f].next)
                rc = add_field(t, merged, t->field[f].key, t->field[f].key_len, t->field[f].schema);
        }
        for (uint32_t f = t->schema[s].field; f && !rc; f = t->field[f].next)
            rc = add_field(t, merged, t->field[f].key, t->field[f].key_len, t->field[f].schema);
        if (rc < 0)
            return rc;
    }
    *out = merged;
    return 0;
}

/* The schema of node @p n into *out, 0 when the Event Router leaves the
 * member out (null, an empty array). @return 0, KEEP_TEXT or -ENOMEM. */
static int infer(struct tree *t, uint32_t n, struct skey key, uint32_t *out)
{
    *out = 0;
    enum jkind k = t->node[n].kind;
    if (k == J_NULL || (k == J_ARRAY && !t->node[n].child))
        return 0;
    uint32_t s = NEW(t, schema);
    if (!s)
        return -ENOMEM;
    int rc = 0;
    if (k == J_STRING)
        t->schema[s].t = S_STRING;
    else if (k == J_TRUE || k == J_FALSE)
        t->schema[s].t = S_BOOL;
    else if (is_number(k))
        t->schema[s].t = number_type(k);
    else if (k == J_ARRAY) {
        t->schema[s].t = S_ARRAY;
        uint32_t elem = 0;
        rc = infer_elements(t, n, key, &elem);
        t->schema[s].elem = elem;
    } else {
        t->schema[s].t = S_STRUCT;
        t->schema[s].name = key;
        for (uint32_t m = t->node[n].child; m && !rc; m = t->node[m].next) {
            uint32_t ms;
            struct skey mk = { 0 };
            if (t->names)
                rc = child_key(t, key, t->node[m].key, t->node[m].key_len, &mk);
            if (!rc && !(rc = infer(t, m, mk, &ms)) && ms)
                rc = add_field(t, s, t->node[m].key, t->node[m].key_len, ms);
        }
    }
    *out = rc ? 0 : s;
    return rc;
}

/* ---- the value as JsonConverter writes the Struct ------------------------- */

static int value_fails(char *errbuf, size_t errlen, const char *what)
{
    return errbuf_fail(errbuf, errlen,
                       "the payload cannot be expanded as Debezium's Event Router does: %s "
                       "(Debezium's task fails on it)", what);
}

static int emit(struct tree *t, uint32_t n, uint32_t s, struct strbuf *out, char *errbuf,
                size_t errlen);

static int emit_struct(struct tree *t, uint32_t n, uint32_t s, struct strbuf *out, char *errbuf,
                       size_t errlen)
{
    strbuf_lit(out, "{");
    for (uint32_t f = t->schema[s].field; f; f = t->field[f].next) {
        if (f != t->schema[s].field)
            strbuf_lit(out, ",");
        connect_json_string(out, t->text.buf + t->field[f].key, t->field[f].key_len);
        strbuf_lit(out, ":");
        uint32_t m = t->node[n].child;
        while (m && (t->node[m].key_len != t->field[f].key_len ||
                     memcmp(t->text.buf + t->node[m].key, t->text.buf + t->field[f].key,
                            t->field[f].key_len) != 0))
            m = t->node[m].next;
        int rc = m ? emit(t, m, t->field[f].schema, out, errbuf, errlen) : 0;
        if (!m)
            strbuf_lit(out, "null");
        if (rc)
            return rc;
    }
    strbuf_lit(out, "}");
    return 0;
}

/* Node @p n written against schema @p s: a value of another type than the
 * schema's is what Struct.put refuses. */
static int emit(struct tree *t, uint32_t n, uint32_t s, struct strbuf *out, char *errbuf,
                size_t errlen)
{
    const struct jnode *v = &t->node[n];
    char num[32];
    if (v->kind == J_NULL) {
        if (s && t->schema[s].required)
            return value_fails(errbuf, errlen, "a null beside objects of different members "
                                               "in an array");
        strbuf_lit(out, "null");
        return 0;
    }
    if (v->kind == J_BIG)
        return value_fails(errbuf, errlen, "an integer beyond 64 bits");
    enum stype want = v->kind == J_STRING ? S_STRING
                      : v->kind == J_TRUE || v->kind == J_FALSE ? S_BOOL
                      : is_number(v->kind) ? number_type(v->kind)
                      : v->kind == J_ARRAY ? S_ARRAY : S_STRUCT;
    if (!s || t->schema[s].t != want)
        return value_fails(errbuf, errlen, "the objects of an array give a member two types");
    switch (want) {
    case S_STRING:
        connect_json_string(out, t->text.buf + v->str, v->str_len);
        return 0;
    case S_BOOL:
        strbuf_add(out, v->kind == J_TRUE ? "true" : "false", v->kind == J_TRUE ? 4 : 5);
        return 0;
    case S_INT32:
    case S_INT64:
        strbuf_add(out, num, (size_t)snprintf(num, sizeof num, "%" PRId64, v->i));
        return 0;
    case S_FLOAT64:
        connect_json_double(out, v->d);
        return 0;
    case S_ARRAY:
        strbuf_lit(out, "[");
        for (uint32_t e = v->child; e; e = t->node[e].next) {
            if (e != v->child)
                strbuf_lit(out, ",");
            int rc = emit(t, e, t->schema[s].elem, out, errbuf, errlen);
            if (rc)
                return rc;
        }
        strbuf_lit(out, "]");
        return 0;
    default:
        return emit_struct(t, n, s, out, errbuf, errlen);
    }
}

static void tree_free(struct tree *t)
{
    strbuf_free(&t->text);
    free(t->node);
    free(t->schema);
    free(t->field);
}

/* ---- the schema as JsonConverter writes it (schemas.enable = true) -------- */

static void emit_schema(const struct tree *t, uint32_t s, const struct skey *field,
                        struct strbuf *out)
{
    static const char *const type_names[] = { [S_BOOL] = "boolean", [S_INT32] = "int32",
                                              [S_INT64] = "int64", [S_FLOAT64] = "double",
                                              [S_STRING] = "string", [S_ARRAY] = "array",
                                              [S_STRUCT] = "struct" };
    const struct jschema *js = &t->schema[s];
    strbuf_lit(out, "{\"type\":");
    connect_json_string(out, type_names[js->t], strlen(type_names[js->t]));
    if (js->t == S_ARRAY) {
        strbuf_lit(out, ",\"items\":");
        emit_schema(t, js->elem, NULL, out);
    } else if (js->t == S_STRUCT) {
        strbuf_lit(out, ",\"fields\":[");
        for (uint32_t f = js->field; f; f = t->field[f].next) {
            if (f != js->field)
                strbuf_lit(out, ",");
            struct skey name = { .set = true, .off = t->field[f].key, .len = t->field[f].key_len };
            emit_schema(t, t->field[f].schema, &name, out);
        }
        strbuf_lit(out, "]");
    }
    if (js->required)
        strbuf_lit(out, ",\"optional\":false");
    else
        strbuf_lit(out, ",\"optional\":true");
    if (js->t == S_STRUCT && js->name.set) {
        strbuf_lit(out, ",\"name\":");
        connect_json_string(out, t->text.buf + js->name.off, js->name.len);
    }
    if (field) {
        strbuf_lit(out, ",\"field\":");
        connect_json_string(out, t->text.buf + field->off, field->len);
    }
    strbuf_lit(out, "}");
}

static void undo(struct strbuf *sb, size_t mark)
{
    if (!sb)
        return;
    sb->len = mark;
    if (sb->buf)
        sb->buf[mark] = '\0';
}

int connect_expand(struct strbuf *out, struct strbuf *schema_out, const char *root_name,
                   const char *json, size_t len, bool in_envelope, char *errbuf, size_t errlen)
{
    /* The Event Router parses only what starts with '{' or '[', and Jackson
     * reads the first value, whatever follows it. */
    if (len == 0 || (json[0] != '{' && json[0] != '['))
        return CONNECT_EXPAND_KEPT;
    struct tree t = { .in = json, .end = json + len, .names = schema_out != NULL };
    struct skey root_key = { .set = true, .off = 0, .len = strlen(root_name) };
    strbuf_add(&t.text, root_name, root_key.len);
    uint32_t root = parse_value(&t, 0), schema = 0;
    int rc = t.oom || t.text.oom ? -ENOMEM : !root ? KEEP_TEXT : infer(&t, root, root_key, &schema);
    bool no_schema = false;
    if (rc == 0 && t.node[root].kind == J_ARRAY) {
        /* The schema is an array's, the value cannot be a Struct: the task fails.
         * An empty array has no schema: the text is kept, without one, which
         * only an envelope, built on the payload's schema, cannot hold. */
        rc = schema || in_envelope ? value_fails(errbuf, errlen, "a top-level array") : KEEP_TEXT;
        no_schema = rc == KEEP_TEXT;
    }
    size_t mark = out->len, smark = schema_out ? schema_out->len : 0;
    if (rc == 0)
        rc = emit_struct(&t, root, schema, out, errbuf, errlen);
    if (rc == 0 && schema_out)
        emit_schema(&t, schema, NULL, schema_out);
    if (rc == 0 && (out->oom || (schema_out && schema_out->oom)))
        rc = -ENOMEM;
    if (rc != 0) {
        undo(out, mark);
        undo(schema_out, smark);
    }
    tree_free(&t);
    return rc == KEEP_TEXT ? (no_schema ? CONNECT_EXPAND_KEPT_NO_SCHEMA : CONNECT_EXPAND_KEPT)
           : rc < 0        ? rc
                           : CONNECT_EXPAND_DONE;
}
