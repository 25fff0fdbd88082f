"""A Linux client of the Reed-Solomon encoder over TCP (examples/rs_apiary.py): plain sockets,
one request outstanding per connection, every parity byte checked against the Python model.

    python examples/rs_client.py 10.0.0.2 [--port 7300] [--requests 10] [--connections 1]
                                          [--shard-bytes 512] [--seed 1] [--json]

Prints requests per second and the latencies seen from Linux; exits 1 if any reply differs
from the model's parity (and says which).
"""

import argparse
import json
import random
import socket
import sys
import threading
import time

from beehive.apps.reed_solomon import encode_shards

RS_PORT = 7300


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        if not chunk:
            raise ConnectionError(f"the connection closed after {len(got)} of {n} bytes")
        got += chunk
    return bytes(got)


def one_connection(host: str, port: int, requests: int, shard_bytes: int, seed: int,
                   timeout: float = 120.0) -> dict:
    """``requests`` requests on one connection; the count of wrong replies and the latencies
    (seconds)."""
    rng = random.Random(seed)
    wrong, latencies = [], []
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for k in range(requests):
            shards = [rng.randbytes(shard_bytes) for _ in range(8)]
            start = time.monotonic()
            s.sendall(b"".join(shards))
            reply = recv_exactly(s, 2 * shard_bytes)
            latencies.append(time.monotonic() - start)
            if reply != b"".join(encode_shards(shards)):
                wrong.append(k)
        s.shutdown(socket.SHUT_WR)
        rest = s.recv(1)                # the encoder closes after the peer's FIN
    return {"requests": requests, "wrong": wrong, "latencies": latencies, "eof": rest == b""}


def run(host: str, port: int = RS_PORT, requests: int = 10, connections: int = 1,
        shard_bytes: int = 512, seed: int = 1) -> dict:
    """``connections`` connections at once, each with ``requests`` requests."""
    results: list = [None] * connections

    def worker(i: int) -> None:
        try:
            results[i] = one_connection(host, port, requests, shard_bytes, seed * 1000 + i)
        except OSError as e:
            results[i] = {"error": repr(e)}

    start = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - start
    done = sum(r.get("requests", 0) for r in results)
    latencies = sorted(x for r in results for x in r.get("latencies", []))
    return {"connections": results, "requests": done, "seconds": round(seconds, 3),
            "requests_per_second": round(done / seconds, 1) if seconds else None,
            "median_latency_ms": (round(1000 * latencies[len(latencies) // 2], 3)
                                  if latencies else None),
            "ok": all("error" not in r and not r["wrong"] and r["eof"] for r in results)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("host")
    parser.add_argument("--port", type=int, default=RS_PORT)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--shard-bytes", type=int, default=512)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    res = run(args.host, args.port, args.requests, args.connections, args.shard_bytes,
              args.seed)
    if args.json:
        print(json.dumps(res))
    else:
        for i, r in enumerate(res["connections"]):
            if "error" in r:
                print(f"connection {i}: {r['error']}")
            elif r["wrong"]:
                print(f"connection {i}: wrong parity in requests {r['wrong']}")
        print(f"{res['requests']} requests in {res['seconds']} s "
              f"({res['requests_per_second']} per second), median latency "
              f"{res['median_latency_ms']} ms: {'all parity right' if res['ok'] else 'FAILED'}")
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
