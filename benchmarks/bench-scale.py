#!/usr/bin/env python3
"""The scale curves of BENCHMARKS.md ("Scale"), from one run: how sluice's cost per call holds
as the work grows. Run by `benchmarks/bench --scale` (which builds the `dist` binaries first):

    python3 benchmarks/bench-scale.py [--out DIR] [--rounds N] [--quick]

Each curve is measured with the server's own CPU time (user + system, /proc) over the calls it
answered, h2load or sluice-load driving it from the same 2 cores, medians of --rounds runs:

  floor        the bare tonic server and sluice (memory store, one rule), one request
  rules        10 to 100,000 rules at one key, a tenth of them wildcard values in three shapes
               (prefix `w<i>-*`, suffix `*-w<i>`, infix `*.w<i>.*`), for a value that matches the
               last pattern of each shape and one that matches none; check-config's time on
               each; the longest wait of a call while 100,000 rules reload
  keys         the memory store holding 10,000 to 10,000,000 live keys (filled first, then
               charged at random among them), and its resident bytes per key
  descriptors  1, 8 and 64 descriptors a request; all-or-nothing beside each charged alone
  redis        the Redis store at its defaults beside the memory store, and p99 at half of peak
  rlqs         RLQS (memory store): CPU per bucket usage with 10, 100 and 1,000 clients sharing
               each bucket, and resident memory per stream at 10,000 streams

It writes DIR/results.json (every run), DIR/<curve>.svg (a plot each) and DIR/tables.md (the
tables BENCHMARKS.md shows). Servers listen on fixed local ports (2xxxx) and are stopped on exit.
"""
import argparse
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "dist")
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
RPC = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
PROCESSES = []


def stop_all():
    for process in PROCESSES:
        if process.poll() is None:
            process.kill()
            process.wait()
    PROCESSES.clear()


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_bytes(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def wait_http(port, path="/healthcheck", timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.1)
    raise RuntimeError(f"nothing healthy on port {port}")


def start(args, http_port=None, env=None):
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, **(env or {})})
    PROCESSES.append(process)
    if http_port:
        wait_http(http_port)
    else:
        time.sleep(1)
    return process


def sluice(grpc, http, *extra, env=None):
    return start([f"{BIN}/sluice", "--grpc-addr", f"127.0.0.1:{grpc}",
                  "--http-addr", f"127.0.0.1:{http}", *extra], http, env)


