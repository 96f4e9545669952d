#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The example's stand-in for an internal "run-record API", on the host.

Usage: run_records_api.py [--port N] [--port-file FILE] [--log FILE]

  POST /v1/run-records   stores the JSON object it is sent; 201 {"id": ...}
  GET  /v1/run-records   {"records": [{"id", "received_unix_ms", "record"}, ...]}

Listens on 127.0.0.1 only (port 0, the default, means any free port: it then
writes the port it got to --port-file, so nothing races for it). One request
per connection (HTTP/1.0 style: the answer ends with the connection). Every
connection is logged to --log as one JSON line with the bytes it received and
sent on the socket, which is what sbxd's egress close record must count for
the same connection. Standard library only; stops on SIGTERM or SIGINT.
"""

import argparse
import io
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PATH = "/v1/run-records"
MAX_BODY = 1 << 20  # what a sandbox may send is bounded, as any input is


class CountingIn(io.RawIOBase):
    """The socket's receiving side, counting every byte read from it."""

    def __init__(self, sock):
        super().__init__()
        self.sock = sock
        self.count = 0

    def readable(self):
        return True

    def readinto(self, buf):
        n = self.sock.recv_into(buf)
        self.count += n
        return n


class CountingOut:
    """The socket's sending side (unbuffered, as http.server's own)."""

    def __init__(self, sock):
        self.sock = sock
        self.count = 0

    def write(self, data):
        self.sock.sendall(data)
        self.count += len(data)
        return len(data)

    def flush(self):
        pass


class Store:
    def __init__(self):
        self.lock = threading.Lock()
        self.records = []

    def add(self, record):
        with self.lock:
            rid = "rr-%d" % (len(self.records) + 1)
            self.records.append({"id": rid, "received_unix_ms": int(time.time() * 1000),
                                 "record": record})
            return rid

    def all(self):
        with self.lock:
            return list(self.records)


class Handler(BaseHTTPRequestHandler):
    server_version = "run-records/1"
    store = None
    log_file = None
    log_lock = threading.Lock()

    def setup(self):
        # StreamRequestHandler.setup, with counting streams.
        self.connection = self.request
        self.connection.settimeout(10)
        self.counted_in = CountingIn(self.connection)
        self.rfile = io.BufferedReader(self.counted_in)
        self.wfile = CountingOut(self.connection)
        self.status = 0
        self.command = self.path = ""

    def finish(self):
        self.rfile.close()
        entry = {"peer": "%s:%d" % self.client_address[:2], "method": self.command,
                 "path": self.path, "status": self.status,
                 "bytes_received": self.counted_in.count, "bytes_sent": self.wfile.count}
        if self.log_file:
            with self.log_lock, open(self.log_file, "a") as f:
                f.write(json.dumps(entry) + "\n")

    def log_request(self, code="-", size="-"):
        self.status = int(code) if str(code).isdigit() else 0

    def log_message(self, fmt, *args):
        pass  # the JSON log above says what happened

    def answer(self, code, obj, extra=()):
        body = (json.dumps(obj, indent=1) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_error(self, code, message=None, explain=None):
        # A bad request line or header: a JSON error too, and logged.
        self.close_connection = True
        self.answer(code, {"error": message or self.responses.get(code, ("",))[0]})

    def do_GET(self):
        if self.path != PATH:
            return self.answer(404, {"error": "no such resource: use " + PATH})
        self.answer(200, {"records": self.store.all()})

    def do_POST(self):
        if self.path != PATH:
            return self.answer(404, {"error": "no such resource: use " + PATH})
        ctype = self.headers.get("Content-Type", "").split(";")[0].strip()
        if ctype != "application/json":
            return self.answer(415, {"error": "Content-Type must be application/json"})
        length = self.headers.get("Content-Length", "")
        if not length.isdigit():
            return self.answer(411, {"error": "Content-Length required"})
        if int(length) > MAX_BODY:
            return self.answer(413, {"error": "at most %d bytes" % MAX_BODY})
        body = self.rfile.read(int(length))
        try:
            record = json.loads(body)
        except ValueError as e:
            return self.answer(400, {"error": "not JSON: %s" % e})
        if not isinstance(record, dict):
            return self.answer(400, {"error": "a JSON object is expected"})
        rid = self.store.add(record)
        self.answer(201, {"id": rid}, [("Location", "%s/%s" % (PATH, rid))])

    def do_PUT(self):
        self.answer(405, {"error": "GET or POST"}, [("Allow", "GET, POST")])

    do_DELETE = do_PATCH = do_PUT


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--log")
    a = ap.parse_args()

    Handler.store = Store()
    Handler.log_file = a.log
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    port = srv.server_address[1]
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.rename(tmp, a.port_file)  # whole or absent for whoever waits for it

    def stop(sig, frame):
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("run-records API on 127.0.0.1:%d" % port, file=sys.stderr, flush=True)
    srv.serve_forever()
    srv.server_close()


if __name__ == "__main__":
    main()
