/* cli_args.c — taking a command's own words out of argv (see cli_args.h). */
#include "base/cli_args.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* How many words at @p argv[i] are one of the program's options that take a
 * value (-c FILE, -cFILE, --config FILE, --config=FILE and getopt_long's
 * abbreviations, per @p shortopts/@p longopts): 0 if argv[i] is not one. */
static int option_words(char **argv, int i, int argc, const char *shortopts,
                        const struct option *longopts)
{
    const char *w = argv[i];
    int with_next = i + 1 < argc ? 2 : 1;
    if (w[0] != '-' || w[1] == '\0')
        return 0;
    if (w[1] == '-') {
        const char *name = w + 2;
        const char *eq = strchr(name, '=');
        size_t n = eq ? (size_t)(eq - name) : strlen(name);
        if (n == 0)
            return 0;
        for (const struct option *o = longopts; o && o->name; o++) {
            if (strncmp(o->name, name, n) == 0 && o->has_arg == required_argument)
                return eq ? 1 : with_next;
        }
        return 0;
    }
    /* A cluster of short options: one that takes a value takes the rest of
     * the word, or the next word when it comes last (getopt's rule). */
    for (const char *p = w + 1; *p; p++) {
        const char *spec = *p != ':' ? strchr(shortopts, *p) : NULL;
        if (!spec)
            return 0;
        if (spec[1] == ':')
            return p[1] ? 1 : with_next;
    }
    return 0;
}

int cli_take_args(int *argc, char **argv, const char *shortopts, const struct option *longopts,
                  const char *const *commands, char **out, int max)
{
    int n = *argc, cmd = -1;
    for (int i = 1; i < n; i++) {
        if (strcmp(argv[i], "--") == 0) {
            cmd = i + 1 < n ? i + 1 : -1;
            break;
        }
        int k = option_words(argv, i, n, shortopts, longopts);
        if (k > 0) {
            i += k - 1;
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1] != '\0')
            continue; /* a flag, or a mistake getopt reports */
        cmd = i;
        break;
    }
    bool known = false;
    for (const char *const *c = commands; cmd >= 0 && *c; c++)
        known |= strcmp(argv[cmd], *c) == 0;
    if (!known)
        return 0;

    int kept = cmd + 1, taken = 0;
    bool operands_only = false;
    for (int i = cmd + 1; i < n; i++) {
        int k = operands_only ? 0 : option_words(argv, i, n, shortopts, longopts);
        if (k > 0) {
            for (int j = 0; j < k; j++)
                argv[kept++] = argv[i + j];
            i += k - 1;
            continue;
        }
        if (taken == max) {
            argv[kept++] = argv[i];
            continue;
        }
        if (strcmp(argv[i], "--") == 0)
            operands_only = true;
        out[taken++] = argv[i];
    }
    argv[kept] = NULL;
    *argc = kept;
    return taken;
}


int cli_parse_int64(const char *s, long long min, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min)
        return -EINVAL;
    *out = v;
    return 0;
}
