#!/usr/bin/env python3
"""link_check.py: is the shaped link really no faster than its rate, for a step's burst?

    link_check.py serve ADDR PORT               (in node b) answer each burst with one byte
    link_check.py send ADDR PORT MB RATE_BITS   (in node a) time MB after an idle pause

A training step sends its whole gradient after a gap of compute, and a token bucket fills up in
that gap: with a bucket as large as the gradient, the burst passes at memory speed and the "link"
shapes nothing. `send` waits 100 ms (longer than a step's compute), sends MB megabytes, and times
them until node b has them all. It prints the rate the burst got and exits 1 if it beat
RATE_BITS by more than 10%. RATE_BITS 0 (an unshaped veth) only prints.
"""
import socket
import struct
import sys
import time


def serve(addr, port):
    with socket.create_server((addr, port)) as srv:
        conn, _ = srv.accept()
        with conn:
            buf = bytearray(1 << 20)
            while True:
                head = conn.recv(8, socket.MSG_WAITALL)
                if len(head) < 8:
                    return
                left = struct.unpack("!Q", head)[0]
                while left:
                    got = conn.recv_into(buf, min(left, len(buf)))
                    if not got:
                        return
                    left -= got
                conn.sendall(b"k")


def burst(conn, data):
    start = time.perf_counter()
    conn.sendall(struct.pack("!Q", len(data)) + data)
    if conn.recv(1) != b"k":
        sys.exit("link_check: node b closed the connection")
    return time.perf_counter() - start


def send(addr, port, mb, rate_bits):
    data = bytes(int(mb * 1e6))
    with socket.create_connection((addr, port), timeout=60) as conn:
        burst(conn, data)  # slow start and buffers out of the way
        seconds = []
        for _ in range(3):
            time.sleep(0.1)
            seconds.append(burst(conn, data))
    got = len(data) * 8 / sorted(seconds)[1]
    shaped = f"shaped to {rate_bits / 1e9:g} Gbit/s" if rate_bits else "unshaped"
    print(f"link check: {mb:g} MB after 100 ms idle took {1e3 * sorted(seconds)[1]:.1f} ms, "
          f"{got / 1e9:.2f} Gbit/s ({shaped})")
    if rate_bits and got > 1.1 * rate_bits:
        sys.exit(f"link_check: the burst beat the link's rate ({got / 1e9:.2f} > "
                 f"{rate_bits / 1e9:g} Gbit/s): the token bucket lets a step's gradient through "
                 "unshaped")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) == 6 and sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]))
    else:
        sys.exit(__doc__)
