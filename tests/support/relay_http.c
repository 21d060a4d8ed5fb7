/* relay_http.c — a running relay's status endpoint from the tests: its port
 * from the log, GET with curl, readiness polled (see testlib.h). */
#include "testlib.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

int e2e_relay_http_port(struct e2e_relay *r, int timeout_ms)
{
    static const char needle[] = "msg=\"status endpoint listening\" address=";
    int64_t deadline = e2e_now_ms() + timeout_ms;
    for (;;) {
        char *log = tl_read_file(r->log_path, NULL);
        const char *at = log ? strstr(log, needle) : NULL;
        if (!at && log) /* the JSON log format */
            at = strstr(log, "\"msg\":\"status endpoint listening\",\"address\":\"");
        if (at) {
            const char *eol = strchr(at, '\n');
            const char *colon = NULL;
            for (const char *p = at; p < (eol ? eol : at + strlen(at)); p++)
                if (*p == ':' && p[1] >= '0' && p[1] <= '9')
                    colon = p;
            int port = colon ? atoi(colon + 1) : -1;
            free(log);
            return port;
        }
        free(log);
        if (!e2e_relay_alive(r) || e2e_now_ms() >= deadline)
            return -1;
        e2e_sleep_ms(50);
    }
}

int e2e_relay_http_get(struct e2e_relay *r, const char *path, char **body)
{
    int port = e2e_relay_http_port(r, 20000);
    cr_assert(port > 0, "no status endpoint port in %s", r->log_path);
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    const char *argv[] = {"/usr/bin/curl", "-s", "-m", "10", "-w", "\n%{http_code}", url, NULL};
    char *out = NULL;
    int rc = e2e_run_cmd(argv, 15000, &out, NULL);
    int code = -1;
    if (rc == 0 && out) {
        char *nl = strrchr(out, '\n');
        if (nl) {
            code = atoi(nl + 1);
            *nl = '\0';
        }
    }
    *body = out ? out : strdup("");
    return code;
}

void e2e_assert_readyz(struct e2e_relay *r, int code, const char *needle)
{
    int64_t deadline = e2e_now_ms() + 20000;
    char *body = NULL;
    int got;
    for (;;) {
        free(body);
        got = e2e_relay_http_get(r, "/readyz?verbose", &body);
        if ((got == code && (!needle || strstr(body, needle))) || e2e_now_ms() >= deadline)
            break;
        e2e_sleep_ms(200);
    }
    cr_assert_eq(got, code, "/readyz answered %d, expected %d:\n%s", got, code, body);
    cr_assert(!needle || strstr(body, needle), "/readyz lacks \"%s\":\n%s", needle, body);
    free(body);
}
