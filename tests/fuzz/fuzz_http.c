/* fuzz_http.c — libFuzzer target for the status endpoint's request layer:
 * arbitrary bytes, delivered in arbitrary pieces, through the parser, the
 * router and every response document, exactly as relay/daemon/http.c feeds them
 * from a socket. Run it with the command in docs/testing.md ("Fuzzing").
 *
 * Input layout: the first byte chooses the piece size (0 = all at once), so
 * the fuzzer also explores requests split at every possible place; the first
 * bytes of a varied stats snapshot come from the second byte. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "daemon/http_metrics.h"
#include "daemon/http_request.h"
#include "base/stats.h"
#include "base/strbuf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct relay_config cfg;
static int initialised;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!initialised) {
        config_init(&cfg);
        initialised = 1;
    }
    if (size < 2)
        return 0;
    size_t piece = data[0];
    uint8_t flags = data[1];
    data += 2;
    size -= 2;

    /* States the documents branch on: ready or not, backlog known, brokers. */
    struct relay_stats st;
    stats_init(&st);
    st.pg_up = flags & 1;
    st.role = (enum stats_role)((flags >> 1) % 3);
    st.brokers_up = (flags & 8) ? 1 : ((flags & 16) ? 0 : -1);
    st.brokers_total = 3;
    st.n_brokers = (flags & 8) ? 2 : 0;
    st.brokers[0] = (struct stats_broker){.id = 1, .name = "k1:9092", .state = "UP"};
    st.brokers[1] = (struct stats_broker){.id = 2, .name = "k2:9092", .state = "DOWN"};
    st.backlog_known = flags & 32;
    st.backlog_rows = 7;
    st.halted = flags & 64;
    st.last_batch_time = (flags & 128) ? st.start_time : 0;
    struct http_server_stats srv = {0};
    struct http_context ctx = {.cfg = &cfg, .stats = &st, .server = &srv, .now = st.start_time + 1};

    struct http_request req;
    http_request_init(&req);
    enum http_req_state s = HTTP_REQ_MORE;
    for (size_t off = 0; off < size && s == HTTP_REQ_MORE;) {
        size_t n = piece && piece < size - off ? piece : size - off;
        s = http_request_feed(&req, (const char *)data + off, n);
        off += n;
    }
    if (s != HTTP_REQ_MORE) {
        struct strbuf out = {0};
        int status = http_respond(&req, &ctx, &out);
        /* Whatever came in, what goes out is a well-formed response head. */
        if (status < 200 || status > 599 || out.len < 17 || memcmp(out.buf, "HTTP/1.1 ", 9) != 0 ||
            !strstr(out.buf, "\r\n\r\n"))
            abort();
        strbuf_free(&out);
    }
    http_request_free(&req);
    return 0;
}
