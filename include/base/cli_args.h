/* cli_args.h — commands with words and flags of their own (`dead drop 7
 * --yes`, `verify --since 1h`, `migrate --print-sql`) take them out of argv
 * before getopt, which only knows the options of every command. */
#ifndef OUTBOX_CLI_ARGS_H
#define OUTBOX_CLI_ARGS_H

#include <getopt.h>

/** Moves the words that follow the command word in @p argv (when it is one
 *  of @p commands, NULL-terminated) to @p out, leaving in @p argv everything
 *  before it and, after it, the program's options that take a value (per
 *  @p shortopts and @p longopts, as given to getopt_long: -c FILE, -X kv,
 *  …) with their values; *@p argc is updated. Does nothing for another command.
 *  @return how many words went to @p out (at most @p max; further words
 *  stay in argv, where the command-line check reports them). */
int cli_take_args(int *argc, char **argv, const char *shortopts, const struct option *longopts,
                  const char *const *commands, char **out, int max);

/** Parses a whole decimal int64 >= @p min. @return 0 or -EINVAL. */
int cli_parse_int64(const char *s, long long min, long long *out);

#endif
