"""What the benchmark scripts share: ports, process CPU time, Redis's counters, h2load, and how
to start each server kind (sluice, envoyproxy/ratelimit, Limitador, the bare tonic server) on
a gRPC port. The peers' binaries come from the environment (`REFERENCE_BIN`,
`LIMITADOR_BIN`): they are built outside this repository from their own sources."""
import os
import socket
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIST = os.path.join(ROOT, "target", "dist")
TCK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, seconds=20):
    deadline = time.time() + seconds
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def user_and_system_seconds(pid):
    """A process's user time and system time, its threads included."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TCK, int(fields[12]) / TCK


def cpu_seconds(pid):
    """A process's user + system time, its threads included."""
    return sum(user_and_system_seconds(pid))


def process_counters(pid):
    """What a process has spent so far, its threads included: user and system seconds, and
    context switches, voluntary and not."""
    user, system = user_and_system_seconds(pid)
    switches = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        switches += int(line.split()[1])
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return {"user": user, "system": system, "switches": switches}


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True, check=True).stdout


def redis_pid(port):
    return int(redis_cli(port, "INFO", "server").split("process_id:")[1].split()[0])


def redis_commandstats(port):
    """{command: (calls, usec)} from INFO commandstats, the benchmark's own commands left out."""
    stats = {}
    for line in redis_cli(port, "INFO", "commandstats").splitlines():
        if not line.startswith("cmdstat_") or "calls=" not in line:
            continue
        name = line[len("cmdstat_"):].split(":")[0]
        if name in ("info", "flushall", "ping", "config|resetstat", "config|set", "config|get"):
            continue
        fields = dict(f.split("=") for f in line.split(":", 1)[1].split(","))
        stats[name] = (int(fields["calls"]), float(fields["usec"]))
    return stats


def redis_commands(port):
    return sum(calls for calls, _ in redis_commandstats(port).values())


def start_redis(port):
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly",
                              "no"], stdout=subprocess.DEVNULL)
    wait_port(port)
    return redis


def h2load(ports, body, seconds=None, calls=None, connections=8, streams=32):
    """h2load, `connections` x `streams` split over `ports`, for `seconds` or `calls` calls;
    the calls that succeeded."""
    per = max(1, connections // len(ports))
    amount = ["-D", str(seconds)] if seconds else ["-n", str(calls // len(ports))]
    runs = [subprocess.Popen(
        ["h2load", *amount, "-c", str(per), "-m", str(streams), "-d", body,
         "-H", "content-type: application/grpc", "-H", "te: trailers",
         f"http://127.0.0.1:{port}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for port in ports]
    done = 0
    for run in runs:
        out = run.communicate()[0]
        for line in out.splitlines():
            if line.startswith("requests:"):
                done += int(line.split(",")[2].split()[0])  # "N succeeded"
    return done


def request_body(domain, *descriptors):
    """A file holding one gRPC-framed ShouldRateLimit request (benchmarks/h2load-request.py)."""
    body = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"sluice-bench-{os.getpid()}-"
                        f"{domain}-{len(descriptors)}-{abs(hash(descriptors))}.bin")
    args = ["--domain", domain]
    for descriptor in descriptors:
        args += ["--descriptor", descriptor]
    with open(body, "wb") as f:
        f.write(subprocess.run(["python3", os.path.join(ROOT, "benchmarks", "h2load-request.py"),
                                *args], capture_output=True, check=True).stdout)
    return body


class Row:
    """A server kind: how to start one replica of it on a gRPC port (in its own `workdir`)."""

    def __init__(self, name, start):
        self.name, self.start = name, start


def sluice_row(name, config, redis_port=None, extra=()):
    """sluice from target/dist with `config` (YAML text) as its only config file; on Redis at
    `redis_port` when given, else on the memory store."""
    def start(grpc, workdir):
        os.makedirs(os.path.join(workdir, "config"), exist_ok=True)
        with open(os.path.join(workdir, "config", "limits.yaml"), "w") as f:
            f.write(config)
        args = [os.path.join(DIST, "sluice"), "--config", os.path.join(workdir, "config"),
                "--grpc-addr", f"127.0.0.1:{grpc}", "--http-addr", f"127.0.0.1:{free_port()}",
                *extra]
        if redis_port:
            args += ["--store", "redis", "--redis-url", f"redis://127.0.0.1:{redis_port}"]
        return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Row(name, start)


def sluice_as_limitador(workdir):
    """A `limitador-server` link to target/dist's sluice in `workdir`: the binary answers to
    Limitador's command line under that name (docs/kuadrant.md)."""
    link = os.path.join(workdir, "limitador-server")
    if not os.path.exists(link):
        os.symlink(os.path.join(DIST, "sluice"), link)
    return link


def baseline_row(name):
    """The bare tonic server that answers OK without deciding (the floor)."""
    def start(grpc, _workdir):
        return subprocess.Popen([os.path.join(DIST, "examples", "baseline_server"),
                                 f"127.0.0.1:{grpc}"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    return Row(name, start)


def reference_row(name, binary, config, redis_port, window=False):
    """envoyproxy/ratelimit on Redis at `redis_port` with `config` (the same YAML)."""
    def start(grpc, workdir):
        directory = os.path.join(workdir, "runtime", "ratelimit", "config")
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "limits.yaml"), "w") as f:
            f.write(config)
        env = {
            "PATH": os.environ["PATH"], "LOG_LEVEL": "warn", "USE_STATSD": "false",
            "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": f"127.0.0.1:{redis_port}",
            "HOST": "127.0.0.1", "PORT": str(free_port()), "DEBUG_HOST": "127.0.0.1",
            "DEBUG_PORT": str(free_port()), "GRPC_HOST": "127.0.0.1", "GRPC_PORT": str(grpc),
            "RUNTIME_ROOT": os.path.join(workdir, "runtime"), "RUNTIME_SUBDIRECTORY": "ratelimit",
            "RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true",
        }
        if window:
            env.update({"REDIS_PIPELINE_WINDOW": "150us", "REDIS_PIPELINE_LIMIT": "8"})
        return subprocess.Popen([binary], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    return Row(name, start)


def limitador_row(name, binary, limits, storage, cel=None):
    """Limitador with `limits` (a function of whether it names entries in CEL, Limitador 2 and
    later, giving its limits file) on `storage` (its command line's words); `cel` when known
    (sluice answering to Limitador's command line reads CEL)."""
    if cel is None:
        version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
        cel = any(f" {v}." in version or f" v{v}." in version for v in "23456789")

    def start(grpc, workdir):
        path = os.path.join(workdir, "limits.yaml")
        with open(path, "w") as f:
            f.write(limits(cel))
        args = [binary, "--rls-port", str(grpc), "--http-port", str(free_port()), path, *storage]
        return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Row(name, start)
