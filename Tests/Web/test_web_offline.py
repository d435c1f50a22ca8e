#!/usr/bin/env python3
"""The web chat offline, in a real Chromium: an installable page (its manifest), whose service worker keeps the page's
own files, and whose conversations and messages are kept in IndexedDB, so a reload (or a new start of the browser)
while the server is down shows them at once, with the outbox intact and sent when the server is back.

Run:  python3 Tests/Web/test_web_offline.py   (the same variables as test_web.py: COURIER_BIN, COURIER_WEB_ROOT,
COURIER_SCREENSHOTS, CHROMIUM, CHROMEDRIVER). Every wait is for a condition, never a fixed sleep.
"""

import json
import os
import shutil
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

from test_web import COURIER, PASSWORD, ROOT, Page, Server, png, wait_until  # noqa: E402

# What bob wrote, in scripts and directions a reload must keep as they were.
TEXTS = ["读书会今晚七点开始 📚", "مرحبا بالعالم، كيف حالك؟", "emoji 👋🏽🎉 and ✈️ ok"]

# Every IndexedDB database of the offline copy, each store as [key, value] pairs. A database found by the listing is
# opened without ever being made (an open that would upgrade is aborted).
READ_DATABASES = """
const done = arguments[arguments.length - 1];
(async () => {
  const out = {};
  for (const { name } of await indexedDB.databases()) {
    if (!name.startsWith("courier.offline.")) continue;
    const db = await new Promise((resolve, reject) => {
      const request = indexedDB.open(name);
      request.onupgradeneeded = () => request.transaction.abort();
      request.onsuccess = () => resolve(request.result);
      request.onerror = () => resolve(null);
    });
    if (!db) continue;
    const dump = {};
    for (const store of db.objectStoreNames) {
      const objects = db.transaction(store).objectStore(store);
      dump[store] = await new Promise((resolve, reject) => {
        const keys = objects.getAllKeys();
        const values = objects.getAll();
        values.onsuccess = () => resolve(keys.result.map((key, index) => [key, values.result[index]]));
        values.onerror = () => reject(values.error);
      });
    }
    db.close();
    out[name] = dump;
  }
  return out;
})().then(done, (error) => done("error: " + error));
"""

# Every Cache Storage cache: its entries' URLs and bodies.
READ_CACHES = """
const done = arguments[arguments.length - 1];
(async () => {
  const out = {};
  for (const name of await caches.keys()) {
    const cache = await caches.open(name);
    out[name] = [];
    for (const request of await cache.keys()) {
      const answer = await cache.match(request);
      out[name].push([request.url, await answer.text()]);
    }
  }
  return out;
})().then(done, (error) => done("error: " + error));
"""


class OfflineTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="courier-web-offline-")
        cls.shots = os.environ.get("COURIER_SCREENSHOTS") or os.path.join(cls.folder, "screenshots")
        os.makedirs(cls.shots, exist_ok=True)
        print(f"offline tests: screenshots in {cls.shots}", flush=True)
        # The page served from a copy of Web/ (or of COURIER_WEB_ROOT), which a test changes as a new server's would.
        cls.web = os.path.join(cls.folder, "web")
        shutil.copytree(os.environ.get("COURIER_WEB_ROOT") or os.path.join(ROOT, "Web"), cls.web)
        os.environ["COURIER_WEB_ROOT"] = cls.web
        cls.server = Server(cls.folder)
        for user in ("alice", "bob", "carol"):
            cls.server.cli("user", "add", user, "--password", PASSWORD)
        cls.server.start()
        picture = os.path.join(cls.folder, "晚霞.png")
        with open(picture, "wb") as file:
            file.write(png(96, 64))
        for reader in ("alice", "carol"):
            for text in TEXTS:
                cls.server.cli("send", "--as", "bob", "--password", PASSWORD, "--to", reader, text)
            # A picture: the page fetches it from /media with the token, which nothing may keep.
            cls.server.cli("send", "--as", "bob", "--password", PASSWORD, "--to", reader, "--file", picture)
            cls.server.cli("send", "--as", "bob", "--password", PASSWORD, "--to", reader, "the newest 最新")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        if not os.environ.get("COURIER_SCREENSHOTS"):
            shutil.rmtree(os.path.join(cls.folder, "data"), ignore_errors=True)

    def setUp(self):
        self.started = time.monotonic()
        self.pages = []

    def tearDown(self):
        print(f"({time.monotonic() - self.started:.1f} s) ", end="", flush=True)
        result = self._outcome.result
        failed = any(test is self for test, _ in result.failures + result.errors)
        for index, page in enumerate(self.pages):
            try:
                if failed:
                    page.shot(self.shots, f"failed-{self._testMethodName}-{index}")
                    for entry in page.driver.get_log("browser"):
                        print(f"  console: {entry['level']} {entry['message'][:400]}", flush=True)
                page.quit()
            except Exception as error:  # the page may be gone
                print(f"  page {index}: {error}", flush=True)
        if self.server.process is None:
            self.server.start()

    def page(self, **options):
        page = Page(self.server.base, **options)
        self.pages.append(page)
        return page

    def close(self, page):
        self.pages.remove(page)
        page.quit()

    # What the browser keeps

    def databases(self, page):
        found = page.driver.execute_async_script(READ_DATABASES)
        self.assertIsInstance(found, dict, found)
        return found

    def caches(self, page):
        found = page.driver.execute_async_script(READ_CACHES)
        self.assertIsInstance(found, dict, found)
        return found

    def kept_texts(self, page, user, key):
        """The texts of the messages the offline copy holds for `user`'s conversation `key`."""
        database = self.databases(page).get(f"courier.offline.{user}", {})
        record = dict(database.get("conversations", [])).get(key, {})
        return [m.get("body", {}).get("text") for m in record.get("messages", [])]

    def wait_page_kept(self, page):
        """The service worker controls the page and holds the page's files, one version, complete."""
        wait_until(lambda: page.js("return !!navigator.serviceWorker.controller"), "the worker controlling the page")
        def complete():
            caches = self.caches(page)
            versions = [name for name in caches if name.startswith("courier-page-")]
            if len(versions) != 1:
                return False
            urls = {url for url, _ in caches[versions[0]]}
            current = dict(caches.get("courier-page", [])).get(self.server.base + "/current")
            return current == versions[0] and {self.server.base + path for path in (
                "/", "/web/app.js", "/web/app.css", "/web/offline.js", "/web/state.js", "/web/icon.svg",
                "/web/manifest.webmanifest")} <= urls
        wait_until(complete, "the page's files kept")

    def assert_nothing_private_kept(self, page, token):
        """Cache Storage holds the page's own files only; neither it nor IndexedDB holds the token."""
        caches = self.caches(page)
        for name, entries in caches.items():
            for url, body in entries:
                path = url[len(self.server.base):] if url.startswith(self.server.base) else url
                self.assertTrue(path == "/" or path == "/current" or path.startswith("/web/"), f"{name}: {url}")
                for private in ("/media", "/ws", "/api/"):
                    self.assertFalse(path.startswith(private), f"{name}: {url}")
                self.assertNotIn(token, url + body, f"{name}: {url} holds the token")
        urls = [url for entries in caches.values() for url, _ in entries]
        self.assertNotIn(self.server.base + "/web/sw.js", urls, "the worker's own script is the browser's to keep")
        dump = json.dumps(self.databases(page), ensure_ascii=False)
        self.assertNotIn(token, dump, "the token in IndexedDB")
        self.assertNotIn("token", dump.lower(), "no field of IndexedDB so much as names a token")

    def token(self, page):
        return json.loads(page.js("return localStorage.getItem('courier.session')"))["token"]

    def connection(self, page):
        """What the connection's line says (read as text even where a phone's one pane hides it)."""
        return page.js("return document.getElementById('connection-text').textContent")

    def wait_offline(self, page):
        wait_until(lambda: self.connection(page) == "Offline", "the page offline")

    def delivered(self, reader, text):
        lines = self.server.cli("history", "--as", reader, "--password", PASSWORD, "--with", "bob", "--json")
        return sum(text in line for line in lines.splitlines())

    # The tests

    def test_01_manifest_makes_the_page_installable(self):
        with urllib.request.urlopen(self.server.base + "/web/manifest.webmanifest") as answer:
            self.assertEqual(answer.headers["Content-Type"], "application/manifest+json")
            manifest = json.loads(answer.read())
        self.assertEqual(manifest["start_url"], "/")
        self.assertEqual(manifest["display"], "standalone")
        self.assertEqual(manifest["icons"][0]["src"], "/web/icon.svg")
        page = self.page()
        page.visible("#login-user")
        parsed = wait_until(lambda: (lambda m: m if m.get("url") else None)(
            page.driver.execute_cdp_cmd("Page.getAppManifest", {})), "the manifest found")
        self.assertEqual(parsed["url"], self.server.base + "/web/manifest.webmanifest")
        self.assertEqual(parsed["errors"], [], parsed["errors"])
        self.assertEqual(json.loads(parsed["data"])["name"], "Courier")
        # Chromium's own verdict: nothing stands in the way of installing it (a worker, a manifest, an icon).
        page.log_in("alice")
        self.wait_page_kept(page)
        def installable():
            errors = page.driver.execute_cdp_cmd("Page.getInstallabilityErrors", {})["installabilityErrors"]
            return errors == [] or AssertionError(errors)
        wait_until(lambda: installable() is True, "the page installable")

    def test_02_desktop_reload_while_the_server_is_down(self):
        page = self.page(width=1280, height=800)
        page.log_in("alice")
        page.conversation("u:bob")
        for text in TEXTS + ["the newest 最新"]:
            page.message(text)
        wait_until(lambda: page.js("return [...document.querySelectorAll('#messages img.image')]"
                                   ".some(i => i.complete && i.naturalWidth === 96)"), "the picture shown")
        self.wait_page_kept(page)
        wait_until(lambda: set(TEXTS) <= set(self.kept_texts(page, "alice", "u:bob")), "the messages kept")
        token = self.token(page)
        self.server.stop()
        try:
            self.wait_offline(page)
            page.send("written offline 离线 ✈️")
            page.message("written offline 离线 ✈️")
            page.driver.refresh()
            # At once, from the browser: the list, the conversation that was open, its messages, the outbox.
            page.visible('#conversations [data-key="u:bob"]')
            for text in TEXTS + ["the newest 最新"]:
                page.message(text)
            pending = page.message("written offline 离线 ✈️")
            self.assertEqual(pending.find_element(By.CSS_SELECTOR, ".status").get_attribute("aria-label"), "sending")
            self.assertIn("the newest 最新", page.read('#conversations [data-key="u:bob"] .preview'))
            self.wait_offline(page)
            page.visible("#offline-note")
            self.assertIn("Offline", page.read("#offline-note"))
            rtl = page.message("مرحبا بالعالم، كيف حالك؟").find_element(By.CSS_SELECTOR, ".text")
            self.assertEqual(page.js("return getComputedStyle(arguments[0]).direction", rtl), "rtl")
            self.assertEqual(page.read("#chat-title"), "bob")
            self.assertLessEqual(page.js("return document.documentElement.scrollWidth"),
                                 page.js("return window.innerWidth"))
            page.shot(self.shots, "desktop-offline-reload")
            self.assert_nothing_private_kept(page, token)
            # Written while offline, kept across the offline reload, in the browser's storage.
            self.assertIn("written offline", page.js("return localStorage.getItem('courier.outbox.alice')"))
        finally:
            self.server.start()
        page.retry()
        page.wait_online()
        wait_until(lambda: not page.find("#offline-note").is_displayed(), "the note gone")
        wait_until(lambda: page.message("written offline 离线 ✈️").find_element(By.CSS_SELECTOR, ".status")
                   .get_attribute("aria-label") in ("sent", "delivered", "read"), "the offline message acknowledged")
        wait_until(lambda: self.delivered("alice", "written offline 离线 ✈️") == 1, "bob having it, once")
        # Back online, the page goes on as before: a new message comes in; the picture comes again from /media.
        self.server.cli("send", "--as", "bob", "--password", PASSWORD, "--to", "alice", "after the restart 重启")
        page.message("after the restart 重启")
        wait_until(lambda: page.js("return [...document.querySelectorAll('#messages img.image')]"
                                   ".some(i => i.complete && i.naturalWidth === 96)"), "the picture shown again")
        self.assert_nothing_private_kept(page, token)
        # Logging out empties it.
        wait_until(lambda: "after the restart 重启" in self.kept_texts(page, "alice", "u:bob"), "the new message kept")
        page.find("#me").click()
        page.visible("#dialog [data-action=logout]").click()
        page.visible("#login-user")
        wait_until(lambda: self.databases(page) == {}, "the offline copy deleted")
        self.assertEqual(page.js("return localStorage.getItem('courier.outbox.alice')"), "[]")

    def test_03_phone_starts_while_the_server_is_down(self):
        """A new start of the browser (its profile kept), not only a reload: the page itself comes from the worker."""
        profile = os.path.join(self.folder, "phone-profile")
        phone = dict(width=390, height=844, phone=True, arguments=(f"--user-data-dir={profile}",))
        page = self.page(**phone)
        page.log_in("carol")
        page.conversation("u:bob")
        for text in TEXTS:
            page.message(text)
        self.wait_page_kept(page)
        wait_until(lambda: set(TEXTS) <= set(self.kept_texts(page, "carol", "u:bob")), "the messages kept")
        token = self.token(page)
        self.server.stop()
        try:
            self.wait_offline(page)
            page.send("from the phone offline 手机")
            page.message("from the phone offline 手机")
            self.close(page)
            page = self.page(**phone)
            for text in TEXTS + ["the newest 最新"]:
                page.message(text)
            page.message("from the phone offline 手机")
            page.visible("#offline-note")
            self.wait_offline(page)
            self.assertLessEqual(page.js("return document.documentElement.scrollWidth"),
                                 page.js("return window.innerWidth"))
            page.shot(self.shots, "phone-offline-start-conversation")
            page.find("#back").click()
            page.visible('#conversations [data-key="u:bob"]')
            # The line says Offline between the page's attempts to reconnect (Connecting… while one is under way).
            self.wait_offline(page)
            page.shot(self.shots, "phone-offline-start-list")
            self.assert_nothing_private_kept(page, token)
        finally:
            self.server.start()
        page.retry()
        page.wait_online()
        wait_until(lambda: self.delivered("carol", "from the phone offline 手机") == 1, "bob having it, once")
        # While the browser is closed, bob writes more than a page: on the next start, the conversation kept offline
        # gives way to the server's, with nothing missing between what was kept and what came since.
        self.close(page)
        for index in range(40):
            self.server.cli("send", "--as", "bob", "--password", PASSWORD, "--to", "carol", f"while closed {index:02d}")
        page = self.page(**phone)
        page.conversation("u:bob")
        page.message("while closed 39")
        def everything_loaded():
            texts = page.texts()
            if "读书会今晚七点开始 📚" in texts:
                return texts
            for button in page.all("#messages button.older"):
                try:
                    button.click()
                except Exception:  # redrawn meanwhile: clicked at the next try
                    pass
            return None
        texts = wait_until(everything_loaded, "every page loaded")
        expected = TEXTS + ["the newest 最新", "from the phone offline 手机"] + [f"while closed {i:02d}" for i in range(40)]
        self.assertEqual([t for t in texts if t in expected], expected)

    def test_04_a_new_page_replaces_the_old(self):
        """A new server's page: read from the network at the next visit, and kept in place of the old one."""
        page = self.page()
        page.log_in("alice")
        page.conversation("u:bob")
        self.wait_page_kept(page)
        # What the page shows is written a moment after it is drawn: there before the server goes.
        wait_until(lambda: "the newest 最新" in self.kept_texts(page, "alice", "u:bob"), "the conversation kept")
        old = [name for name in self.caches(page) if name.startswith("courier-page-")]
        self.assertFalse(page.js("return window.courierPageTwo === true"))
        with open(os.path.join(self.web, "app.js"), "a", encoding="utf-8") as file:
            file.write("\nwindow.courierPageTwo = true;\n")
        self.server.stop()
        self.server.start()
        page.driver.refresh()
        page.wait_online()
        self.assertTrue(page.js("return window.courierPageTwo === true"), "the new page read from the network")
        def replaced():
            caches = self.caches(page)
            names = [name for name in caches if name.startswith("courier-page-")]
            app = dict(caches[names[0]]).get(self.server.base + "/web/app.js", "") if len(names) == 1 else ""
            return names != old and "courierPageTwo" in app
        wait_until(replaced, "the new page kept, the old one gone")
        self.wait_page_kept(page)
        # Still kept by the new page, before the server goes again.
        wait_until(lambda: "the newest 最新" in self.kept_texts(page, "alice", "u:bob"), "the conversation kept")
        self.server.stop()
        page.driver.refresh()
        page.message("the newest 最新")
        self.assertTrue(page.js("return window.courierPageTwo === true"), "the new page offline")


if __name__ == "__main__":
    if not os.path.exists(COURIER):
        sys.exit(f"{COURIER} not found: build first (swift build)")
    result = unittest.main(verbosity=2, exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)
