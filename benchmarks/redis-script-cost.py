#!/usr/bin/env python3
"""Instructions Redis spends per script call (docs/budgets.md, BENCHMARKS.md "What does a
reserved budget cost?"): redis-server runs under `valgrind --tool=callgrind`, the function
library is built from lua/ as crates/sluice-store/src/redis/scripts.rs builds it, and
redis-benchmark sends N calls of one kind; the difference between 500 and 1,500 calls,
divided by 1,000, is one call's instructions, repeatable on a noisy machine.

Kinds: a plain limit's hit (the one-hit path), the same through the general path of a request
(every multi-hit request takes it), a reserved budget's opening, and a duplicate settle.

    benchmarks/redis-script-cost.py          (needs valgrind, redis-server, redis-benchmark)
"""
import glob
import os
import subprocess
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lua")
# The order scripts.rs loads them in: the common header, the algorithms in registry order, the
# modifiers in registry order, the request driver.
ORDER = ["common", "fixed_window", "sliding_window_log", "sliding_window_counter",
         "token_bucket", "leaky_bucket", "warm_up", "concurrency", "penalty", "reserve"]
PORT = "6396"


def source(name):
    with open(os.path.join(ROOT, name + ".lua")) as f:
        return f.read()


def library(request):
    body = "\n".join(source(name) for name in ORDER) + "\n" + request
    return "#!lua name=cost\n" + body + "\nredis.register_function('req', request)\n"


def cli(*args):
    return subprocess.run(["redis-cli", "-p", PORT, *args], capture_output=True, text=True).stdout


def args(now, lease, reserve):
    # The 13 common arguments of one fixed-window hit (lua/common.lua), then its own two.
    return ["all", "fixed_window", "1000000000", "3600000000", "1", "1000000000", str(now), "",
            "enforced", "0", "0", lease, "", reserve, "0", "0"]


def instructions(lib, keys, call_args, calls, out_dir):
    for old in glob.glob(os.path.join(out_dir, "cg.*")):
        os.remove(old)
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + os.path.join(out_dir, "cg.%p"),
         "redis-server", "--port", PORT, "--save", ""],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        time.sleep(0.3)
        if cli("PING").strip() == "PONG":
            break
    cli("FUNCTION", "LOAD", "REPLACE", lib)
    subprocess.run(["redis-benchmark", "-p", PORT, "-n", str(calls), "-c", "1", "FCALL", "req",
                    str(len(keys)), *keys, *call_args], capture_output=True)
    cli("SHUTDOWN", "NOSAVE")
    server.wait()
    annotated = subprocess.run(["callgrind_annotate", glob.glob(os.path.join(out_dir, "cg.*"))[0]],
                               capture_output=True, text=True).stdout
    for line in annotated.splitlines():
        if "PROGRAM TOTALS" in line:
            return int(line.split()[0].replace(",", ""))
    raise SystemExit("no totals from callgrind_annotate")


def main():
    now = int(time.time() * 1e6)
    request = source("request")
    general = request.replace("  if #hits == 1 and not hits[1].penalty then", "  if false then")
    if general == request:
        raise SystemExit("lua/request.lua's one-hit test changed: update this script")
    kinds = [
        ("plain limit, one-hit path", request, ["k1"], args(now, "", "")),
        ("plain limit, general path", general, ["k1"], args(now, "", "")),
        ("reserve: opening", request, ["{k}1", "{k}holds"],
         args(now, "+00000000000000aa", "2 0 60000000 0 1000")),
        ("reserve: duplicate settle", request, ["{s}1", "{s}holds", "{s}settled"],
         args(now, "-00000000000000bb", "2 3 60000000 0 1000")),
    ]
    with tempfile.TemporaryDirectory() as out_dir:
        for name, req, keys, call_args in kinds:
            lib = library(req)
            few = instructions(lib, keys, call_args, 500, out_dir)
            many = instructions(lib, keys, call_args, 1500, out_dir)
            print(f"{name}: {(many - few) // 1000} instructions a call")


if __name__ == "__main__":
    main()