def ask_json(http, request):
    body = json.dumps(request).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{http}/json", data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return json.load(e)


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The request encoder of benchmarks/h2load-request.py (Envoy's field numbers).
H2LOAD_REQUEST = load_module("h2load_request", os.path.join(ROOT, "benchmarks", "h2load-request.py"))


def grpc_request(domain, descriptors):
    """One gRPC-framed RateLimitRequest for h2load."""
    body = H2LOAD_REQUEST.request(domain, descriptors)
    return b"\x00" + len(body).to_bytes(4, "big") + body


def h2load(port, process, request, calls):
    """calls/s and the server's CPU µs per call, h2load with 8 connections x 32 in flight."""
    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        f.write(request)
        f.flush()
        before = cpu_seconds(process.pid)
        out = subprocess.run(
            ["h2load", "-n", str(calls), "-c", "8", "-m", "32", "-H", "content-type: application/grpc",
             "-H", "te: trailers", "-d", f.name, f"http://127.0.0.1:{port}{RPC}"],
            capture_output=True, text=True, check=True).stdout
        after = cpu_seconds(process.pid)
    done = next(l for l in out.splitlines() if l.startswith("requests:"))
    succeeded = int(done.split("succeeded")[0].split(",")[-1])
    if succeeded != calls:
        raise RuntimeError(f"h2load: {done}")
    rate = float(next(l for l in out.splitlines() if l.startswith("finished in")).split(",")[1].split()[0])
    return {"calls": calls, "calls_per_second": rate, "cpu_us_per_call": (after - before) * 1e6 / calls}


def load(port, process, *extra):
    """sluice-load's JSON, with the server's CPU µs per call."""
    before = cpu_seconds(process.pid)
    out = subprocess.run([f"{BIN}/sluice-load", "--target", f"127.0.0.1:{port}", "--json", *extra],
                         capture_output=True, text=True, check=True).stdout
    after = cpu_seconds(process.pid)
    result = json.loads(out)
    result["cpu_us_per_call"] = (after - before) * 1e6 / max(result["calls"], 1)
    return result


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def rounds(n, run):
    runs = [run() for _ in range(n)]
    return {"runs": runs, "cpu_us_per_call": median_of(runs, "cpu_us_per_call"),
            "calls_per_second": median_of(runs, "calls_per_second")}


# --- the rules curve ---------------------------------------------------------------------------

WILD_SHAPES = ("prefix", "suffix", "infix")


def wildcard(i):
    shape = WILD_SHAPES[i % 3]
    return {"prefix": f"w{i}-*", "suffix": f"*-w{i}", "infix": f"*.w{i}.*"}[shape]


def rules_config(rules):
    """`rules` rules at key `tenant`: a tenth wildcard values (of every shape, in turn), the
    rest exact values; each rule's limit names it (requests_per_unit 1e9 + index)."""
    wild = rules // 10
    lines = ["domain: scale", "descriptors:"]
    for i in range(rules - wild):
        lines += [f"  - key: tenant", f"    value: e{i}",
                  f"    rate_limit: {{unit: hour, requests_per_unit: {1_000_000_000 + i}}}"]
    for i in range(wild):
        lines += [f"  - key: tenant", f"    value: \"{wildcard(i)}\"",
                  f"    rate_limit: {{unit: hour, requests_per_unit: {2_000_000_000 + i}}}"]
    return "\n".join(lines) + "\n", wild


def rule_queries(wild):
    """(name, value, the requests_per_unit of the rule it must match, or None)."""
    queries = [("exact", "e0", 1_000_000_000)]
    for shape_index, shape in enumerate(WILD_SHAPES):
        last = max((i for i in range(wild) if i % 3 == shape_index), default=None)
        if last is None:
            continue
        value = {"prefix": f"w{last}-x", "suffix": f"x-w{last}", "infix": f"a.w{last}.b"}[shape]
        queries.append((f"late {shape}", value, 2_000_000_000 + last))
    queries.append(("none", "nomatch-value", None))
    return queries


def curve_rules(out, n, sizes, calls):
    results = {"load": [], "calls": [], "reload": None}
    grpc, http = 21081, 21080
    for size in sizes:
        folder = tempfile.mkdtemp(prefix="sluice-scale-")
        text, wild = rules_config(size)
        path = os.path.join(folder, "scale.yaml")
        with open(path, "w") as f:
            f.write(text)
        started = time.time()
        subprocess.run([f"{BIN}/sluice", "check-config", path], capture_output=True, check=True)
        results["load"].append({"rules": size, "bytes": len(text), "check_config_s": time.time() - started})
        process = sluice(grpc, http, "--config", folder)
        for name, value, expected in rule_queries(wild):
            answer = ask_json(http, {"domain": "scale", "descriptors": [{"entries": [{"key": "tenant", "value": value}]}]})
            got = answer["statuses"][0].get("currentLimit", {}).get("requestsPerUnit")
            if got != expected:
                raise RuntimeError(f"{size} rules, {value}: matched {got}, expected {expected}")
            request = grpc_request("scale", [[("tenant", value)]])
            measured = rounds(n, lambda: h2load(grpc, process, request, calls))
            results["calls"].append({"rules": size, "wildcards": wild, "query": name, **measured})
            print(f"rules {size} {name}: {measured['cpu_us_per_call']:.1f} µs/call, "
                  f"{measured['calls_per_second']:.0f} calls/s", flush=True)
        if size == sizes[-1]:
            results["reload"] = reload_waits(grpc, process, folder, path)
        stop_all()
        shutil.rmtree(folder)
    return results


def reload_waits(grpc, process, folder, path):
    """The longest wait of a call (4 callers, one call each in flight) while the config of
    `path` is reloaded by SIGHUP every second, beside the same load without reloads."""
    def run(reloads):
        done = []
        loader = subprocess.Popen(
            [f"{BIN}/sluice-load", "--target", f"127.0.0.1:{grpc}", "--json", "--connections", "4",
             "--in-flight", "1", "--duration", "12s", "--domain", "scale", "--key", "tenant",
             "--value", "e0"], stdout=subprocess.PIPE, text=True)
        for _ in range(10):
            time.sleep(1)
            if reloads:
                os.kill(process.pid, signal.SIGHUP)
                done.append(time.time())
        result = json.loads(loader.communicate()[0])
        return {"reloads": len(done), "max_us": result["max_us"], "p999_us": result["p999_us"],
                "p99_us": result["p99_us"], "calls": result["calls"]}
    quiet = run(False)
    reloading = run(True)
    print(f"reload: max wait {reloading['max_us']} µs while reloading, {quiet['max_us']} µs without", flush=True)
    return {"without_reloads": quiet, "with_reloads": reloading}


# --- the keys curve ----------------------------------------------------------------------------

def curve_keys(n, sizes, seconds):
    results = []
    grpc, http = 22081, 22080
    folder = tempfile.mkdtemp(prefix="sluice-keys-")
    with open(os.path.join(folder, "keys.yaml"), "w") as f:
        f.write("domain: keys\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1000000000}\n")
    for size in sizes:
        process = sluice(grpc, http, "--config", folder, "--memory-max-keys", str(size * 2),
                         "--memory-max-bytes", str(max(size * 400, 256 << 20)))
        rss_before = rss_bytes(process.pid)
        common = ["--domain", "keys", "--key", "k", "--keys", str(size), "--connections", "4", "--in-flight", "32"]
        subprocess.run([f"{BIN}/sluice-load", "--target", f"127.0.0.1:{grpc}", "--json", *common,
                        "--distribution", "sequential", "--calls", str(size)],
                       capture_output=True, check=True)
        per_key = (rss_bytes(process.pid) - rss_before) / size
        measured = rounds(n, lambda: load(grpc, process, *common, "--duration", f"{seconds}s"))
        results.append({"keys": size, "rss_bytes_per_key": per_key, **measured})
        print(f"keys {size}: {measured['cpu_us_per_call']:.1f} µs/call, {per_key:.1f} bytes a key", flush=True)
        stop_all()
    shutil.rmtree(folder)
    return results


# --- descriptors, all-or-nothing, Redis --------------------------------------------------------

def curve_descriptors(n, seconds):
    results = []
    folder = tempfile.mkdtemp(prefix="sluice-desc-")
    with open(os.path.join(folder, "d.yaml"), "w") as f:
        f.write("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1000000000}\n")
    together = sluice(23081, 23080, "--config", folder)
    alone = sluice(23181, 23180, "--config", folder, env={"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "false"})
    for count in (1, 8, 64):
        common = ["--domain", "d", "--key", "k", "--keys", "10000", "--descriptors", str(count),
                  "--connections", "4", "--in-flight", "32", "--duration", f"{seconds}s"]
        for name, port, process in (("all-or-nothing", 23081, together), ("every hit charged", 23181, alone)):
            measured = rounds(n, lambda: load(port, process, *common))
            results.append({"descriptors": count, "charging": name, **measured})
            print(f"descriptors {count} {name}: {measured['cpu_us_per_call']:.1f} µs/call", flush=True)
    stop_all()
    shutil.rmtree(folder)
    return results


def curve_redis(n, seconds, variants):
    """The memory store and Redis at each of `variants` ((name, extra flags)), CPU per call
    (sluice's, and redis-server's), and p99 closed loop with 4 calls in flight."""
    results = {}
    redis = start(["redis-server", "--port", "27791", "--save", "", "--appendonly", "no"])
    servers = [("memory", sluice(24081, 24080), 24081)]
    for index, (name, extra) in enumerate(variants):
        grpc, http = 24181 + 100 * index, 24180 + 100 * index
        servers.append((name, sluice(grpc, http, "--store", "redis", "--redis-url",
                                     "redis://127.0.0.1:27791", *extra), grpc))
    common = ["--domain", "edge_proxy", "--key", "remote_address", "--keys", "10000",
              "--connections", "2", "--in-flight", "32", "--duration", f"{seconds}s"]
    for name, process, port in servers:
        runs = []
        for _ in range(n):
            before = cpu_seconds(redis.pid)
            run = load(port, process, *common)
            run["redis_server_cpu_us_per_call"] = (cpu_seconds(redis.pid) - before) * 1e6 / run["calls"]
            runs.append(run)
        closed = load(port, process, *common[:6], "--connections", "1", "--in-flight", "4",
                      "--duration", f"{seconds}s")
        results[name] = {"runs": runs, "cpu_us_per_call": median_of(runs, "cpu_us_per_call"),
                         "calls_per_second": median_of(runs, "calls_per_second"),
                         "redis_server_cpu_us_per_call": None if name == "memory" else median_of(runs, "redis_server_cpu_us_per_call"),
                         "closed_loop_4_in_flight": closed}
        print(f"{name}: {results[name]['cpu_us_per_call']:.1f} µs/call; closed loop p99 {closed['p99_us']} µs", flush=True)
    stop_all()
    return results


def quota_load(port, process, clients, interval, seconds):
    """sluice-quota-load: `clients` streams (over at most 100 connections) reporting 10 buckets
    every `interval`; the server's CPU per bucket usage and its resident memory at the end."""
    connections = str(min(clients, 100))
    before = cpu_seconds(process.pid)
    loader = subprocess.Popen(
        [f"{BIN}/sluice-quota-load", "--target", f"127.0.0.1:{port}", "--clients", str(clients),
         "--connections", connections, "--buckets", "10", "--interval", interval,
         "--duration", f"{seconds}s"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(seconds - 1)
    rss = rss_bytes(process.pid)
    last = loader.communicate()[0].strip().splitlines()[-1]
    used = cpu_seconds(process.pid) - before
    reports = int(last.split()[0])
    return {"clients": clients, "interval": interval, "reports": reports,
            "cpu_us_per_bucket_usage": used * 1e6 / max(reports * 10, 1), "rss_bytes": rss}


def curve_rlqs(n, seconds):
    results = {"usage": [], "streams": None}
    for clients, interval in ((10, "100ms"), (100, "1s"), (1000, "1s")):
        runs = []
        for _ in range(n):
            process = sluice(26081, 26080)
            runs.append(quota_load(26081, process, clients, interval, seconds + 5))
            stop_all()
        cost = statistics.median(r["cpu_us_per_bucket_usage"] for r in runs)
        results["usage"].append({"clients": clients, "interval": interval, "runs": runs,
                                 "cpu_us_per_bucket_usage": cost})
        print(f"rlqs {clients} clients: {cost:.1f} µs a bucket usage", flush=True)
    process = sluice(26081, 26080)
    at_rest = rss_bytes(process.pid)
    loaded = quota_load(26081, process, 10_000, "5s", 20)
    stop_all()
    results["streams"] = {"streams": 10_000, "rss_at_rest": at_rest, **loaded,
                          "bytes_per_stream": (loaded["rss_bytes"] - at_rest) / 10_000}
    print(f"rlqs 10,000 streams: {results['streams']['bytes_per_stream']:.0f} bytes a stream", flush=True)
    return results


def curve_floor(n, calls):
    baseline = start([f"{BIN}/examples/baseline_server", "127.0.0.1:25081"])
    folder = tempfile.mkdtemp(prefix="sluice-floor-")
    with open(os.path.join(folder, "one.yaml"), "w") as f:
        f.write("domain: one\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1000000000}\n")
    one = sluice(25181, 25180, "--config", folder)
    request = grpc_request("one", [[("k", "v")]])
    runs = {"baseline": [], "sluice": []}
    for _ in range(n):
        runs["baseline"].append(h2load(25081, baseline, request, calls))
        runs["sluice"].append(h2load(25181, one, request, calls))
    stop_all()
    shutil.rmtree(folder)
    result = {name: {"runs": r, "cpu_us_per_call": median_of(r, "cpu_us_per_call"),
                     "calls_per_second": median_of(r, "calls_per_second")} for name, r in runs.items()}
    print(f"floor: baseline {result['baseline']['cpu_us_per_call']:.1f} µs/call, "
          f"sluice {result['sluice']['cpu_us_per_call']:.1f}", flush=True)
    return result


# --- plots and tables --------------------------------------------------------------------------

# Redis at its defaults, and with a 150 µs pipelining window, the reference's suggestion.
REDIS_VARIANTS = [("redis (defaults)", []),
                  ("redis, waiting calls batched", ["--redis-pipeline-limit", "1000000"]),
                  ("redis, 150us window", ["--redis-pipeline-window", "150us"])]

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"]


def plot(path, title, xlabel, ylabel, series):
    """A line plot as SVG, x on a log scale: series is {name: [(x, y), ...]}."""
    import math
    width, height, left, right, top, bottom = 640, 360, 70, 170, 40, 50
    xs = [x for points in series.values() for x, _ in points]
    ys = [y for points in series.values() for _, y in points]
    lx0, lx1 = math.log10(min(xs)), math.log10(max(xs))
    y1 = max(ys) * 1.1 or 1
    px = lambda x: left + (math.log10(x) - lx0) / ((lx1 - lx0) or 1) * (width - left - right)
    py = lambda y: height - bottom - y / y1 * (height - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>',
           f'<text x="{(left + width - right) / 2}" y="{height - 10}" text-anchor="middle">{xlabel}</text>',
           f'<text x="15" y="{(top + height - bottom) / 2}" text-anchor="middle" transform="rotate(-90 15 {(top + height - bottom) / 2})">{ylabel}</text>']
    for x in sorted(set(xs)):
        out.append(f'<text x="{px(x):.1f}" y="{height - bottom + 16}" text-anchor="middle">{x:,}</text>')
    for i in range(5):
        y = y1 * i / 4
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.0f}</text>')
        out.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{width - right}" y2="{py(y):.1f}" stroke="#ddd"/>')
    for index, (name, points) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in sorted(points))
        out.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2" data-series="{name}"/>')
        for x, y in points:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        ly = top + 16 * index + 10
        out.append(f'<line x1="{width - right + 10}" y1="{ly}" x2="{width - right + 30}" y2="{ly}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{width - right + 35}" y="{ly + 4}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def tables(results):
    lines = []
    if "floor" in results:
        f = results["floor"]
        lines += ["| server (one rule, h2load 8 x 32) | CPU per call | calls/s |", "|---|---|---|"]
        for name in ("baseline", "sluice"):
            lines.append(f"| {name} | {f[name]['cpu_us_per_call']:.1f} µs | {f[name]['calls_per_second']:,.0f} |")
        lines.append(f"\nsluice / baseline: {f['sluice']['cpu_us_per_call'] / f['baseline']['cpu_us_per_call']:.2f}x\n")
    if "rules" in results:
        r = results["rules"]
        lines += ["| rules (wildcards) | query | CPU per call | calls/s |", "|---|---|---|---|"]
        for c in r["calls"]:
            lines.append(f"| {c['rules']:,} ({c['wildcards']:,}) | {c['query']} | {c['cpu_us_per_call']:.1f} µs | {c['calls_per_second']:,.0f} |")
        lines += ["", "| rules | file | check-config |", "|---|---|---|"]
        for l in r["load"]:
            lines.append(f"| {l['rules']:,} | {l['bytes'] / 1e6:.1f} MB | {l['check_config_s']:.2f} s |")
        if r.get("reload"):
            q, w = r["reload"]["without_reloads"], r["reload"]["with_reloads"]
            lines += ["", "| 4 callers, 12 s | reloads | calls | p99 | p99.9 | longest wait |", "|---|---|---|---|---|---|"]
            for name, x in (("no reload", q), ("SIGHUP every second", w)):
                lines.append(f"| {name} | {x['reloads']} | {x['calls']:,} | {x['p99_us']} µs | {x['p999_us']} µs | {x['max_us']} µs |")
        lines.append("")
    if "keys" in results:
        lines += ["| live keys | CPU per call | calls/s | resident bytes a key |", "|---|---|---|---|"]
        for k in results["keys"]:
            lines.append(f"| {k['keys']:,} | {k['cpu_us_per_call']:.1f} µs | {k['calls_per_second']:,.0f} | {k['rss_bytes_per_key']:.0f} |")
        lines.append("")
    if "descriptors" in results:
        lines += ["| descriptors a request | charging | CPU per call | calls/s |", "|---|---|---|---|"]
        for d in results["descriptors"]:
            lines.append(f"| {d['descriptors']} | {d['charging']} | {d['cpu_us_per_call']:.1f} µs | {d['calls_per_second']:,.0f} |")
        lines.append("")
    if "redis" in results:
        lines += ["| store (defaults) | sluice CPU per call | redis-server CPU per call | calls/s | p99, 4 in flight |", "|---|---|---|---|---|"]
        for name, x in results["redis"].items():
            rc = x["redis_server_cpu_us_per_call"]
            lines.append(f"| {name} | {x['cpu_us_per_call']:.1f} µs | {'' if rc is None else f'{rc:.1f} µs'} | {x['calls_per_second']:,.0f} | {x['closed_loop_4_in_flight']['p99_us']} µs |")
        lines.append("")
    if "rlqs" in results:
        lines += ["| RLQS clients a bucket | report interval | CPU per bucket usage |", "|---|---|---|"]
        for u in results["rlqs"]["usage"]:
            lines.append(f"| {u['clients']:,} | {u['interval']} | {u['cpu_us_per_bucket_usage']:.1f} µs |")
        st = results["rlqs"]["streams"]
        lines.append(f"\n10,000 RLQS streams: {st['rss_bytes'] / 2**20:.0f} MiB resident "
                     f"({st['rss_at_rest'] / 2**20:.0f} MiB at rest), {st['bytes_per_stream']:,.0f} bytes a stream, "
                     f"{st['reports']:,} reports answered\n")
    return "\n".join(lines)


def plots(out, results):
    if "rules" in results:
        series = {}
        for c in results["rules"]["calls"]:
            series.setdefault(c["query"], []).append((c["rules"], c["cpu_us_per_call"]))
        plot(os.path.join(out, "rules.svg"), "CPU per call by rules in the config", "rules", "µs of server CPU a call", series)
    if "keys" in results:
        points = [(k["keys"], k["cpu_us_per_call"]) for k in results["keys"]]
        plot(os.path.join(out, "keys.svg"), "CPU per call by live keys (memory store)", "live keys", "µs of server CPU a call", {"memory store": points})
    if "descriptors" in results:
        series = {}
        for d in results["descriptors"]:
            series.setdefault(d["charging"], []).append((d["descriptors"], d["cpu_us_per_call"]))
        plot(os.path.join(out, "descriptors.svg"), "CPU per call by descriptors a request", "descriptors", "µs of server CPU a call", series)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "scale"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small sizes and short runs, to try the script")
    parser.add_argument("--only", action="append", choices=["floor", "rules", "keys", "descriptors", "redis", "rlqs"])
    args = parser.parse_args()
    os.chdir(ROOT)  # servers started without --config serve config/
    os.makedirs(args.out, exist_ok=True)
    quick = args.quick
    calls = 20_000 if quick else 200_000
    seconds = 2 if quick else 5
    chosen = args.only or ["floor", "rules", "keys", "descriptors", "redis", "rlqs"]
    results = {"machine": {"cores": os.cpu_count(), "when": time.strftime("%Y-%m-%d %H:%M:%S")}}
    try:
        if "floor" in chosen:
            results["floor"] = curve_floor(args.rounds, calls)
        if "rules" in chosen:
            sizes = [10, 1000] if quick else [10, 1_000, 10_000, 100_000]
            results["rules"] = curve_rules(args.out, args.rounds, sizes, calls)
        if "keys" in chosen:
            sizes = [10_000, 100_000] if quick else [10_000, 100_000, 1_000_000, 10_000_000]
            results["keys"] = curve_keys(args.rounds, sizes, seconds)
        if "descriptors" in chosen:
            results["descriptors"] = curve_descriptors(args.rounds, seconds)
        if "redis" in chosen:
            results["redis"] = curve_redis(args.rounds, seconds, REDIS_VARIANTS)
        if "rlqs" in chosen:
            results["rlqs"] = curve_rlqs(args.rounds, seconds)
    finally:
        stop_all()
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    plots(args.out, results)
    text = tables(results)
    with open(os.path.join(args.out, "tables.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    sys.exit(main())
