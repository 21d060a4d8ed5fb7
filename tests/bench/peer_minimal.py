#!/usr/bin/python3
"""peer_minimal.py - the outbox relay a careful engineer writes in an afternoon.

One loop, one transaction per batch: claim the oldest unsent rows
(FOR UPDATE SKIP LOCKED), produce them with the idempotent producer (acks=all,
linger 5 ms, lz4), two headers (event id, event type), flush, mark the
acknowledged rows with the conditional UPDATE, commit. Exits when a claim
finds nothing. Prints one JSON line: rows marked, rows failed, seconds.

With --on-sent delete it deletes the acknowledged rows instead of marking
them, as its author would if sent rows are of no further use; the rest of
the loop is the same. Its JSON line then counts rows deleted.

    peer_minimal.py CONNINFO BOOTSTRAP_SERVERS TABLE [BATCH] [--on-sent mark|delete]
"""
import argparse
import json
import sys
import time

import psycopg2
from confluent_kafka import Producer


def main():
    ap = argparse.ArgumentParser(prog="peer_minimal.py")
    ap.add_argument("conninfo")
    ap.add_argument("servers")
    ap.add_argument("table")
    ap.add_argument("batch", nargs="?", type=int, default=1000)
    ap.add_argument("--on-sent", choices=("mark", "delete"), default="mark")
    args = ap.parse_args()
    conninfo, servers, table, batch = args.conninfo, args.servers, args.table, args.batch
    if not table.replace("_", "").isalnum():
        sys.exit("peer_minimal.py: table must be a plain identifier")
    q = '"public"."%s"' % table
    claim = ("SELECT id, event_id::text, aggregate_type, aggregate_id, event_type, payload::text "
             "FROM %s WHERE sent_at IS NULL AND dead_at IS NULL "
             "ORDER BY id LIMIT %%s FOR UPDATE SKIP LOCKED" % q)
    if args.on_sent == "delete":
        done_sql = "DELETE FROM %s WHERE id = ANY(%%s)" % q
    else:
        done_sql = "UPDATE %s SET sent_at = now() WHERE id = ANY(%%s) AND sent_at IS NULL" % q

    failed_ids = []

    def on_delivery(err, msg):
        if err is not None:
            failed_ids.append(msg.headers()[0][1].decode())

    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "compression.type": "lz4", "on_delivery": on_delivery})
    db = psycopg2.connect(conninfo, application_name="bench-peer-minimal" +
                          ("-delete" if args.on_sent == "delete" else ""))
    t0 = time.monotonic()
    done = failed = 0
    while True:
        with db.cursor() as cur:
            cur.execute(claim, (batch,))
            rows = cur.fetchall()
            if not rows:
                db.commit()
                break
            for rid, event_id, agg_type, agg_id, event_type, payload in rows:
                producer.produce("%s.%s" % (table, agg_type), key=agg_id, value=payload,
                                 headers=[("event_id", event_id), ("event_type", event_type)])
            producer.flush()
            bad = set(failed_ids)
            failed_ids.clear()
            acked = [r[0] for r in rows if r[1] not in bad]
            failed += len(rows) - len(acked)
            if acked:
                cur.execute(done_sql, (acked,))
                done += cur.rowcount
        db.commit()
    print(json.dumps({"deleted" if args.on_sent == "delete" else "marked": done, "failed": failed,
                      "seconds": round(time.monotonic() - t0, 3)}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
