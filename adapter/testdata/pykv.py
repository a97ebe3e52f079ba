#!/usr/bin/env python3
"""A key-value store that knows nothing of Neptune beyond two headers.

Standard library only. POST /put with body "key=value", POST /get with body
"key" (404 if missing), GET /check answers whether the write with the
Neptune-LSN header was applied to the Neptune-Partition partition; POST /talk
is a stream (chunked NDJSON both ways). Prints
"listening <port>" once it accepts connections.
"""
import http.server
import json
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
        if self.path == "/talk":
            return self.talk()
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

    def talk(self):
        """A read stream: each message (an NDJSON line of the chunked body)
        answered at once with its text in capitals after the partition,
        until the caller ends its side; "bye" ends the stream from here."""
        part = self.headers["Neptune-Partition"]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for line in self.chunked_lines():
            if not line.strip():
                continue
            text = json.loads(line)["data"]
            if text == "bye":
                break
            out = (json.dumps({"data": "%s:%s" % (part, text.upper())}) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(out), out))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        self.close_connection = True

    def chunked_lines(self):
        """The lines of a chunked request body, as they arrive."""
        buf = b""
        while True:
            size = self.rfile.readline()
            if not size:
                break
            n = int(size.split(b";")[0], 16)
            if n == 0:
                break
            buf += self.rfile.read(n)
            self.rfile.readline()  # the chunk's CRLF
            *lines, buf = buf.split(b"\n")
            yield from lines
        if buf:
            yield buf

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
