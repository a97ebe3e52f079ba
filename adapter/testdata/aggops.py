#!/usr/bin/env python3
"""Aggregation operators in a program of their own (adapter aggregate).

Standard library only. Partition p contributes p+1; reduce adds. The local
operator's params may be JSON {"crash": [partitions], "hang": [partitions]}:
a listed partition's operator crashes (exec: the process kills itself with
SIGKILL; HTTP: the handler dies without answering) or hangs.

  aggops.py local|reduce   exec: NEPTUNE_PARTITION, params or the reduce
                           frames on stdin, the result on stdout
  aggops.py serve          HTTP: POST /local, /reduce (Neptune-Partition,
                           Neptune-Operator); prints "listening <port>"
"""
import base64
import http.server
import json
import os
import signal
import sys
import time


def frames(body):
    out = []
    for line in body.splitlines():
        if not line.strip():
            continue
        f = json.loads(line)
        out.append(f["data"].encode() if f.get("data") is not None else base64.b64decode(f["base64"]))
    return out


def local(partition, params, crash):
    faults = json.loads(params) if params.strip() else {}
    if partition in faults.get("crash", []):
        crash()
    if partition in faults.get("hang", []):
        time.sleep(600)
    return str(partition + 1)


def reduce(body):
    a, b, _params = frames(body)
    return str(int(a) + int(b))


def die():
    os.kill(os.getpid(), signal.SIGKILL)


class Crash(Exception):
    pass


def die_in_handler():
    raise Crash("operator crashed")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle_error(self, *args):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n).decode()
        if self.path == "/local" and self.headers["Neptune-Operator"] == "local":
            out = local(int(self.headers["Neptune-Partition"]), body, die_in_handler)
        elif self.path == "/reduce" and self.headers["Neptune-Operator"] == "reduce":
            out = reduce(body)
        else:
            self.send_error(404)
            return
        b = out.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a crashed operator: its connection closes without an answer


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "serve":
        srv = Server(("127.0.0.1", 0), Handler)
        print("listening", srv.server_address[1], flush=True)
        srv.serve_forever()
    elif mode == "local":
        sys.stdout.write(local(int(os.environ["NEPTUNE_PARTITION"]), sys.stdin.read(), die))
    elif mode == "reduce":
        sys.stdout.write(reduce(sys.stdin.read()))
    else:
        sys.exit("mode must be local, reduce or serve")
