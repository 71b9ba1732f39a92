#!/usr/bin/env python3
"""What one decision costs: the server's CPU and Redis's, each server alone, side by side with
its peers in the same run (BENCHMARKS.md, "What does one decision cost Redis?" and "How fast
is the memory store, against a bare gRPC server?").

    benchmarks/bench-decision-cost.py [--rounds 3] [--calls 100000] [--only TEXT]
    REFERENCE_BIN=/path/to/ratelimit LIMITADOR_BIN=/path/to/limitador-server \\
        benchmarks/bench-decision-cost.py
    benchmarks/bench-decision-cost.py --instructions     (callgrind: instructions a call)

Runs sluice and the bare tonic server from target/dist (`cargo build --profile dist --bins
--examples` first); envoyproxy/ratelimit and Limitador only when their binaries are given
(built from their sources, outside this repository). Every row: h2load -n CALLS -c 8 -m 32,
one request on a limit that no call reaches, the server alone on the machine with one Redis;
ROUNDS alternating rounds, medians printed. Per call: the server's CPU (user + system, and the
user part), its context switches, Redis's CPU (the process's, network included), Redis's
commands, and their command time (INFO commandstats); then the ratios the targets are stated
in, taken round by round, and their medians. Rows:

- the bare tonic server (the floor), sluice and Limitador on their memory stores;
- one descriptor on a fixed window on Redis (the reference's own case): sluice, the
  reference, Limitador;
- with Limitador: sluice in its place (run as `limitador-server`, its command line and
  limits file in CEL), on memory and on Redis;
- three descriptors on fixed windows (sluice's plain counter call, as one descriptor's; the
  reference beside), and one descriptor on a token bucket (sluice's general call).

In a round, the rows a ratio compares run one after the other where they can (sluice's memory
row between the floor and its Redis row): the machine's busy spells last minutes, and rows
far apart in a round saw different machines.

`--instructions` runs each process under `valgrind --tool=callgrind` instead and prints the
instructions of one call, the difference between 6,000 and 2,000 calls over 4,000 (repeatable
on a noisy machine): the servers on memory, and Redis under each server's decisions.
"""
import argparse
import glob
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time

from peers import (DIST, Row, baseline_row, cpu_seconds, free_port, h2load, limitador_row,
                   process_counters, redis_cli, redis_commandstats, redis_pid, reference_row,
                   request_body, sluice_as_limitador, sluice_row, start_redis, wait_port)

REDIS_PORT = 7797
# Where the `limitador-server` link to sluice lives for the run.
LINKS = tempfile.mkdtemp(prefix="sluice-links-")

CONFIG = """domain: cost
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 100000000}
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 100000000}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 100000000}
  - key: tb
    rate_limit: {algorithm: token_bucket, unit: hour, requests_per_unit: 100000000}
"""

# The reference's YAML takes no `algorithm`: its copy has fixed windows only.
REFERENCE_CONFIG = "\n".join(line for line in CONFIG.splitlines()
                             if "token_bucket" not in line and "key: tb" not in line) + "\n"


def limitador_limits(cel):
    return ("- namespace: cost\n  max_value: 100000000\n  seconds: 3600\n  conditions: []\n"
            f"  variables: [\"{'descriptors[0].k' if cel else 'k'}\"]\n")


ONE = ("k=one",)
THREE = ("k=one", "a=two", "b=three")
TOKEN = ("tb=one",)


