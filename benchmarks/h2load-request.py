#!/usr/bin/env python3
"""Writes one gRPC-framed ShouldRateLimit request for h2load, and prints the h2load command.

   benchmarks/h2load-request.py --domain demo --descriptor algorithm=fixed_window > /tmp/req.bin

The message is encoded by hand (protobuf wire format, field numbers of Envoy's rls.proto:
RateLimitRequest.domain = 1, .descriptors = 2; RateLimitDescriptor.entries = 1;
Entry.key = 1, .value = 2), then framed as gRPC: a zero byte and the big-endian length.
"""
import argparse
import struct
import sys


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def request(domain, descriptors):
    body = field(1, domain.encode())
    for entries in descriptors:
        descriptor = b"".join(field(1, field(1, k.encode()) + field(2, v.encode())) for k, v in entries)
        body += field(2, descriptor)
    return body


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--domain", default="demo")
    parser.add_argument("--descriptor", action="append", default=[], help="key=value[,key=value]")
    parser.add_argument("--target", default="http://127.0.0.1:8081")
    args = parser.parse_args()
    descriptors = [[tuple(pair.split("=", 1)) for pair in d.split(",")] for d in args.descriptor or ["algorithm=fixed_window"]]
    message = request(args.domain, descriptors)
    sys.stdout.buffer.write(b"\x00" + struct.pack(">I", len(message)) + message)
    print(
        "h2load -n 200000 -c 4 -m 32 -H 'content-type: application/grpc' -H 'te: trailers' "
        f"-d REQUEST_FILE {args.target}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
