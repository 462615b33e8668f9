#!/usr/bin/env python3
"""A real HTTP webhook receiver for the notify tests (stdlib only).

Usage: receiver.py LOG.jsonl [PORT [ACTION]]   (the signing secret comes from
$CAIRN_WEBHOOK_SECRET)

Binds 127.0.0.1 on PORT (default 0: a free port) and prints the port on stdout; a test that
restarts a receiver on the same port sees a receiver that went away and came back. ACTION, when
given, answers every request (as a plan's step, below): "503" is a receiver that is up but
failing. Every request is appended to
LOG as one JSON line *before* it is answered: {"path", "n", "action", "headers" (lower-case
names), "body", "sig_valid", "sig_reason"}. The signature is checked independently of cairn,
per Standard Webhooks: key = base64-decode(secret without "whsec_"), expected =
"v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)), timestamp within 5 minutes.

Behaviour is chosen by the URL: the last path segment is a comma-separated plan, and the n-th
request (from 0) to that exact path gets plan[min(n, len - 1)]:
    ok            200 {"ok": true}
    NNN           answer status NNN (e.g. 500, 410, 408)
    429:S         429 with "Retry-After: S"
    delay:MS      sleep MS milliseconds, then 200
    reset         read the whole request, then reset the connection (RST, no answer)
    garbage       read the whole request, then answer bytes that are not HTTP and close
                  (curl: "Received HTTP/0.9 when not allowed")
    echo:K        500 whose body is K dots, then the signing secret, then " (echoed)": a
                  receiver that quotes the secret back (the notify step must scrub it)
    echob:K       the same with only the secret's base64 part (without "whsec_")
A segment that is not a plan (e.g. /hook) means "ok".
"""
import base64
import hashlib
import hmac
import json
import os
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
COUNTS = {}


def verify(secret, headers, body):
    if not secret:
        return False, "no secret configured in the receiver"
    wid = headers.get("webhook-id")
    ts = headers.get("webhook-timestamp")
    sig = headers.get("webhook-signature")
    if not wid or not ts or not sig:
        return False, "missing webhook-id/-timestamp/-signature"
    try:
        if abs(time.time() - int(ts)) > 300:
            return False, "timestamp too far from now"
    except ValueError:
        return False, "timestamp is not an integer"
    raw = secret[6:] if secret.startswith("whsec_") else secret
    key = base64.b64decode(raw)
    mac = hmac.new(key, wid.encode() + b"." + ts.encode() + b"." + body, hashlib.sha256)
    expected = base64.b64encode(mac.digest()).decode()
    for part in sig.split(" "):
        version, _, value = part.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return True, "ok"
    return False, "no v1 signature matches"


def action_for(path):
    if Handler.action:
        return 0, Handler.action
    plan = path.rstrip("/").rsplit("/", 1)[-1].split("?")[0]
    steps = plan.split(",")
    known = all(s in ("ok", "reset", "garbage") or s.isdigit() or s.startswith("429:")
                or s.startswith("delay:") or s.startswith("echo:") or s.startswith("echob:")
                for s in steps)
    with LOCK:
        n = COUNTS.get(path, 0)
        COUNTS[path] = n + 1
    if not known:
        return n, "ok"
    return n, steps[min(n, len(steps) - 1)]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_path = None
    secret = None
    action = None

    def log_message(self, fmt, *args):  # quiet: the JSONL log is the record
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        headers = {k.lower(): v for k, v in self.headers.items()}
        n, action = action_for(self.path)
        ok, why = verify(self.secret, headers, body)
        rec = {"path": self.path, "n": n, "action": action, "headers": headers,
               "body": body.decode("utf-8", "replace"), "sig_valid": ok, "sig_reason": why}
        with LOCK, open(self.log_path, "a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
        if action == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.close_connection = True
            # the descriptor closes (with RST, because of the zero linger) when finish()
            # drops the last file object of the socket
            self.connection.close()
            return
        if action == "garbage":
            self.close_connection = True
            try:
                self.wfile.write(b"garbage, not an HTTP status line\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass
            return
        status, extra = 200, {}
        if action.startswith("delay:"):
            time.sleep(int(action[6:]) / 1000.0)
        elif action.startswith("429:"):
            status, extra = 429, {"Retry-After": action[4:]}
        elif action.isdigit():
            status = int(action)
        reply = json.dumps({"ok": 200 <= status < 300, "status": status}).encode()
        if action.startswith("echo:") or action.startswith("echob:"):
            kind, _, k = action.partition(":")
            secret = self.secret if kind == "echo" else self.secret[6:]
            status, reply = 500, ("." * int(k) + secret + " (echoed)").encode()
        try:
            self.send_response(status)
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)
        except OSError:
            pass  # the client gave up (timeout): that is what some tests want

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass


def main():
    if not 2 <= len(sys.argv) <= 4:
        sys.stderr.write("usage: receiver.py LOG.jsonl [PORT [ACTION]]\n")
        return 64
    Handler.log_path = sys.argv[1]
    Handler.secret = os.environ.get("CAIRN_WEBHOOK_SECRET", "")
    Handler.action = sys.argv[3] if len(sys.argv) > 3 else None
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    srv.daemon_threads = True
    print(srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
