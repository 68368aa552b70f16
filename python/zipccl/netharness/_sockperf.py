"""A tiny iperf: run as a script (no zipccl or torch import, so it starts in
milliseconds) inside a namespace.

    python3 _sockperf.py recv PORT          # prints "ready PORT", then "<bytes> <seconds>" per flow
    python3 _sockperf.py send HOST PORT SECONDS
    python3 _sockperf.py recv PORT FLOWS    # waits for FLOWS senders (PORT 0: any free port)
    python3 _sockperf.py echo PORT          # echoes one connection; with:
    python3 _sockperf.py ping HOST PORT N   # prints the median of N 1-byte round trips

The receiver times each flow from its first to its last byte, which is what
the link delivered; the sender just writes as fast as TCP lets it.
"""

import socket
import sys
import threading
import time

CHUNK = 1 << 20


def _recv_flow(conn: socket.socket, results: list, index: int) -> None:
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    total = 0
    first = last = None
    while True:
        n = conn.recv_into(view)
        if n == 0:
            break
        now = time.perf_counter()
        if first is None:
            first = now
        last = now
        total += n
    conn.close()
    results[index] = (total, (last - first) if first is not None else 0.0)


def recv(port: int, flows: int) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(flows)
    print(f"ready {srv.getsockname()[1]}", flush=True)
    results: list = [None] * flows
    threads = []
    for i in range(flows):
        conn, _ = srv.accept()
        t = threading.Thread(target=_recv_flow, args=(conn, results, i))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    for total, seconds in results:
        print(f"{total} {seconds:.6f}", flush=True)


def send(host: str, port: int, seconds: float) -> None:
    payload = bytes(CHUNK)
    deadline = time.monotonic() + 10
    while True:
        try:
            s = socket.create_connection((host, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s.sendall(payload)
    s.shutdown(socket.SHUT_WR)
    s.close()


def echo(port: int) -> None:
    """Echoes one connection's bytes back until it closes."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    print(f"ready {srv.getsockname()[1]}", flush=True)
    conn, _ = srv.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        data = conn.recv(64)
        if not data:
            break
        conn.sendall(data)


def ping(host: str, port: int, count: int) -> None:
    """Prints the median round trip of count 1-byte ping-pongs, in seconds."""
    s = socket.create_connection((host, port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(count):
        t0 = time.perf_counter()
        s.sendall(b"x")
        s.recv(1)
        rtts.append(time.perf_counter() - t0)
    s.close()
    rtts.sort()
    print(f"{rtts[len(rtts) // 2]:.6f}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "recv":
        recv(int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    elif sys.argv[1] == "echo":
        echo(int(sys.argv[2]))
    elif sys.argv[1] == "ping":
        ping(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
