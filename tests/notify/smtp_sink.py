#!/usr/bin/env python3
"""A real SMTP server for the notify tests: aiosmtpd (Debian's python3-aiosmtpd).

Usage: smtp_sink.py LOG.jsonl   ($SMTP_SINK_AUTH="user:password" turns on AUTH PLAIN/LOGIN,
allowed without TLS because the tests are loopback only)

Binds 127.0.0.1 on a free port and prints that port on stdout. Every message that reaches the
end of DATA is appended to LOG as one JSON line before it is answered: {"mail_from",
"rcpt_tos", "data" (the raw message), "n", "action", "auth_user"}.

Behaviour is chosen by the first recipient's local part "plan.A.B..." (e.g.
plan.451.ok@example.com): the n-th message (from 0) for that recipient gets step
min(n, len - 1):
    ok        250
    NNN       reply NNN at the end of DATA (451 temporary, 550 permanent)
    slowMS    wait MS milliseconds at the end of DATA, then 250 (the client may time out)
Any other recipient means "ok".
"""
import asyncio
import json
import logging
import os
import sys

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

COUNTS = {}


class Sink:
    def __init__(self, log_path):
        self.log_path = log_path

    def action(self, rcpt):
        local = rcpt.split("@", 1)[0]
        n = COUNTS.get(rcpt, 0)
        COUNTS[rcpt] = n + 1
        if not local.startswith("plan."):
            return n, "ok"
        steps = local.split(".")[1:]
        return n, steps[min(n, len(steps) - 1)]

    async def handle_DATA(self, server, session, envelope):
        n, action = self.action(envelope.rcpt_tos[0] if envelope.rcpt_tos else "")
        user = None
        if session.auth_data is not None and isinstance(session.auth_data, LoginPassword):
            user = session.auth_data.login.decode()
        raw = envelope.original_content or envelope.content or b""
        if isinstance(raw, str):
            raw = raw.encode()
        rec = {"mail_from": envelope.mail_from, "rcpt_tos": envelope.rcpt_tos,
               "data": raw.decode("utf-8", "replace"), "n": n, "action": action,
               "auth_user": user}
        with open(self.log_path, "a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
        if action.startswith("slow"):
            await asyncio.sleep(int(action[4:]) / 1000.0)
            return "250 OK (late)"
        if action.isdigit():
            return action + (" try again later" if action.startswith("4") else " rejected")
        return "250 OK"


def make_authenticator(cred):
    user, _, password = cred.partition(":")

    def authenticator(server, session, envelope, mechanism, auth_data):
        ok = (isinstance(auth_data, LoginPassword) and auth_data.login.decode() == user
              and auth_data.password.decode() == password)
        return AuthResult(success=ok, auth_data=auth_data if ok else None)

    return authenticator


async def serve(log_path):
    handler = Sink(log_path)
    cred = os.environ.get("SMTP_SINK_AUTH")
    loop = asyncio.get_running_loop()

    def factory():
        kw = {"hostname": "sink.test", "loop": loop}
        if cred:
            kw.update(authenticator=make_authenticator(cred), auth_require_tls=False)
        return SMTP(handler, **kw)

    server = await loop.create_server(factory, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main():
    logging.getLogger("mail.log").setLevel(logging.ERROR)  # aiosmtpd's deprecation chatter
    if len(sys.argv) != 2:
        sys.stderr.write("usage: smtp_sink.py LOG.jsonl\n")
        return 64
    try:
        asyncio.run(serve(sys.argv[1]))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
