#!/usr/bin/env python3
"""Writes a recording of N calls (default 1,000,000) for `sluice replay`'s benchmark
(benchmarks/bench, BENCHMARKS.md "Record and replay"): an hour of calls from 10,000 addresses of
domain edge_proxy, a few far busier than the rest (weights 1/rank), each with decisions as
the server would have recorded them (every call OK: the replay decides them again)."""

import json
import random
import sys


def main():
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    random.seed(7)
    start_us, span_us = 1_796_155_200_000_000, 3_600_000_000
    weights = [1.0 / (rank + 1) for rank in range(10_000)]
    clients = random.choices(range(10_000), weights=weights, k=calls)
    out = sys.stdout
    out.write(json.dumps({"sluice_recording": 1}) + "\n")
    line = ('{"t":%d,"domain":"edge_proxy","descriptors":[{"entries":[["remote_address",'
            '"10.%d.%d.%d"]]}],"code":"OK","statuses":[{"code":"OK","limit":"","remaining":99}]}\n')
    for index, client in enumerate(clients):
        t = start_us + index * span_us // calls
        out.write(line % (t, client // 65536, (client // 256) % 256, client % 256))


if __name__ == "__main__":
    main()