def rows():
    """(row, request) in the order they run in each round."""
    limitador = os.environ.get("LIMITADOR_BIN")
    reference = os.environ.get("REFERENCE_BIN")
    found = []
    if limitador:
        found.append((limitador_row("Limitador, memory", limitador, limitador_limits,
                                    ["memory"]), ONE))
    found += [
        (baseline_row("bare tonic server (the floor)"), ONE),
        (sluice_row("sluice, memory", CONFIG), ONE),
        (sluice_row("sluice, Redis, fixed window", CONFIG, REDIS_PORT), ONE),
        # Who is being limited, off: what tracking heavy hitters costs a call.
        (sluice_row("sluice, memory, heavy hitters off", CONFIG,
                    extra=["--heavy-hitters-capacity", "0"]), ONE),
        (sluice_row("sluice, Redis, fixed window, heavy hitters off", CONFIG, REDIS_PORT,
                    extra=["--heavy-hitters-capacity", "0"]), ONE),
    ]
    if limitador:
        # sluice in Limitador's place: its command line and limits file, the same request.
        found.append((limitador_row("sluice as limitador-server, memory",
                                    sluice_as_limitador(LINKS), limitador_limits,
                                    ["memory"], cel=True), ONE))
    if reference:
        found.append((reference_row("envoyproxy/ratelimit, Redis, fixed window", reference,
                                    REFERENCE_CONFIG, REDIS_PORT), ONE))
    if limitador:
        found.append((limitador_row("Limitador, Redis", limitador, limitador_limits,
                                    ["redis", f"redis://127.0.0.1:{REDIS_PORT}"]), ONE))
        found.append((limitador_row("sluice as limitador-server, Redis",
                                    sluice_as_limitador(LINKS), limitador_limits,
                                    ["redis", f"redis://127.0.0.1:{REDIS_PORT}"], cel=True),
                      ONE))
    found.append((sluice_row("sluice, Redis, token bucket (general call)", CONFIG, REDIS_PORT),
                  TOKEN))
    found.append((sluice_row("sluice, Redis, 3 descriptors", CONFIG, REDIS_PORT),
                  THREE))
    if reference:
        found.append((reference_row("envoyproxy/ratelimit, Redis, 3 descriptors", reference,
                                    REFERENCE_CONFIG, REDIS_PORT), THREE))
    return found


def started(row, workdir):
    port = free_port()
    process = row.start(port, workdir)
    wait_port(port, 60)
    time.sleep(0.5)
    return process, port


def stop(process):
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def measure(row, descriptors, calls):
    redis_cli(REDIS_PORT, "FLUSHALL")
    body = request_body("cost", *descriptors)
    with tempfile.TemporaryDirectory() as workdir:
        process, port = started(row, workdir)
        try:
            h2load([port], body, calls=min(calls, 20000))  # warm up
            redis = redis_pid(REDIS_PORT)
            stats_before = redis_commandstats(REDIS_PORT)
            counters_before = process_counters(process.pid)
            redis_before = cpu_seconds(redis)
            began = time.time()
            done = h2load([port], body, calls=calls)
            elapsed = time.time() - began
            counters = process_counters(process.pid)
            spent = {key: counters[key] - counters_before[key] for key in counters}
            redis_cpu = cpu_seconds(redis) - redis_before
            stats = redis_commandstats(REDIS_PORT)
        finally:
            stop(process)
    commands = sum(c - stats_before.get(n, (0, 0))[0] for n, (c, _) in stats.items())
    command_us = sum(u - stats_before.get(n, (0, 0))[1] for n, (_, u) in stats.items())
    done = max(done, 1)
    return {
        "calls_per_second": done / elapsed,
        "server_cpu_us": (spent["user"] + spent["system"]) / done * 1e6,
        "server_user_us": spent["user"] / done * 1e6,
        "server_switches": spent["switches"] / done,
        "redis_cpu_us": redis_cpu / done * 1e6,
        "redis_commands": commands / done,
        "redis_command_us": command_us / done,
    }


def timings(args):
    results = {}
    order = [(row, d) for row, d in rows() if not args.only or args.only in row.name]
    for _ in range(args.rounds):
        for row, descriptors in order:
            results.setdefault(row.name, []).append(measure(row, descriptors, args.calls))
    for row, _ in order:
        runs = results[row.name]
        median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        print(json.dumps({
            "row": row.name,
            "calls_per_second": [round(r["calls_per_second"]) for r in runs],
            "server_cpu_us_per_call": round(median["server_cpu_us"], 1),
            "of_which_user_us": round(median["server_user_us"], 1),
            "context_switches_per_call": round(median["server_switches"], 3),
            "redis_cpu_us_per_call": round(median["redis_cpu_us"], 2),
            "redis_commands_per_call": round(median["redis_commands"], 2),
            "redis_command_us_per_call": round(median["redis_command_us"], 2),
        }), flush=True)
    paired_ratios(results)


