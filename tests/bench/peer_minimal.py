#!/usr/bin/python3
"""peer_minimal.py - the outbox relay a careful engineer writes in an afternoon.

One loop, one transaction per batch: claim the oldest unsent rows
(FOR UPDATE SKIP LOCKED), produce them with the idempotent producer (acks=all,
linger 5 ms, lz4), two headers (event id, event type), flush, mark the
acknowledged rows with the conditional UPDATE, commit. Exits when a claim
finds nothing. Prints one JSON line: rows marked, rows failed, seconds.

    peer_minimal.py CONNINFO BOOTSTRAP_SERVERS TABLE [BATCH]
"""
import json
import sys
import time

import psycopg2
from confluent_kafka import Producer


def main():
    conninfo, servers, table = sys.argv[1:4]
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    if not table.replace("_", "").isalnum():
        sys.exit("peer_minimal.py: table must be a plain identifier")
    q = '"public"."%s"' % table
    claim = ("SELECT id, event_id::text, aggregate_type, aggregate_id, event_type, payload::text "
             "FROM %s WHERE sent_at IS NULL AND dead_at IS NULL "
             "ORDER BY id LIMIT %%s FOR UPDATE SKIP LOCKED" % q)
    mark = "UPDATE %s SET sent_at = now() WHERE id = ANY(%%s) AND sent_at IS NULL" % q

    failed_ids = []

    def on_delivery(err, msg):
        if err is not None:
            failed_ids.append(msg.headers()[0][1].decode())

    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "compression.type": "lz4", "on_delivery": on_delivery})
    db = psycopg2.connect(conninfo, application_name="bench-peer-minimal")
    t0 = time.monotonic()
    marked = failed = 0
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
                cur.execute(mark, (acked,))
                marked += cur.rowcount
        db.commit()
    print(json.dumps({"marked": marked, "failed": failed,
                      "seconds": round(time.monotonic() - t0, 3)}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
