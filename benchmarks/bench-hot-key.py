#!/usr/bin/env python3
"""One hot key on one Redis, each server with 1 and 2 replicas (sluice also 4), side by side
(BENCHMARKS.md, "What does a hot key cost Redis?").

    benchmarks/bench-hot-key.py [--rounds 3] [--seconds 5]
    REFERENCE_BIN=/path/to/ratelimit LIMITADOR_BIN=/path/to/limitador-server benchmarks/bench-hot-key.py
    benchmarks/bench-hot-key.py --outage     (calls while Redis is stopped, with and without
                                              the circuit breaker)

Runs sluice from target/dist (`cargo build --profile dist` first); envoyproxy/ratelimit and
Limitador only when their binaries are given (built from their sources, outside this
repository). For each row and replica count it prints:

- a throughput run: h2load, 8 connections x 32 streams split over the replicas, on a key whose
  limit no call reaches: calls/s, server CPU per call (every replica's user + system time over
  the calls), Redis CPU per call, and Redis commands per call (INFO commandstats);
- a latency run: sluice-load, 1 x 32 per replica on the same key: the decision p99;
- an accuracy run: sluice-load, 2 x 16 per replica, on a key limited to 2,000 a minute for 3
  s inside one minute: the calls admitted across the replicas, against the limit.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import peers
from peers import DIST, cpu_seconds, free_port, wait_port

REDIS_PORT = 7795
CAPPED = 2000

SLUICE_CONFIG = """domain: hot
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 100000000%(lease_k)s}
  - key: capped
    rate_limit: {unit: minute, requests_per_unit: %(capped)d%(lease_capped)s}
"""

LIMITADOR_LIMITS = """- namespace: hot
  max_value: 100000000
  seconds: 3600
  conditions: []
  variables: ["%(k)s"]
- namespace: hot
  max_value: %(capped)d
  seconds: 60
  conditions: []
  variables: ["%(capped_var)s"]
