/* config_fixture.h — what the configuration's unit tests share: a fresh
 * configuration per test, a temporary file to load, and readers of the
 * result. Static: each test file is its own program. */
#ifndef OUTBOX_TEST_CONFIG_FIXTURE_H
#define OUTBOX_TEST_CONFIG_FIXTURE_H

#include <criterion/criterion.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "base/log.h"

static struct relay_config cfg;
static char err[1024];
static char path[64];

static void setup(void)
{
    config_init(&cfg);
    err[0] = '\0';
    path[0] = '\0';
}

static void teardown(void)
{
    config_free(&cfg);
    if (path[0])
        unlink(path);
}

TestSuite(config, .init = setup, .fini = teardown);

/* Writes @p text to a fresh temporary file whose name is left in path. */
__attribute__((unused)) static void write_file(const char *text)
{
    if (path[0]) /* a test that writes twice: teardown removes only the last */
        unlink(path);
    strcpy(path, "/tmp/outbox-relay-test-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

__attribute__((unused)) static int load_text(const char *text, char *const *ov, size_t n_ov)
{
    write_file(text);
    return config_load(&cfg, path, true, ov, n_ov, err, sizeof err);
}

__attribute__((unused)) static int load_override(const char *ov)
{
    char *const ovs[] = {(char *)ov};
    return config_load(&cfg, NULL, false, ovs, 1, err, sizeof err);
}

__attribute__((unused)) static const char *kafka_get(const char *key)
{
    for (size_t i = 0; i < cfg.n_kafka; i++) {
        if (!strcmp(cfg.kafka[i].key, key))
            return cfg.kafka[i].value;
    }
    return NULL;
}

#define assert_err_has(s) cr_assert_not_null(strstr(err, s), "error \"%s\" lacks \"%s\"", err, s)

/* Captures config_dump() output; the caller frees it. */
__attribute__((unused)) static char *dump(const struct relay_config *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_not_null(f);
    config_dump(c, f);
    fclose(f);
    return buf;
}

#endif
