#!/usr/bin/env python3
"""A Courier bot that answers every message with the same text, over the HTTP API (docs/BOTS.md).

Standard library only. Make the bot and run it:

    courier bot create echo --owner alice          # prints the token, once
    COURIER_TOKEN=ct_… python3 examples/echo_bot.py

It long-polls `GET /api/v1/updates`, answers each message where it came from (the sender of a direct message, or
the group), and acknowledges what it handled with the next poll's `offset`. Each answer carries an
`Idempotency-Key` made from the update, so an answer retried after a lost response is stored once. It stops on
Ctrl-C, or after --count answers.

Environment: COURIER_URL (default http://127.0.0.1:6980), COURIER_TOKEN (needed).
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request


class CourierAPI:
    def __init__(self, base, token):
        self.base = base.rstrip("/")
        self.token = token

    def call(self, method, path, body=None, headers=None, timeout=70):
        request = urllib.request.Request(self.base + path, method=method)
        request.add_header("Authorization", "Bearer " + self.token)
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, data=data, timeout=timeout) as response:
                text = response.read()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as error:
            text = error.read()
            try:
                answer = json.loads(text)
            except ValueError:
                answer = {"error": {"code": "http-%d" % error.code, "message": text.decode("utf-8", "replace")}}
            if error.code == 429:
                # Asked to slow down: wait as long as the server says, then the caller tries again.
                time.sleep(int(error.headers.get("Retry-After", "1")))
            return error.code, answer


def answer_to(message):
    """Where an answer to a message goes: its group, or its sender."""
    if "group" in message:
        return {"group": message["group"]}
    return {"to": message["from"]}


def main():
    parser = argparse.ArgumentParser(description="Echo every message back, as a Courier bot.")
    parser.add_argument("--count", type=int, default=0, help="stop after this many answers (0: never)")
    options = parser.parse_args()
    token = os.environ.get("COURIER_TOKEN")
    if not token:
        sys.exit("set COURIER_TOKEN to the bot's token (courier bot create NAME --owner USER prints it)")
    api = CourierAPI(os.environ.get("COURIER_URL", "http://127.0.0.1:6980"), token)

    status, me = api.call("GET", "/api/v1/me")
    if status != 200:
        sys.exit("the token was refused: %s" % json.dumps(me))
    print("echoing as %s" % me["user"], flush=True)

    offset, answered = 0, 0
    while options.count == 0 or answered < options.count:
        status, body = api.call("GET", "/api/v1/updates?offset=%d&timeout=30" % offset)
        if status == 401:
            sys.exit("the token was revoked")
        if status != 200:
            time.sleep(1)
            continue
        for update in body["updates"]:
            message = update.get("message")
            if message and message.get("text"):
                reply = dict(answer_to(message), text=message["text"], reply_to=message["seq"])
                key = "echo-%d" % update["update_id"]
                while True:
                    status, sent = api.call("POST", "/api/v1/messages", reply, {"Idempotency-Key": key})
                    if status in (200, 201) or status not in (429, 503):
                        break
                if status in (200, 201):
                    answered += 1
                else:
                    print("not answered: %s" % json.dumps(sent, ensure_ascii=False), file=sys.stderr, flush=True)
            # Handled (or not an update it answers): the next poll acknowledges it.
            offset = update["update_id"] + 1
    # Acknowledges the last ones, so that a bot started again does not answer them twice.
    api.call("GET", "/api/v1/updates?offset=%d" % offset)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
