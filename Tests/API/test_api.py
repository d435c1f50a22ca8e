#!/usr/bin/env python3
"""The HTTP API against its contract, docs/openapi.yaml, and examples/echo_bot.py against a real server.

A real `courier serve` on loopback (SQLite in a temporary folder), the `courier` CLI beside it (users, bots), and every
request and answer of the API checked against docs/openapi.yaml by PyPI's openapi-core (no code of Courier's):
a request the contract does not describe, or an answer it does not allow (a missing member, one more, a wrong type,
a status it does not list), fails the test. The example bot runs as its users would run it.

Run by scripts/test (which installs openapi-core); alone: `python3 Tests/API/test_api.py [-v] [TestName]`.
Environment: COURIER_BIN (default .build/debug/courier).
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import standardwebhooks

from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
COURIER = os.path.abspath(os.environ.get("COURIER_BIN", os.path.join(ROOT, ".build/debug/courier")))
CONTRACT = OpenAPI.from_file_path(os.path.join(ROOT, "docs/openapi.yaml"))
LIMIT = 60


def wait_until(condition, what, limit=LIMIT):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


class Server:
    """`courier serve` on loopback, on ports of its own, with the CLI beside it."""

    def __init__(self, folder):
        self.folder = folder
        self.data = os.path.join(folder, "data")
        self.home = os.path.join(folder, "home")
        os.makedirs(self.home, exist_ok=True)
        self.env = dict(os.environ, HOME=self.home, XDG_CONFIG_HOME=os.path.join(self.home, "config"),
                        XDG_DATA_HOME=os.path.join(self.home, "share"))
        self.process = subprocess.Popen(
            [COURIER, "serve", "--data", self.data, "--port", "0", "--compat-port", "0", "--http-port", "0",
             "--log-level", "warning", "--limit", "api-request-burst=1000", "--limit", "api-requests-per-second=1000",
             # The webhook receiver is on loopback.
             "--allow-private-targets"],
            stdout=subprocess.PIPE, stderr=sys.stderr, text=True, env=self.env)
        line = self.process.stdout.readline()
        match = re.search(r"native [\d.]+:(\d+), compat [\d.]+:(\d+), http [\d.]+:(\d+)", line)
        if not match:
            raise RuntimeError("courier serve did not start: %r" % line)
        self.native, self.http = match.group(1), match.group(3)
        self.base = "http://127.0.0.1:%s" % self.http
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)
        self.process.stdout.close()

    def cli(self, *arguments):
        data = ["--data", self.data] if arguments[0] in ("user", "bot", "group", "hook") else ["--server", "127.0.0.1:" + self.native]
        done = subprocess.run([COURIER, *arguments, *data], capture_output=True, text=True, env=self.env, timeout=120)
        if done.returncode != 0:
            raise AssertionError("courier %s failed: %s" % (" ".join(arguments), done.stderr))
        return done.stdout


class Answer:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    @property
    def json(self):
        return json.loads(self.body) if self.body else None

    @property
    def code(self):
        return (self.json or {}).get("error", {}).get("code")

    def __repr__(self):
        return "%d %s" % (self.status, self.body[:300])


def call(server, method, path, token=None, body=None, raw=None, headers=None, content_type="application/json",
         check_request=True):
    """One request, its request and its answer validated against the contract (the request not, when it is meant
    to break it)."""
    headers = dict(headers or {})
    if token is not None:
        headers["Authorization"] = "Bearer " + token
    data = raw if raw is not None else (json.dumps(body, ensure_ascii=False).encode() if body is not None else None)
    if data is not None:
        headers["Content-Type"] = content_type
    request = urllib.request.Request(server.base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = Answer(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as error:
        answer = Answer(error.code, dict(error.headers), error.read())
    url = urllib.parse.urlsplit(path)
    args = {key: values[0] for key, values in urllib.parse.parse_qs(url.query).items()}
    mock_request = MockRequest(server.base, method.lower(), url.path, args=args,
                               headers={k.lower(): v for k, v in headers.items()}, data=data,
                               content_type=headers.get("Content-Type", "application/json"))
    if check_request:
        CONTRACT.validate_request(mock_request)
    response_type = answer.headers.get("Content-Type", "application/json").split(";")[0]
    mock_response = MockResponse(answer.body, status_code=answer.status,
                                 headers={k.lower(): v for k, v in answer.headers.items()},
                                 content_type=response_type)
    CONTRACT.validate_response(mock_request, mock_response)
    return answer


class APITests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="courier-api-")
        cls.server = Server(cls.folder)
        cls.server.cli("user", "add", "alice", "--password", "alice-pw-1")
        cls.server.cli("user", "add", "bob", "--password", "bob-pw-22")
        output = cls.server.cli("bot", "create", "helper", "--owner", "alice")
        # Only the token, on one line.
        assert re.fullmatch(r"ct_[A-Za-z0-9_-]+\n", output), repr(output)
        cls.token = output.strip()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        subprocess.run(["rm", "-rf", cls.folder], check=False)

    def send_as(self, user, password, text, to=None, group=None):
        target = ["--to", to] if to else ["--group", group]
        self.server.cli("send", "--as", user, "--password", password, *target, text)

    def history_of(self, user, password, *where):
        output = self.server.cli("history", "--as", user, "--password", password, *where, "--json")
        return [json.loads(line) for line in output.splitlines() if line.strip()]

    def test_01_me_and_tokens(self):
        me = call(self.server, "GET", "/api/v1/me", self.token)
        self.assertEqual(me.status, 200)
        self.assertEqual(me.json["user"], "helper")
        self.assertTrue(me.json["bot"])
        for token in (None, "ct_nonsense"):
            refused = call(self.server, "GET", "/api/v1/me", token, check_request=token is not None)
            self.assertEqual(refused.status, 401)
            self.assertEqual(refused.headers.get("WWW-Authenticate"), "Bearer")
        listed = self.server.cli("bot", "list")
        self.assertRegex(listed, r"^helper\towner alice\tcreated .*\t1 token\n$")

    def test_02_updates_send_edit_react_recall_history(self):
        self.send_as("alice", "alice-pw-1", "你好 helper, مرحبا 👋", to="helper")
        first = call(self.server, "GET", "/api/v1/updates?timeout=10", self.token)
        self.assertEqual(first.status, 200)
        updates = first.json["updates"]
        self.assertEqual([u["message"]["text"] for u in updates], ["你好 helper, مرحبا 👋"])
        message = updates[0]["message"]
        self.assertEqual((message["from"], message["to"]), ("alice", "helper"))

        sent = call(self.server, "POST", "/api/v1/messages", self.token,
                    {"to": "alice", "text": "收到", "reply_to": message["seq"]}, headers={"Idempotency-Key": "k-1"})
        self.assertEqual(sent.status, 201, sent)
        again = call(self.server, "POST", "/api/v1/messages", self.token,
                     {"to": "alice", "text": "收到", "reply_to": message["seq"]}, headers={"Idempotency-Key": "k-1"})
        self.assertEqual((again.status, again.json["seq"], again.json["duplicate"]), (200, sent.json["seq"], True))

        edited = call(self.server, "POST", "/api/v1/messages/edit", self.token,
                      {"to": "alice", "seq": sent.json["seq"], "text": "收到了"})
        self.assertEqual(edited.status, 204, edited)
        reacted = call(self.server, "POST", "/api/v1/messages/react", self.token,
                       {"to": "alice", "seq": message["seq"], "reaction": "👍"})
        self.assertEqual(reacted.status, 204, reacted)
        page = call(self.server, "GET", "/api/v1/history?to=alice&limit=10", self.token)
        self.assertEqual([m["text"] for m in page.json["messages"]], ["收到了", "你好 helper, مرحبا 👋"])
        self.assertEqual(page.json["messages"][0]["reply_to"]["seq"], message["seq"])
        recalled = call(self.server, "POST", "/api/v1/messages/recall", self.token, {"to": "alice", "id": "k-1"})
        self.assertEqual(recalled.status, 204, recalled)
        self.assertTrue(call(self.server, "GET", "/api/v1/history?to=alice", self.token).json["messages"][0]["recalled"])

        # Acknowledged, gone for good.
        acked = call(self.server, "GET", "/api/v1/updates?offset=%d" % (updates[-1]["update_id"] + 1), self.token)
        self.assertEqual(acked.json["updates"], [])
        self.assertEqual(call(self.server, "GET", "/api/v1/updates", self.token).json["updates"], [])

    def test_03_refusals_are_the_contracts(self):
        cases = [
            ({"to": "nobody", "text": "x"}, None, 404, "unknown-user"),
            ({"group": "nowhere", "text": "x"}, None, 404, "unknown-group"),
            ({"to": "alice", "text": ""}, None, 400, "empty-message"),
            (None, b"{broken", 400, "invalid-request"),
        ]
        for body, raw, status, code in cases:
            answer = call(self.server, "POST", "/api/v1/messages", self.token, body, raw=raw, check_request=raw is None)
            self.assertEqual((answer.status, answer.code), (status, code), answer)
        unknown = call(self.server, "POST", "/api/v1/messages/recall", self.token, {"to": "alice", "id": "no-such"})
        self.assertEqual((unknown.status, unknown.code), (404, "unknown-message"))
        bad = call(self.server, "GET", "/api/v1/updates?timeout=-3", self.token, check_request=False)
        self.assertEqual((bad.status, bad.code), (400, "invalid-request"))
        missing = call(self.server, "GET", "/api/v1/media/" + "0" * 64, self.token)
        self.assertEqual((missing.status, missing.code), (404, "unknown-media"))

    def test_04_media(self):
        pdf = b"%PDF-1.4\n" + bytes(range(256)) * 100
        stored = call(self.server, "POST", "/api/v1/media?name=%E6%8A%A5%E5%91%8A.pdf", self.token, raw=pdf,
                      content_type="application/pdf")
        self.assertEqual(stored.status, 201, stored)
        self.assertEqual(stored.json["name"], "报告.pdf")
        sent = call(self.server, "POST", "/api/v1/messages", self.token,
                    {"to": "bob", "text": "这是报告",
                     "media": {"sha256": stored.json["sha256"], "size": len(pdf), "mime": "application/pdf",
                               "name": "报告.pdf", "kind": "file"}})
        self.assertEqual(sent.status, 201, sent)
        got = call(self.server, "GET", "/api/v1/media/" + stored.json["sha256"], self.token)
        self.assertEqual(got.status, 200)
        self.assertEqual(got.body, pdf)
        # Not a page on the server's origin: a download.
        self.assertEqual(got.headers.get("Content-Disposition"), "attachment")

    def test_05_echo_bot(self):
        """examples/echo_bot.py as its users run it: it answers each message where it came from, once."""
        token = self.server.cli("bot", "create", "echo", "--owner", "bob").strip()
        self.server.cli("group", "create", "team", "--owner", "bob", "--members", "alice,echo")
        bot = subprocess.Popen([sys.executable, os.path.join(ROOT, "examples/echo_bot.py"), "--count", "2"],
                               env=dict(os.environ, COURIER_URL=self.server.base, COURIER_TOKEN=token),
                               stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
        try:
            self.assertEqual(bot.stdout.readline().strip(), "echoing as echo")
            self.send_as("bob", "bob-pw-22", "ping 🏓 右から左: שלום", to="echo")
            self.send_as("alice", "alice-pw-1", "大家好", group="team")
            bot.wait(timeout=LIMIT)
            self.assertEqual(bot.returncode, 0)
        finally:
            if bot.poll() is None:
                bot.kill()
            bot.stdout.close()
        texts = [m["text"] for m in self.history_of("bob", "bob-pw-22", "--with", "echo")]
        self.assertEqual(sorted(texts), sorted(["ping 🏓 右から左: שלום"] * 2))
        team = self.history_of("alice", "alice-pw-1", "--group", "team")
        echoed = [m for m in team if m["from"] == "echo"]
        self.assertEqual([m["text"] for m in echoed], ["大家好"])

    def test_05b_webhook_and_incoming_hook(self):
        """A webhook's deliveries verified with PyPI's standardwebhooks; an incoming hook made by the CLI."""
        received = []

        class Receiver(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                received.append((body, dict(self.headers)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=receiver.serve_forever, daemon=True).start()
        try:
            token = self.server.cli("bot", "create", "hooked", "--owner", "alice").strip()
            url = "http://127.0.0.1:%d/in" % receiver.server_port
            set_ = call(self.server, "PUT", "/api/v1/webhook", token, {"url": url})
            self.assertEqual(set_.status, 200, set_)
            secret = set_.json["secret"]
            self.send_as("alice", "alice-pw-1", "webhook 你好 👋", to="hooked")
            wait_until(lambda: received, "the webhook's delivery")
            body, headers = received[0]
            update = standardwebhooks.Webhook(secret).verify(body, headers)
            self.assertEqual(update["message"]["text"], "webhook 你好 👋")
            with self.assertRaises(standardwebhooks.webhooks.WebhookVerificationError):
                standardwebhooks.Webhook(secret).verify(body.replace(b"\xf0\x9f\x91\x8b", b"!"), headers)
            info = wait_until(lambda: (lambda answer: answer if answer.json["delivered_update_id"] else None)(
                call(self.server, "GET", "/api/v1/webhook", token)), "the delivery recorded")
            self.assertEqual(info.json["delivered_update_id"], update["update_id"])
            self.assertFalse(info.json["disabled"])
            polled = call(self.server, "GET", "/api/v1/updates", token)
            self.assertEqual((polled.status, polled.code), (409, "conflict"))
            self.assertEqual(call(self.server, "DELETE", "/api/v1/webhook", token).status, 204)
            self.assertEqual(call(self.server, "GET", "/api/v1/updates", token).json["updates"], [])
        finally:
            receiver.shutdown()

        self.server.cli("group", "create", "ops", "--owner", "alice", "--members", "hooked")
        hook_url = self.server.cli("hook", "create", "--group", "ops", "--bot", "hooked", "--url", self.server.base)
        self.assertRegex(hook_url, r"^http://127\.0\.0\.1:\d+/hooks/hk_[A-Za-z0-9_-]+\n$")
        path = urllib.parse.urlsplit(hook_url.strip()).path
        posted = call(self.server, "POST", path, None, {"text": "部署完成 ✅"})
        self.assertEqual((posted.status, posted.body), (200, b"ok"))
        texts = [m.get("text") for m in self.history_of("alice", "alice-pw-1", "--group", "ops") if m["from"] == "hooked"]
        self.assertEqual(texts, ["部署完成 ✅"])
        self.assertRegex(self.server.cli("hook", "list"), r"^1\tgroup ops\tbot hooked\tcreated [^\t]+\n$")
        self.server.cli("hook", "revoke", "1")
        refused = call(self.server, "POST", path, None, {"text": "again"})
        self.assertEqual((refused.status, refused.code), (404, "unknown-hook"))

    def test_06_revoked(self):
        self.server.cli("bot", "revoke", "helper")
        refused = call(self.server, "GET", "/api/v1/updates", self.token)
        self.assertEqual((refused.status, refused.code), (401, "token-revoked"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
