/* http_status.h — /status: what the relay knows about itself as one JSON
 * document (read by `outbox-relay status` and by people). */
#ifndef OUTBOX_HTTP_STATUS_H
#define OUTBOX_HTTP_STATUS_H

#include "daemon/http_context.h"
#include "base/strbuf.h"

/** Appends the /status document, pretty-printed, with a final newline, to @p out.
 *  @return 0, or -ENOMEM (then nothing was appended). */
int http_status_render(const struct http_context *ctx, struct strbuf *out);

#endif
