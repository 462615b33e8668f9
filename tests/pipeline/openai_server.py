#!/usr/bin/env python3
"""A small OpenAI-compatible streaming server for the generate step's "openai" backend tests.

Usage: openai_server.py LOG [PORT]   (prints the port it listens on, then serves until killed)

The URL's path says how to behave: /<tag>/<options>/v1/completions (or .../chat/completions),
options comma-separated:
  delay=MS     sleep MS before each chunk
  fail=CODE:N  the first N requests of the tag get HTTP CODE (429 adds Retry-After: 1);
               N omitted: every request
  slow=S       the first request of the tag waits S seconds before answering
  cut=K        the first request of the tag sends K chunks, then the connection is dropped
  bad=K        after K chunks, a line that is not JSON (every request)
  errevent=K   the first request sends K chunks, then an error event (code 500)

The "model" is deterministic and continuation-friendly: the answer is the tokens " z<i>" for
i from the number of such tokens the prompt already ends with (0 for chat), up to i = 19, then
finish_reason "stop" (or "length" when max_tokens ends it first). So a continuation prompt
(the prompt plus the text so far) yields the rest of the same text.

Every request is logged to LOG as a JSON line {"t", "tag", "opts", "path", "auth", "body"},
and every chunk sent as {"t", "tag", "sent": k}, so a test can see what arrived and when to kill.
"""
import json
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = sys.argv[1]
PORT = int(sys.argv[2]) if len(sys.argv) > 2 else 0
END = 20
lock = threading.Lock()
counts = {}


def log(rec):
    rec["t"] = time.time()
    with lock:
        with open(LOG, "a") as f:
            f.write(json.dumps(rec) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def error(self, code, msg):
        body = json.dumps({"error": {"message": msg, "type": "invalid_request_error",
                                     "code": code}}).encode()
        self.send_response(code)
        if code == 429:
            self.send_header("Retry-After", "1")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n)
        parts = self.path.strip("/").split("/")
        tag, opts = parts[0], dict(
            (o.split("=", 1) + [""])[:2] for o in parts[1].split(",") if o)
        chat = self.path.endswith("/chat/completions")
        with lock:
            counts[tag] = counts.get(tag, 0) + 1
            nth = counts[tag]
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        log({"tag": tag, "opts": opts, "path": self.path, "nth": nth,
             "auth": self.headers.get("Authorization"), "body": body})
        if "fail" in opts:
            code, _, times = opts["fail"].partition(":")
            if not times or nth <= int(times):
                msgs = {401: "Incorrect API key provided", 404: "model 'x' not found",
                        400: "bad request", 429: "rate limited", 500: "internal error",
                        503: "loading model"}
                return self.error(int(code), msgs.get(int(code), "failed"))
        if body is None:
            return self.error(400, "body is not JSON")
        if "slow" in opts and nth == 1:
            time.sleep(float(opts["slow"]))
        if chat:
            start = 0
        else:
            m = re.search(r"((?: z\d+)*)$", body.get("prompt", ""))
            start = len(re.findall(r" z\d+", m.group(1)))
        max_tokens = body.get("max_tokens", 16)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.chunk(b": keep-alive\n\n")
        delay = float(opts.get("delay", "0")) / 1000
        sent = 0
        i = start
        finish = None
        while finish is None:
            if i >= END:
                finish = "stop"
                break
            if sent >= max_tokens:
                finish = "length"
                break
            if delay:
                time.sleep(delay)
            if "cut" in opts and nth == 1 and sent == int(opts["cut"]):
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if "bad" in opts and sent == int(opts["bad"]):
                self.chunk(b'data: {"choices": [{"text": \n\n')
                self.wfile.write(b"0\r\n\r\n")
                return
            if "errevent" in opts and nth == 1 and sent == int(opts["errevent"]):
                ev = {"error": {"code": 500, "message": "slot crashed", "type": "server_error"}}
                self.chunk(b"data: " + json.dumps(ev).encode() + b"\n\n")
                self.wfile.write(b"0\r\n\r\n")
                return
            piece = " z%d" % i
            if chat:
                c = {"choices": [{"index": 0, "delta": {"content": piece},
                                  "finish_reason": None}]}
            else:
                c = {"choices": [{"index": 0, "text": piece, "finish_reason": None}]}
            c["model"] = body.get("model")
            self.chunk(b"data: " + json.dumps(c).encode() + b"\n\n")
            sent += 1
            i += 1
            log({"tag": tag, "sent": sent})
        last = {"choices": [{"index": 0, "finish_reason": finish}]}
        last["choices"][0]["delta" if chat else "text"] = {} if chat else ""
        self.chunk(b"data: " + json.dumps(last).encode() + b"\n\n")
        if (body.get("stream_options") or {}).get("include_usage"):
            u = {"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": sent}}
            self.chunk(b"data: " + json.dumps(u).encode() + b"\n\n")
        self.chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")


class Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True


srv = Server(("127.0.0.1", PORT), Handler)
print(srv.server_address[1], flush=True)
srv.serve_forever()