# The ratios the targets are stated in: (numerator row, denominator row, measure).
RATIOS = [
    ("sluice, memory", "bare tonic server (the floor)", "server_cpu_us"),
    ("sluice, memory", "Limitador, memory", "server_cpu_us"),
    ("sluice, Redis, fixed window", "sluice, memory", "server_cpu_us"),
    ("sluice, Redis, fixed window", "envoyproxy/ratelimit, Redis, fixed window", "redis_cpu_us"),
    ("sluice, Redis, 3 descriptors", "envoyproxy/ratelimit, Redis, 3 descriptors",
     "redis_cpu_us"),
]


def paired_ratios(results):
    """Each ratio of `RATIOS` whose rows ran, taken within each round (a round's rows run
    within a minute or two of each other, under the same load from the machine's
    neighbours), and the median of the rounds'."""
    for top, bottom, measure in RATIOS:
        if top not in results or bottom not in results:
            continue
        rounds = [a[measure] / b[measure] for a, b in zip(results[top], results[bottom])
                  if b[measure] > 0]
        if rounds:
            print(json.dumps({"ratio": f"{top} / {bottom}, {measure}",
                              "per_round": [round(r, 2) for r in rounds],
                              "median": round(statistics.median(rounds), 2)}), flush=True)


def callgrind_total(out_file):
    annotated = subprocess.run(["callgrind_annotate", out_file], capture_output=True,
                               text=True).stdout
    for line in annotated.splitlines():
        if "PROGRAM TOTALS" in line:
            return int(line.split()[0].replace(",", ""))
    raise SystemExit(f"no totals in {out_file}")


def under_callgrind(row, out_dir):
    """`row` as valgrind starts it: the command its start runs, wrapped."""
    def start(grpc, workdir):
        original = subprocess.Popen

        def wrapped(command, **kwargs):
            return original(["valgrind", "--tool=callgrind", "--trace-children=no",
                             f"--callgrind-out-file={out_dir}/cg.%p", *command], **kwargs)
        subprocess.Popen = wrapped
        try:
            return row.start(grpc, workdir)
        finally:
            subprocess.Popen = original
    return Row(row.name, start)


def server_instructions(row, descriptors, calls):
    body = request_body("cost", *descriptors)
    with tempfile.TemporaryDirectory() as out_dir, tempfile.TemporaryDirectory() as workdir:
        process, port = started(under_callgrind(row, out_dir), workdir)
        try:
            h2load([port], body, calls=calls, connections=1, streams=8)
        finally:
            stop(process)
        return callgrind_total(glob.glob(os.path.join(out_dir, "cg.*"))[0])


def redis_instructions(row, descriptors, calls):
    body = request_body("cost", *descriptors)
    with tempfile.TemporaryDirectory() as out_dir, tempfile.TemporaryDirectory() as workdir:
        redis = subprocess.Popen(["valgrind", "--tool=callgrind",
                                  f"--callgrind-out-file={out_dir}/cg.%p", "redis-server",
                                  "--port", str(REDIS_PORT), "--save", "", "--appendonly", "no"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(REDIS_PORT, 60)
        time.sleep(1)
        try:
            process, port = started(row, workdir)
            try:
                h2load([port], body, calls=calls, connections=1, streams=8)
            finally:
                stop(process)
        finally:
            redis.send_signal(signal.SIGTERM)
            redis.wait()
        return callgrind_total(glob.glob(os.path.join(out_dir, "cg.*"))[0])


def instructions(args):
    few, many = 2000, 6000
    for row, descriptors in rows():
        if args.only and args.only not in row.name:
            continue
        if "Redis" in row.name:
            count = redis_instructions
            what = "Redis instructions a decision"
        else:
            count = server_instructions
            what = "server instructions a call"
        per_call = (count(row, descriptors, many) - count(row, descriptors, few)) / (many - few)
        print(json.dumps({"row": row.name, what: round(per_call)}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=100000)
    parser.add_argument("--only", help="rows whose name contains this")
    parser.add_argument("--instructions", action="store_true",
                        help="instead: callgrind's instructions a call, servers and Redis")
    args = parser.parse_args()
    if args.instructions:
        return instructions(args)
    redis = start_redis(REDIS_PORT)
    try:
        timings(args)
    finally:
        redis.terminate()
        redis.wait()


if __name__ == "__main__":
    main()
