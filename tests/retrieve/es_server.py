#!/usr/bin/env python3
"""A tiny Elasticsearch look-alike for the retrieve step's HTTP tests (loopback only).

Listens on 127.0.0.1 on a free port and prints "PORT <n>" on stdout. The first path segment
picks the behaviour:
  /ok/...       checks the body is {"size": K, "query": {"match": {FIELD: QUERY}}} (else 400) and
                answers min(K, 3) hits whose _source.FIELD is "echo <QUERY>" and _id d1, d2, d3
  /many/...     like ok, but always answers 5 hits, ignoring size
  /500, /503, /429, /400, /404   that status with a small JSON error body
  /garbage      200 with a body that is not JSON
  /nohits       200 with {"took": 1} (no hits.hits)
  /badhit       200 with a hit whose _source lacks the text field
  /badscore     200 with a hit whose _score is a string
  /slow         sleeps 3 s, then answers like ok
"""
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def hits(field, query, n):
    return [{"_index": "products", "_id": "d%d" % (i + 1), "_score": 3.5 - i,
             "_source": {field: "echo " + query, "rank": i + 1}} for i in range(n)]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, ctype="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        mode = self.path.strip("/").split("/")[0]
        if mode in ("500", "503", "429", "400", "404"):
            return self.reply(int(mode), {"error": {"type": "test", "reason": "mode " + mode},
                                          "status": int(mode)})
        if mode == "garbage":
            return self.reply(200, b"<html>this is not json</html>", "text/html")
        if mode == "nohits":
            return self.reply(200, {"took": 1})
        try:
            body = json.loads(raw)
            size = body["size"]
            match = body["query"]["match"]
            assert isinstance(size, int) and len(body) == 2 and len(body["query"]) == 1
            assert len(match) == 1
            (field, query), = match.items()
            assert isinstance(query, str)
        except Exception as e:  # the request is not the shape the step must send
            return self.reply(400, {"error": "bad request body: %r (%s)" % (raw, e)})
        if self.headers.get("Content-Type") != "application/json":
            return self.reply(400, {"error": "Content-Type must be application/json"})
        if mode == "slow":
            time.sleep(3)
        if mode == "badhit":
            h = hits(field, query, 2)
            del h[1]["_source"][field]
            return self.reply(200, {"hits": {"hits": h}})
        if mode == "badscore":
            h = hits(field, query, 2)
            h[0]["_score"] = "high"
            return self.reply(200, {"hits": {"hits": h}})
        n = 5 if mode == "many" else min(size, 3)
        return self.reply(200, {"took": 2, "hits": {"total": {"value": n}, "hits": hits(field, query, n)}})


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    print("PORT %d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