"""


def redis_commands():
    return peers.redis_commands(REDIS_PORT)


def redis_cli(*args):
    return peers.redis_cli(REDIS_PORT, *args)


def sluice_row(name, store, leased):
    config = SLUICE_CONFIG % {
        "capped": CAPPED,
        "lease_k": ", budget_leasing: {max_chunk: 1000}" if leased else "",
        "lease_capped": ", budget_leasing: {max_chunk: 50}" if leased else "",
    }
    return peers.sluice_row(name, config, REDIS_PORT if store == "redis" else None)


def reference_row(name, binary, window):
    config = SLUICE_CONFIG % {"capped": CAPPED, "lease_k": "", "lease_capped": ""}
    return peers.reference_row(name, binary, config, REDIS_PORT, window)


def limitador_row(name, binary, mode):
    def limits(cel):
        return LIMITADOR_LIMITS % {
            "capped": CAPPED,
            "k": "descriptors[0].k" if cel else "k",
            "capped_var": "descriptors[0].capped" if cel else "capped",
        }
    return peers.limitador_row(name, binary, limits, [mode, f"redis://127.0.0.1:{REDIS_PORT}"])


def h2load(ports, seconds, body):
    """8 x 32 split over `ports`, for `seconds`; the calls answered."""
    return peers.h2load(ports, body, seconds=seconds)


def throughput(replicas, seconds, body):
    pids = [p.pid for p, _ in replicas]
    redis_pid = int(redis_cli("INFO", "server").split("process_id:")[1].split()[0])
    commands_before = redis_commands()
    cpu_before = sum(cpu_seconds(pid) for pid in pids)
    redis_before = cpu_seconds(redis_pid)
    started = time.time()
    calls = h2load([port for _, port in replicas], seconds, body)
    elapsed = time.time() - started
    cpu = sum(cpu_seconds(pid) for pid in pids) - cpu_before
    redis = cpu_seconds(redis_pid) - redis_before
    commands = redis_commands() - commands_before
    return {
        "calls_per_second": calls / elapsed,
        "server_cpu_us_per_call": cpu / max(calls, 1) * 1e6,
        "redis_cpu_us_per_call": redis / max(calls, 1) * 1e6,
        "redis_commands_per_call": commands / max(calls, 1),
    }


def decision_p99(replicas):
    """sluice-load's p99 on `k`, 1 x 32 per replica for 3 s (the worst replica's)."""
    runs = [subprocess.Popen(
        [os.path.join(DIST, "sluice-load"), "--target", f"127.0.0.1:{port}", "--connections", "1",
         "--in-flight", "32", "--duration", "3s", "--domain", "hot", "--key", "k", "--keys", "1",
         "--json"], stdout=subprocess.PIPE, text=True) for _, port in replicas]
    return max(json.loads(run.communicate()[0])["p99_us"] for run in runs)


def admitted_in_a_window(replicas):
    """sluice-load on `capped` over every replica for 3 s inside one minute."""
    left = 60 - time.time() % 60
    if left < 8:
        time.sleep(left + 1)
    runs = [subprocess.Popen(
        [os.path.join(DIST, "sluice-load"), "--target", f"127.0.0.1:{port}", "--connections", "2",
         "--in-flight", "16", "--duration", "3s", "--domain", "hot", "--key", "capped",
         "--keys", "1", "--json"], stdout=subprocess.PIPE, text=True) for _, port in replicas]
    admitted = calls = 0
    for run in runs:
        report = json.loads(run.communicate()[0])
        admitted += report["ok"]
        calls += report["calls"]
    return admitted, calls


def run_row(row, count, args, body):
    subprocess.run(["redis-cli", "-p", str(REDIS_PORT), "FLUSHALL"], capture_output=True)
    with tempfile.TemporaryDirectory() as workdir:
        replicas = []
        try:
            for index in range(count):
                port = free_port()
                replica_dir = os.path.join(workdir, str(index))
                os.makedirs(replica_dir)
                replicas.append((row.start(port, replica_dir), port))
            for _, port in replicas:
                wait_port(port)
            time.sleep(1)
            h2load([port for _, port in replicas], 1, body)  # warm up
            rounds = [throughput(replicas, args.seconds, body) for _ in range(args.rounds)]
            p99 = decision_p99(replicas)
            admitted, calls = admitted_in_a_window(replicas)
        finally:
            for process, _ in replicas:
                process.terminate()
            for process, _ in replicas:
                process.wait()
    median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    print(json.dumps({
        "row": row.name, "replicas": count,
        "calls_per_second": [round(r["calls_per_second"]) for r in rounds],
        "server_cpu_us_per_call": round(median["server_cpu_us_per_call"], 1),
        "redis_cpu_us_per_call": round(median["redis_cpu_us_per_call"], 2),
        "redis_commands_per_call": round(median["redis_commands_per_call"], 4),
        "p99_us": p99, "admitted_of_2000": admitted, "calls_in_the_window": calls,
    }), flush=True)


def outage(args):
    """Redis stopped (SIGSTOP) under a moderate closed loop (1 connection, 4 calls in flight):
    each call's latency while Redis answers, then while it answers nothing, with and without
    the circuit breaker."""
    redis = subprocess.Popen(["redis-server", "--port", str(REDIS_PORT), "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL)
    fields = ("calls_per_second", "ok", "errors", "p50_us", "p99_us", "max_us")
    try:
        wait_port(REDIS_PORT)
        for name, extra in [
            ("without the breaker (--failure-mode allow)", ["--failure-mode", "allow"]),
            ("with the breaker, local share", ["--store-circuit-failures", "5",
                                               "--failure-mode", "local-share"]),
        ]:
            with tempfile.TemporaryDirectory() as workdir:
                os.makedirs(os.path.join(workdir, "config"))
                with open(os.path.join(workdir, "config", "hot.yaml"), "w") as f:
                    f.write(SLUICE_CONFIG % {"capped": CAPPED, "lease_k": "", "lease_capped": ""})
                port = free_port()
                server = subprocess.Popen(
                    [os.path.join(DIST, "sluice"), "--config", os.path.join(workdir, "config"),
                     "--grpc-addr", f"127.0.0.1:{port}", "--http-addr", f"127.0.0.1:{free_port()}",
                     "--store", "redis", "--redis-url", f"redis://127.0.0.1:{REDIS_PORT}",
                     "--redis-command-timeout", "500ms", *extra],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                load = [os.path.join(DIST, "sluice-load"), "--target", f"127.0.0.1:{port}",
                        "--connections", "1", "--in-flight", "4", "--domain", "hot",
                        "--key", "k", "--keys", "1", "--json"]

                def measure(state):
                    report = json.loads(subprocess.run(
                        load + ["--duration", f"{args.seconds}s"], capture_output=True,
                        text=True).stdout)
                    print(json.dumps({"row": name, "redis": state,
                                      **{k: report[k] for k in fields}}), flush=True)
                try:
                    wait_port(port)
                    time.sleep(1)
                    measure("answering")
                    os.kill(redis.pid, 19)  # SIGSTOP
                    subprocess.run(load + ["--duration", "2s"], capture_output=True)  # opens it
                    measure("stopped")
                finally:
                    os.kill(redis.pid, 18)  # SIGCONT
                    server.terminate()
                    server.wait()
    finally:
        redis.terminate()
        redis.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--only", help="rows whose name contains this")
    parser.add_argument("--outage", action="store_true",
                        help="instead: calls while Redis is stopped, with and without the breaker")
    args = parser.parse_args()
    if args.outage:
        return outage(args)
    body = peers.request_body("hot", "k=hot")
    rows = [
        sluice_row("sluice, memory store", "memory", False),
        sluice_row("sluice, Redis", "redis", False),
        sluice_row("sluice, Redis, budget_leasing", "redis", True),
    ]
    if os.environ.get("REFERENCE_BIN"):
        rows.append(reference_row("envoyproxy/ratelimit, Redis", os.environ["REFERENCE_BIN"], False))
        rows.append(reference_row("envoyproxy/ratelimit, Redis, 150us window",
                                  os.environ["REFERENCE_BIN"], True))
    if os.environ.get("LIMITADOR_BIN"):
        rows.append(limitador_row("Limitador, redis", os.environ["LIMITADOR_BIN"], "redis"))
        rows.append(limitador_row("Limitador, redis_cached", os.environ["LIMITADOR_BIN"],
                                  "redis_cached"))
    redis = subprocess.Popen(["redis-server", "--port", str(REDIS_PORT), "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        wait_port(REDIS_PORT)
        for row in rows:
            if args.only and args.only not in row.name:
                continue
            if "memory" in row.name:
                counts = [1]
            elif row.name.startswith("sluice"):
                counts = [1, 2, 4]
            else:
                counts = [1, 2]
            for count in counts:
                run_row(row, count, args, body)
    finally:
        redis.terminate()
        redis.wait()


if __name__ == "__main__":
    main()
