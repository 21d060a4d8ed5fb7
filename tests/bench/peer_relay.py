#!/usr/bin/python3
"""peer_relay.py - the benchmark's peer: the outbox relay one writes by hand.

Strictly sequential, one transaction per batch: claim the oldest unsent rows
(FOR UPDATE SKIP LOCKED), produce them all, flush, mark the acknowledged ones
with the same conditional UPDATE as outbox-relay, commit. Same messages as the
relay (key, value, timestamp, the six headers, then the row's own), same
producer settings where they matter (idempotent, acks=all, linger 0, Nagle
off, murmur2 partitioner), so the comparison is about the relay's design, not
its configuration. Exits when a claim finds nothing.

    peer_relay.py CONNINFO BOOTSTRAP_SERVERS TABLE [BATCH]

Debian's python3-psycopg2 and python3-confluent-kafka (tests/support/deps.sh).
Prints one JSON line: rows marked, rows failed, seconds.
"""
import json
import sys
import time

import psycopg2
from confluent_kafka import Producer


def main():
    conninfo, servers, table = sys.argv[1:4]
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    t0 = time.monotonic()
    # Plain identifiers only (the bench names its tables), always quoted.
    if not table.replace("_", "").isalnum():
        sys.exit("peer_relay.py: table must be a plain identifier")
    q = '"public"."%s"' % table
    claim = (
        "SELECT id, event_id::text, aggregate_type, aggregate_id, event_type, topic, "
        "payload::text, headers::text, "
        "floor(extract(epoch FROM created_at) * 1000)::bigint, "
        "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') "
        "FROM %s WHERE sent_at IS NULL AND dead_at IS NULL "
        "ORDER BY id LIMIT %%s FOR UPDATE SKIP LOCKED" % q
    )
    mark = "UPDATE %s SET sent_at = clock_timestamp() WHERE id = ANY(%%s) AND sent_at IS NULL" % q

    db = psycopg2.connect(conninfo, application_name="bench-peer")
    producer = Producer({
        "bootstrap.servers": servers,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 0,
        "socket.nagle.disable": True,
        "partitioner": "murmur2_random",
        "client.id": "bench-peer",
    })
    marked = failed = 0
    while True:
        with db.cursor() as cur:
            cur.execute(claim, (batch,))
            rows = cur.fetchall()
            if not rows:
                db.commit()
                break
            acked = []

            def report(err, msg, row_id=None):
                if err is None:
                    acked.append(row_id)

            for (rid, event_id, agg_type, agg_id, event_type, topic, payload, headers,
                 ms, created) in rows:
                hdrs = [("event_id", event_id), ("event_type", event_type),
                        ("aggregate_type", agg_type), ("aggregate_id", agg_id),
                        ("outbox_id", str(rid)), ("created_at", created)]
                if headers:
                    hdrs += [(k, v) for k, v in json.loads(headers).items() if isinstance(v, str)]
                producer.produce(topic or "%s.%s" % (table, agg_type), key=agg_id,
                                 value=payload, headers=hdrs, timestamp=ms,
                                 on_delivery=lambda e, m, rid=rid: report(e, m, rid))
            producer.flush()
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
