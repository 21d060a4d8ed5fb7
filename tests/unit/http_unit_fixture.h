/* http_unit_fixture.h — what the unit tests of the status endpoint share: a
 * configuration, the statistics it shows, the rendering context and its
 * output, reset around each test to a healthy leader. */
#ifndef OUTBOX_HTTP_UNIT_FIXTURE_H
#define OUTBOX_HTTP_UNIT_FIXTURE_H

#include <string.h>

#include "base/stats.h"
#include "base/strbuf.h"
#include "config/config.h"
#include "daemon/http_request.h"

static struct relay_config cfg;
static struct relay_stats st;
static struct http_context ctx;
static struct strbuf out;

static void setup(void)
{
    config_init(&cfg);
    stats_init(&st);
    /* A healthy leader unless a test says otherwise. */
    st.pg_up = true;
    st.role = STATS_ROLE_LEADER;
    st.brokers_up = 1;
    st.brokers_total = 1;
    ctx = (struct http_context){.cfg = &cfg, .stats = &st, .now = st.start_time + 5,
                                .mono_now = 1000};
    memset(&out, 0, sizeof(out));
}

static void teardown(void)
{
    config_free(&cfg);
    strbuf_free(&out);
}

#endif
