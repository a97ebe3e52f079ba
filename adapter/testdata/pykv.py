#!/usr/bin/env python3
"""A key-value store that knows nothing of Neptune beyond two headers.

Standard library only. POST /put with body "key=value", POST /get with body
"key" (404 if missing), GET /check answers whether the write with the
Neptune-LSN header was applied to the Neptune-Partition partition. Prints
"listening <port>" once it accepts connections.
"""
import http.server
import sys
import threading

lock = threading.Lock()
data = {}  # partition -> {key: value}
lsns = {}  # partition -> last applied LSN


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, code, body):
        b = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n).decode()

    def do_POST(self):
        part = self.headers["Neptune-Partition"]
        lsn = int(self.headers.get("Neptune-LSN") or 0)
        text = self.body()
        if self.path == "/put":
            key, sep, value = text.partition("=")
            if not sep or not key:
                return self.reply(400, "put wants key=value, got %r" % text)
            with lock:
                data.setdefault(part, {})[key] = value
                lsns[part] = max(lsns.get(part, 0), lsn)
            return self.reply(200, "ok")
        if self.path == "/get":
            with lock:
                value = data.get(part, {}).get(text)
            if value is None:
                return self.reply(404, "no key %r in partition %s" % (text, part))
            return self.reply(200, value)
        self.reply(404, "no route " + self.path)

    def do_GET(self):
        if self.path == "/check":
            part = self.headers["Neptune-Partition"]
            lsn = int(self.headers["Neptune-LSN"])
            with lock:
                applied = lsn <= lsns.get(part, 0)
            return self.reply(200, "true" if applied else "false")
        self.reply(404, "no route " + self.path)


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("listening", server.server_address[1], flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    sys.exit(0)
