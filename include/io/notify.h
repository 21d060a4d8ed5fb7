/* notify.h — the systemd notification protocol (sd_notify(3)) spoken
 * directly over $NOTIFY_SOCKET, so the relay needs no libsystemd. Every call
 * is a no-op when the relay does not run under systemd's Type=notify. */
#ifndef OUTBOX_NOTIFY_H
#define OUTBOX_NOTIFY_H

#include <stdint.h>

/** Sends one datagram of newline-separated assignments ("READY=1\nSTATUS=…").
 *  @return 0, or a negative errno (logged by nobody: notifications are best effort). */
int notify_send(const char *state);

/** @return the watchdog interval in microseconds from $WATCHDOG_USEC (when
 *  $WATCHDOG_PID is absent or ours), or 0 when no watchdog is expected. */
uint64_t notify_watchdog_usec(void);

#endif
