"""Child process of test_pooled_connections: its own Spark session runs lookup_join jobs against the
servers given in argv (JSON), stops the session, and reports the servers' connection counts (JSON on
the last line of stdout): after every job, and after the session stopped."""

from __future__ import annotations

import json
import sys

import aiospark
from aiospark.connectors import HttpLookup, PostgresLookup, RedisLookup
from tests.connectors._connections import postgres_clients, python_workers, redis_clients, tcp_established, wait_until


def main() -> None:
    cfg = json.loads(sys.argv[1])
    spark = aiospark.local_session("local[2]")
    pgs = PostgresLookup("dim", "id", "name STRING", dsn=cfg["pg_dsn"], pool_size=2)
    redis = RedisLookup("dim:{id}", "tier INT", url=cfg["redis_url"], password=cfg["redis_pw"], max_connections=2)
    http = HttpLookup(cfg["http_base"] + "/item/{id}", "price DOUBLE", max_connections=2)

    def count():
        return {"pg": postgres_clients(cfg["pg_dsn"]), "redis": redis_clients(cfg["redis_port"], cfg["redis_pw"]),
                "http": tcp_established(cfg["http_port"]), "workers": python_workers()}

    after_jobs = []
    for _ in range(cfg["jobs"]):
        df = spark.range(0, 200, 1, 4).selectExpr("CAST(id % 20 AS INT) AS id")
        out = aiospark.lookup_join(df, pgs, on="id")
        out = aiospark.lookup_join(out, redis, on="id")
        out = aiospark.lookup_join(out, http, on="id")
        assert out.count() == 200
        after_jobs.append(count())
    spark.stop()
    after_stop = wait_until(count, lambda c: all(c[k] <= cfg["before"][k] for k in ("pg", "redis", "http")))
    print(json.dumps({"after_jobs": after_jobs, "after_stop": after_stop}))


if __name__ == "__main__":
    main()
