#!/usr/bin/python3
"""peer_same.py - a hand-written relay that sends exactly outbox-relay's messages.

The loop of peer_minimal.py (claim FOR UPDATE SKIP LOCKED, produce with the
idempotent producer at linger 5 ms and lz4, flush, conditional UPDATE, commit),
with outbox-relay's message: topic = the row's or "<table>.<aggregate_type>",
key = aggregate_id, value = payload, timestamp = created_at, headers event_id,
event_type, aggregate_type, aggregate_id, outbox_id, created_at (RFC 3339 UTC,
microseconds), then the row's own string headers. The per-row work is done
cheaply: created_at is read as epoch microseconds and formatted here, headers
are parsed only when a row has them, and one delivery callback serves all.

    peer_same.py CONNINFO BOOTSTRAP_SERVERS TABLE [BATCH]
"""
import json
import sys
import time
from datetime import datetime, timezone

import psycopg2
from confluent_kafka import Producer


def rfc3339(us):
    s, frac = divmod(us, 1000000)
    return datetime.fromtimestamp(s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + ".%06dZ" % frac


def main():
    conninfo, servers, table = sys.argv[1:4]
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    if not table.replace("_", "").isalnum():
        sys.exit("peer_same.py: table must be a plain identifier")
    q = '"public"."%s"' % table
    claim = ("SELECT id, event_id::text, aggregate_type, aggregate_id, event_type, topic, "
             "payload::text, headers::text, "
             "(extract(epoch FROM created_at) * 1000000)::bigint "
             "FROM %s WHERE sent_at IS NULL AND dead_at IS NULL "
             "ORDER BY id LIMIT %%s FOR UPDATE SKIP LOCKED" % q)
    mark = "UPDATE %s SET sent_at = now() WHERE id = ANY(%%s) AND sent_at IS NULL" % q

    failed_ids = []

    def on_delivery(err, msg):
        if err is not None:
            failed_ids.append(int(msg.headers()[4][1]))

    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "compression.type": "lz4", "on_delivery": on_delivery})
    db = psycopg2.connect(conninfo, application_name="bench-peer-same")
    t0 = time.monotonic()
    marked = failed = 0
    while True:
        with db.cursor() as cur:
            cur.execute(claim, (batch,))
            rows = cur.fetchall()
            if not rows:
                db.commit()
                break
            for rid, event_id, agg_type, agg_id, event_type, topic, payload, headers, us in rows:
                hdrs = [("event_id", event_id), ("event_type", event_type),
                        ("aggregate_type", agg_type), ("aggregate_id", agg_id),
                        ("outbox_id", str(rid)), ("created_at", rfc3339(us))]
                if headers:
                    hdrs += [(k, v) for k, v in json.loads(headers).items() if isinstance(v, str)]
                producer.produce(topic or "%s.%s" % (table, agg_type), key=agg_id, value=payload,
                                 headers=hdrs, timestamp=us // 1000)
            producer.flush()
            bad = set(failed_ids)
            failed_ids.clear()
            acked = [r[0] for r in rows if r[0] not in bad]
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
