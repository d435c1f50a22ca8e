#!/usr/bin/env python3
"""The web chat's everyday things in a real Chromium (issue 45): the account's settings (password, devices, deleting
the account), dark mode, drafts kept per conversation, @mention completion in groups, the unread count on the tab's
icon, voice notes recorded in the page, forwarding, and who reacted. The same harness as test_web.py (its Server, Page
and helpers), with a server of its own.

  COURIER_BIN=.build/debug/courier python3 Tests/Web/test_web_daily.py
  (COURIER_WEB_ROOT=Web to serve the page from the folder, COURIER_SCREENSHOTS to keep the screenshots somewhere)
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.actions import interaction  # noqa: E402
from selenium.webdriver.common.actions.action_builder import ActionBuilder  # noqa: E402
from selenium.webdriver.common.actions.pointer_input import PointerInput  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

from test_web import COURIER, CONTRAST_CHECK, PASSWORD, Page, Server, png, wait_until  # noqa: E402

# The names members show in a group, in the scripts the completion must match.
NAMES = {"zhangwei": "张伟", "tanaka": "田中", "neko": "🐱 Neko", "layla": "ليلى", "dana": "דנה"}

# The luminance of the page's background, 0 (black) to 1 (white).
BACKGROUND = """
const [r, g, b] = getComputedStyle(document.documentElement).backgroundColor.match(/[\\d.]+/g).map(Number);
return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
"""


# Chromium's stand-in microphone (a beep), allowed without asking: for the voice notes recorded in the page.
FAKE_MIC = ("--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream")

# The page's getUserMedia, wrapped to keep every stream it gives (to see that the microphone is let go of).
KEEP_STREAMS = """
if (window.__streams) return;
window.__streams = [];
const given = navigator.mediaDevices.getUserMedia.bind(navigator.mediaDevices);
navigator.mediaDevices.getUserMedia = async (c) => { const s = await given(c); __streams.push(s); return s; };
"""

# The voice notes a conversation holds in the page's memory: their Media as the page has it.
VOICE_NOTES = """
const [key, done] = arguments;
import('/web/state.js').then((m) => done([...m.conversation(key).messages.values()]
  .map((x) => x.body?.media).filter((media) => media?.kind === 'KIND_VOICE')));
"""

# Every reaction the page asks the server for, from now on (its session's requests watched), in window.__reacts. The
# answers to who-reacted requests: while window.__slow is set, held until window.__answer() (a press let go before the
# list comes); with window.__cut, one user a key left in them (as past the server's max-reactors-listed).
WATCH_REACTS = """
const done = arguments[arguments.length - 1];
import('/web/state.js').then(({ session }) => {
  window.__reacts = [];
  if (!session.__watched) {
    const request = session.request.bind(session);
    session.request = (body, onAnswer) => {
      if (body.react) __reacts.push(body.react);
      if (!body.reactors) return request(body, onAnswer);
      return request(body, (answer) => {
        if (window.__cut) for (const e of answer.reactors?.entries ?? []) e.users = e.users.slice(0, 1);
        if (!window.__slow) return onAnswer(answer);
        window.__answer = () => onAnswer(answer);
        return true;
      });
    };
    session.__watched = true;
  }
  done(true);
});
"""

# The who-reacted dialog: each line's key, and the names it lists.
REACTORS = """
return [...document.querySelectorAll('#dialog li[data-key]')]
  .map((li) => [li.dataset.key, [...li.querySelectorAll('bdi')].map((b) => b.textContent), li.textContent]);
"""


def emulate_scheme(page, scheme):
    """The system's light or dark, as prefers-color-scheme reports it to the page."""
    page.driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                                {"features": [{"name": "prefers-color-scheme", "value": scheme}]})


class DailyWebTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="courier-web-daily-")
        cls.shots = os.environ.get("COURIER_SCREENSHOTS") or os.path.join(cls.folder, "screenshots")
        os.makedirs(cls.shots, exist_ok=True)
        print(f"web tests: screenshots in {cls.shots}", flush=True)
        cls.server = Server(cls.folder)
        for user in ("alice", "bob", "carol", "dave", "erin", "frank", "gina", *NAMES):
            cls.server.cli("user", "add", user, "--password", PASSWORD)
        cls.server.start()
        for user, name in NAMES.items():
            cls.server.cli("profile", "--as", user, "--password", PASSWORD, "--display-name", name)
        cls.alice = Page(cls.server.base, arguments=FAKE_MIC)
        cls.alice.log_in("alice")
        cls.pages = []

    @classmethod
    def tearDownClass(cls):
        for page in [cls.alice, *cls.pages]:
            try:
                page.quit()
            except Exception:
                pass
        cls.server.stop()
        if not os.environ.get("COURIER_SCREENSHOTS"):
            shutil.rmtree(os.path.join(cls.folder, "data"), ignore_errors=True)

    def setUp(self):
        self.started = time.monotonic()

    def tearDown(self):
        print(f"({time.monotonic() - self.started:.1f} s) ", end="", flush=True)
        result = self._outcome.result
        if any(test is self for test, _ in result.failures + result.errors):
            for index, page in enumerate([self.alice, *self.pages]):
                try:
                    page.shot(self.shots, f"failed-{self._testMethodName}-{index}")
                    for entry in page.driver.get_log("browser"):
                        print(f"  page {index} console: {entry['level']} {entry['message'][:400]}", flush=True)
                except Exception as error:
                    print(f"  page {index}: {error}", flush=True)

    # Helpers

    def page(self, user=None, phone=False):
        page = (Page(self.server.base, 390, 844, phone=True, arguments=FAKE_MIC) if phone
                else Page(self.server.base, arguments=FAKE_MIC))
        self.pages.append(page)
        if user:
            page.log_in(user)
        return page

    def admin(self, *arguments):
        """`courier group …` as the administrator, on the server's data folder."""
        done = subprocess.run([COURIER, *arguments, "--data", self.server.data], capture_output=True, text=True,
                              env=self.server.env, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)

    def settings(self, page):
        page.click("#me")
        page.visible("#dialog [data-settings=devices]")

    def open_details(self, page, summary):
        details = wait_until(lambda: next((d for d in page.all("#dialog details")
                                           if d.find_element(By.TAG_NAME, "summary").text == summary), None), summary)
        if not details.get_attribute("open"):
            details.find_element(By.TAG_NAME, "summary").click()
        return details

    def reload(self, page):
        """Reloads, and waits for the page online, back at the list (a phone's one pane may reopen a conversation)."""
        page.driver.refresh()
        wait_until(lambda: page.js("return document.getElementById('connection-text').textContent") == "Online",
                   "the page online")
        if page.js("return document.body.classList.contains('chat-open') && innerWidth < 720"):
            page.click("#back")

    def show(self, page, css):
        """Scrolls the dialog to an element, for a screenshot."""
        page.js("arguments[0].scrollIntoView({block: 'center'})", page.find(css))

    def fill(self, form, *values):
        inputs = form.find_elements(By.CSS_SELECTOR, "input[type=password]")
        for field, value in zip(inputs, values):
            field.clear()
            field.send_keys(value)
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()

    def confirmation(self, page, containing, accept=True):
        def alert():
            try:
                return page.driver.switch_to.alert
            except NoAlertPresentException:
                return None
        box = wait_until(alert, "the confirmation")
        self.assertIn(containing, box.text)
        if accept:
            box.accept()
        else:
            box.dismiss()

    def draft(self, page):
        return page.find("#draft").get_attribute("value")

    def set_draft(self, page, text):
        """Replaces the draft as a user's select-all and typing would, the caret at its end."""
        page.js("const d = arguments[0]; d.focus(); d.value = arguments[1];"
                "d.setSelectionRange(d.value.length, d.value.length); d.dispatchEvent(new Event('input'));",
                page.find("#draft"), text)

    def offered(self, page):
        return page.js("const l = document.getElementById('mentions');"
                       "return l && !l.hidden ? [...l.querySelectorAll('[role=option]')].map(o => o.dataset.user) : []")

    def active_option(self, page):
        return page.js("return document.querySelector('#mentions [aria-selected=true]')?.dataset.user ?? null")

    def favicon(self, page):
        return page.js("const l = document.querySelector('link[rel~=icon]'); return [l.getAttribute('href'), "
                       "l.dataset.unread ?? null]")

    def contrast(self, page, where):
        self.assertEqual(page.js(CONTRAST_CHECK), [], where)
        self.assertLessEqual(page.js("return document.documentElement.scrollWidth"),
                             page.js("return window.innerWidth"), where)

    # Drafts

    def test_01_drafts_per_conversation_survive_reload(self):
        alice = self.alice
        for user in ("bob", "carol"):
            self.server.cli("send", "--as", user, "--password", PASSWORD, "--to", "alice", f"hello from {user}")
        alice.conversation("u:bob")
        alice.type("草稿：明天见")
        alice.type(" 🌙")
        alice.conversation("u:carol")
        wait_until(lambda: self.draft(alice) == "", "carol's conversation with no draft")
        alice.type("给 carol 的话")
        alice.conversation("u:bob")
        wait_until(lambda: self.draft(alice) == "草稿：明天见 🌙", "bob's draft back")
        alice.shot(self.shots, "desktop-draft")
        # A reload keeps both, each in its conversation.
        alice.driver.refresh()
        alice.wait_online()
        alice.conversation("u:carol")
        wait_until(lambda: self.draft(alice) == "给 carol 的话", "carol's draft after a reload")
        alice.conversation("u:bob")
        wait_until(lambda: self.draft(alice) == "草稿：明天见 🌙", "bob's draft after a reload")
        # Sent, it is gone: after a reload too; carol's stays.
        alice.find("#draft").send_keys(Keys.ENTER)
        alice.message("草稿：明天见 🌙")
        self.assertEqual(self.draft(alice), "")
        alice.driver.refresh()
        alice.wait_online()
        alice.conversation("u:bob")
        alice.message("草稿：明天见 🌙")
        self.assertEqual(self.draft(alice), "")
        stored = json.loads(alice.js("return localStorage.getItem('courier.drafts.alice')"))
        self.assertEqual(stored, {"u:carol": "给 carol 的话"})
        # Emptied by hand, it is forgotten as well.
        alice.conversation("u:carol")
        wait_until(lambda: self.draft(alice) == "给 carol 的话", "carol's draft")
        self.set_draft(alice, "")
        self.assertIsNone(alice.js("return localStorage.getItem('courier.drafts.alice')"))

    # @mentions

    def test_02_mention_completion_in_any_script(self):
        alice = self.alice
        self.admin("group", "create", "team", "--owner", "alice", "--members", "bob," + ",".join(NAMES))
        self.admin("group", "title", "team", "团队 Team")
        alice.conversation("g:team")
        wait_until(lambda: alice.read("#chat-title") == "团队 Team", "the group open")
        draft = alice.find("#draft")
        # Chinese, by the display name's start: Enter picks (and sends nothing).
        draft.send_keys("@张")
        wait_until(lambda: self.offered(alice) == ["zhangwei"], "张伟 offered")
        alice.shot(self.shots, "desktop-mention")
        self.assertIn("张伟", alice.read("#mentions"))
        draft.send_keys(Keys.ENTER)
        wait_until(lambda: self.draft(alice) == "@zhangwei ", "the mention put in")
        self.assertEqual(self.offered(alice), [])
        self.assertEqual(alice.texts(), [], "nothing sent by the Enter that picked")
        # Japanese after text, Tab picks.
        draft.send_keys("和 @田")
        wait_until(lambda: self.offered(alice) == ["tanaka"], "田中 offered")
        draft.send_keys(Keys.TAB)
        wait_until(lambda: self.draft(alice) == "@zhangwei 和 @tanaka ", "the second mention put in")
        # Enter with the list closed sends; the names are mentions in the message.
        draft.send_keys("你们好" + Keys.ENTER)
        message = alice.message("@zhangwei 和 @tanaka 你们好")
        self.assertEqual([m.text for m in message.find_elements(By.CSS_SELECTOR, ".mention")],
                         ["@zhangwei", "@tanaka"])
        # An emoji (typed as an input method or the emoji picker puts it in), then a click.
        self.set_draft(alice, "@🐱")
        wait_until(lambda: self.offered(alice) == ["neko"], "🐱 Neko offered")
        alice.find('#mentions [data-user="neko"]').click()
        wait_until(lambda: self.draft(alice) == "@neko ", "the click's mention")
        self.assertEqual(alice.js("return document.activeElement.id"), "draft", "the focus stays in the draft")
        # Right to left: Arabic and Hebrew names.
        self.set_draft(alice, "")
        draft.send_keys("@لي")
        wait_until(lambda: self.offered(alice) == ["layla"], "ليلى offered")
        draft.send_keys(Keys.ENTER)
        wait_until(lambda: self.draft(alice) == "@layla ", "layla's mention")
        draft.send_keys("@ד")
        wait_until(lambda: self.offered(alice) == ["dana"], "דנה offered")
        draft.send_keys(Keys.TAB)
        wait_until(lambda: self.draft(alice) == "@layla @dana ", "dana's mention")
        # `@` alone offers everyone else, `@all` last (alice owns the group); the arrows choose, wrapping around.
        self.set_draft(alice, "@")
        wait_until(lambda: self.offered(alice) and self.offered(alice)[-1] == "all", "the members and @all")
        offered = self.offered(alice)
        self.assertNotIn("alice", offered)
        self.assertEqual(self.active_option(alice), offered[0])
        draft.send_keys(Keys.ARROW_DOWN)
        wait_until(lambda: self.active_option(alice) == offered[1], "the second chosen")
        draft.send_keys(Keys.ARROW_UP, Keys.ARROW_UP)
        wait_until(lambda: self.active_option(alice) == offered[-1], "round to the last")
        draft.send_keys(Keys.ENTER)
        wait_until(lambda: self.draft(alice) == "@all ", "@all put in")
        # A user name's start works too, and Escape closes the list without leaving the conversation.
        self.set_draft(alice, "hi @bo")
        wait_until(lambda: self.offered(alice) == ["bob"], "bob offered")
        draft.send_keys(Keys.ESCAPE)
        wait_until(lambda: self.offered(alice) == [], "the list closed")
        self.assertTrue(alice.find("#chat-bar").is_displayed(), "the conversation still open")
        self.assertEqual(self.draft(alice), "hi @bo")
        draft.send_keys(Keys.ENTER)
        alice.message("hi @bo")
        # An input method's Enter or Tab never picks (nor sends).
        self.set_draft(alice, "@田")
        wait_until(lambda: self.offered(alice) == ["tanaka"], "田中 offered again")
        for init in ("{key: 'Enter', isComposing: true, bubbles: true, cancelable: true}",
                     "{key: 'Enter', keyCode: 229, bubbles: true, cancelable: true}",
                     "{key: 'Tab', isComposing: true, bubbles: true, cancelable: true}"):
            alice.js(f"arguments[0].dispatchEvent(new KeyboardEvent('keydown', {init}))", draft)
            self.assertEqual(self.draft(alice), "@田", init)
            self.assertEqual(self.offered(alice), ["tanaka"], init)
        alice.js("arguments[0].dispatchEvent(new CompositionEvent('compositionstart', {data: ''}))", draft)
        draft.send_keys(Keys.ENTER)
        self.assertEqual(self.draft(alice).strip(), "@田", "not picked while composing")
        alice.js("arguments[0].dispatchEvent(new CompositionEvent('compositionend', {data: ''}))", draft)
        wait_until(lambda: draft.get_attribute("data-composing") is None, "the composition over")
        self.set_draft(alice, "")
        # Someone who joins is offered at once (the members asked for again after the membership event).
        self.admin("group", "add", "team", "carol")
        wait_until(lambda: any("carol joined" in n.text for n in alice.all("#messages .notice")), "carol joined")
        self.set_draft(alice, "@car")
        wait_until(lambda: self.offered(alice) == ["carol"], "carol offered")
        self.set_draft(alice, "")
        # No list in a direct conversation.
        alice.conversation("u:bob")
        self.set_draft(alice, "@b")
        self.assertEqual(self.offered(alice), [])
        self.set_draft(alice, "")

    def test_03_mentions_on_a_phone_and_no_all_for_members(self):
        bob = self.page("bob", phone=True)
        bob.conversation("g:team")
        draft = bob.find("#draft")
        draft.send_keys("@")
        wait_until(lambda: len(self.offered(bob)) >= 5, "the members offered")
        self.assertNotIn("all", self.offered(bob), "@all is the owner's and admins'")
        self.assertIn("alice", self.offered(bob))
        # The list fits the screen, above the composer.
        box = bob.js("const r = document.getElementById('mentions').getBoundingClientRect();"
                     "const c = document.getElementById('composer').getBoundingClientRect();"
                     "return [r.left, r.right, r.bottom, c.top, window.innerWidth]")
        self.assertGreaterEqual(box[0], 0)
        self.assertLessEqual(box[1], box[4])
        self.assertLessEqual(box[2], box[3] + 1)
        bob.shot(self.shots, "phone-mention")
        draft.send_keys("ليلى"[:1])
        wait_until(lambda: self.offered(bob) == ["layla"], "layla offered on the phone")
        draft.send_keys(Keys.ENTER)
        wait_until(lambda: self.draft(bob) == "@layla ", "picked on the phone")
        self.set_draft(bob, "")
        bob.quit()
        self.pages.remove(bob)

    # The tab's icon

    def test_04_unread_count_on_the_tab_icon(self):
        alice = self.alice
        alice.conversation("u:bob")
        wait_until(lambda: not alice.js("return document.title").startswith("("), "nothing unread")
        plain = self.favicon(alice)
        self.assertEqual(plain, ["/web/icon.svg", None])
        self.server.cli("send", "--as", "carol", "--password", PASSWORD, "--to", "alice", "一")
        wait_until(lambda: self.favicon(alice)[1] == "1", "the icon counting 1")
        one = self.favicon(alice)[0]
        self.assertTrue(one.startswith("data:image/png;base64,"), one[:40])
        self.assertTrue(alice.js("return document.title").startswith("(1) "))
        self.server.cli("send", "--as", "carol", "--password", PASSWORD, "--to", "alice", "二")
        wait_until(lambda: self.favicon(alice)[1] == "2", "the icon counting 2")
        two = self.favicon(alice)[0]
        self.assertNotEqual(one, two, "another picture for another count")
        import base64
        with open(os.path.join(self.shots, "favicon-2.png"), "wb") as file:
            file.write(base64.b64decode(two.split(",", 1)[1]))
        # The picture is the icon with a badge: red in its top right corner, the icon's blue below.
        colours = alice.driver.execute_async_script("""
            const done = arguments[arguments.length - 1];
            const image = new Image();
            image.onload = () => {
              const c = document.createElement('canvas'); c.width = c.height = 64;
              const g = c.getContext('2d'); g.drawImage(image, 0, 0);
              done([[...g.getImageData(60, 20, 1, 1).data], [...g.getImageData(20, 56, 1, 1).data]]);
            };
            image.src = arguments[0];""", two)
        corner, body = colours
        self.assertTrue(corner[0] > 150 and corner[1] < 80 and corner[2] < 80, corner)
        self.assertTrue(body[2] > 120 and body[0] < 60, body)
        # Read: the plain icon again.
        alice.conversation("u:carol")
        wait_until(lambda: self.favicon(alice) == plain, "the plain icon again")
        self.assertFalse(alice.js("return document.title").startswith("("))

    # Dark mode

    def check_dark(self, page, size):
        """The list, a conversation with mentions and replies, the mention list and the settings, all readable."""
        wait_until(lambda: page.js(BACKGROUND) < 0.15, "a dark page")
        page.visible("#conversations .conversation")
        self.contrast(page, f"{size} list")
        self.settings(page)
        wait_until(lambda: len(page.all("#dialog .devices li")) >= 1, "the devices listed")
        self.open_details(page, "Change the password")
        self.contrast(page, f"{size} settings")
        self.show(page, "#dialog [data-settings=devices]")
        page.shot(self.shots, f"{size}-dark-settings")
        page.js("document.getElementById('dialog').close()")
        page.conversation("g:team")
        page.message("@zhangwei 和 @tanaka 你们好")
        self.contrast(page, f"{size} group")
        page.shot(self.shots, f"{size}-dark-group")
        page.find("#draft").send_keys("@")
        wait_until(lambda: self.offered(page), "the mention list")
        self.contrast(page, f"{size} mention list")
        page.shot(self.shots, f"{size}-dark-mention")
        self.set_draft(page, "")
        if size.startswith("phone"):
            page.find("#back").click()
        page.conversation("u:bob")
        self.contrast(page, f"{size} direct chat")
        page.shot(self.shots, f"{size}-dark-chat")
        if size.startswith("phone"):
            page.find("#back").click()

    def test_05_dark_mode_follows_the_system_and_the_switch(self):
        # Unread, replied to and searched things to be seen in the dark.
        self.server.cli("send", "--as", "neko", "--password", PASSWORD, "--to", "alice", "未读 unread")
        for size in ("desktop", "phone"):
            page = self.page(phone=size == "phone")
            emulate_scheme(page, "dark")
            page.visible("#login-user")
            wait_until(lambda: page.js(BACKGROUND) < 0.15, "a dark login")
            self.contrast(page, f"{size} login")
            page.shot(self.shots, f"{size}-dark-login")
            page.log_in("alice")
            wait_until(lambda: page.all('#conversations [data-key="u:neko"] .badge'), "an unread badge")
            page.shot(self.shots, f"{size}-dark-list")
            self.check_dark(page, size)
            # The switch: light while the system is dark, kept after a reload; then the system's again.
            self.settings(page)
            page.find("#dialog input[name=theme][value=light]").click()
            wait_until(lambda: page.js(BACKGROUND) > 0.85, "light chosen")
            self.contrast(page, f"{size} light settings")
            page.js("document.getElementById('dialog').close()")
            self.reload(page)
            wait_until(lambda: page.js(BACKGROUND) > 0.85, "light kept after a reload")
            self.assertEqual(page.js("return localStorage.getItem('courier.theme')"), "light")
            self.contrast(page, f"{size} light list")
            self.settings(page)
            self.assertTrue(page.find("#dialog input[name=theme][value=light]").is_selected())
            page.find("#dialog input[name=theme][value=system]").click()
            wait_until(lambda: page.js(BACKGROUND) < 0.15, "the system's dark again")
            self.assertIsNone(page.js("return localStorage.getItem('courier.theme')"))
            # Dark chosen while the system is light.
            emulate_scheme(page, "light")
            wait_until(lambda: page.js(BACKGROUND) > 0.85, "the system's light")
            page.find("#dialog input[name=theme][value=dark]").click()
            page.js("document.getElementById('dialog').close()")
            self.check_dark(page, size + "-chosen")
            self.settings(page)
            page.find("#dialog input[name=theme][value=system]").click()
            page.js("document.getElementById('dialog').close()")
            page.quit()
            self.pages.remove(page)

    # The account

    def test_06_change_password(self):
        here = self.page("dave")
        there = self.page("dave")
        self.settings(here)
        form = self.open_details(here, "Change the password").find_element(By.TAG_NAME, "form")
        note = lambda: form.find_element(By.CSS_SELECTOR, ".note").text
        self.fill(form, "not the password", "a new password 新", "a new password 新")
        wait_until(lambda: note() == "That is not your present password.", "the wrong password said in words")
        self.fill(form, PASSWORD, "a new password 新", "another one")
        wait_until(lambda: note() == "The two new passwords differ.", "the mismatch said")
        self.fill(form, PASSWORD, "short", "short")
        wait_until(lambda: "at least 8 characters" in note(), "a short password refused")
        self.fill(form, PASSWORD, "a new password 新", "a new password 新")
        wait_until(lambda: note() == "Changed. Your other devices were logged out.", "the password changed")
        self.show(here, "#dialog [data-form=password] button")
        here.shot(self.shots, "desktop-password-changed")
        # The other browser is logged out; this one stays.
        there.visible("#login-user")
        wait_until(lambda: there.read("#login-error") == "This device was logged out.", "the other device out")
        wait_until(lambda: len(here.all("#dialog .devices li")) == 1, "one device left in the list")
        self.assertEqual(here.read("#connection-text"), "Online")
        # The old password no longer logs in; the new one does.
        there.find("#login-user").clear()
        there.find("#login-user").send_keys("dave")
        there.find("#login-password").send_keys(PASSWORD + Keys.ENTER)
        wait_until(lambda: there.read("#login-error") == "Wrong user name or password.", "the old password refused")
        there.find("#login-password").clear()
        there.find("#login-password").send_keys("a new password 新" + Keys.ENTER)
        there.wait_online()

    def test_07_devices_listed_and_logged_out(self):
        here = self.page("erin")
        there = self.page("erin", phone=True)
        self.settings(here)
        items = wait_until(lambda: (lambda li: li if len(li) == 2 else None)(here.all("#dialog .devices li")),
                           "two devices listed")
        current = [li for li in items if "current" in li.get_attribute("class").split()]
        self.assertEqual(len(current), 1, "one device marked as this one")
        self.assertEqual(current[0], items[0], "this device first")
        self.assertIn("This device", current[0].text)
        self.assertIn("Web · Chromium", current[0].text)
        self.assertIn("Connected now", items[1].text)
        self.show(here, "#dialog [data-settings=devices]")
        here.shot(self.shots, "desktop-devices")
        self.contrast(here, "settings light")
        # The phone's device logged out from here: its page is back at the login form.
        items[1].find_element(By.CSS_SELECTOR, "[data-action=revoke-device]").click()
        there.visible("#login-user")
        wait_until(lambda: there.read("#login-error") == "This device was logged out.", "the phone logged out")
        self.assertIsNone(there.js("return localStorage.getItem('courier.session')"))
        wait_until(lambda: len(here.all("#dialog .devices li")) == 1, "one device left")
        self.assertIn("Logged out", here.read("#dialog [data-settings=devices] .note"))
        there.shot(self.shots, "phone-logged-out")
        # This device, from the list: back to the login form, its token forgotten.
        here.find("#dialog .devices li.current [data-action=revoke-device]").click()
        here.visible("#login-user")
        self.assertIsNone(here.js("return localStorage.getItem('courier.session')"))
        self.assertFalse(here.find("#dialog").is_displayed())

    def test_08_delete_account(self):
        page = self.page("frank")
        self.settings(page)
        form = self.open_details(page, "Delete the account").find_element(By.TAG_NAME, "form")
        note = lambda: form.find_element(By.CSS_SELECTOR, ".note[role=status]").text
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_until(lambda: note() == "Type your password to delete the account.", "the password asked for")
        self.fill(form, "not the password")
        self.confirmation(page, "Delete the account frank")
        wait_until(lambda: note() == "That is not your password: the account stays.", "a wrong password refused")
        self.show(page, "#dialog [data-form=delete-account] .note[role=status]")
        page.shot(self.shots, "desktop-delete-refused")
        self.assertEqual(page.read("#connection-text"), "Online")
        # Cancelled at the confirmation: nothing happens.
        self.fill(form, PASSWORD)
        self.confirmation(page, "for good", accept=False)
        self.assertEqual(page.read("#connection-text"), "Online")
        self.fill(form, PASSWORD)
        self.confirmation(page, "for good")
        page.visible("#login-user")
        wait_until(lambda: page.read("#login-error") == "Your account was deleted.", "the deletion said")
        page.shot(self.shots, "desktop-account-deleted")
        page.find("#login-user").send_keys("frank")
        page.find("#login-password").send_keys(PASSWORD + Keys.ENTER)
        wait_until(lambda: page.read("#login-error") == "Wrong user name or password.", "no login any more")

    # Blocking

    def test_09_block_and_unblock_from_the_chat(self):
        alice = self.alice
        self.server.cli("send", "--as", "erin", "--password", PASSWORD, "--to", "alice", "认识一下 erin")
        alice.conversation("u:erin")
        alice.message("认识一下 erin")
        alice.click("#manage")
        button = alice.visible("#dialog [data-action=block]")
        self.assertEqual(button.text, "Block erin")
        button.click()
        self.confirmation(alice, "Block erin?")
        wait_until(lambda: alice.find("#dialog [data-action=block]").text == "Unblock erin", "erin blocked")
        wait_until(lambda: alice.read("#chat-subtitle").endswith("· blocked"), "the chat says so")
        alice.shot(self.shots, "desktop-blocked")
        # Erin's next message is committed (she sees it) and never reaches alice; carol's after it does.
        self.server.cli("send", "--as", "erin", "--password", PASSWORD, "--to", "alice", "被屏蔽的消息 withheld")
        self.server.cli("send", "--as", "carol", "--password", PASSWORD, "--to", "alice", "carol after erin")
        alice.find("#dialog .close").click()
        alice.conversation("u:carol")
        alice.message("carol after erin")
        erins = self.server.cli("history", "--as", "erin", "--password", PASSWORD, "--with", "alice")
        self.assertIn("被屏蔽的消息 withheld", erins)
        self.assertNotIn("withheld", alice.js("return document.body.innerText"))
        # Nor after a reload (from the server's history, not the page's memory); the block is still shown.
        self.reload(alice)
        alice.conversation("u:erin")
        alice.message("认识一下 erin")
        wait_until(lambda: alice.read("#chat-subtitle").endswith("· blocked"), "still blocked after a reload")
        self.assertNotIn("withheld", alice.js("return document.body.innerText"))
        # On a phone, unblocked from the same button: erin's next message arrives.
        phone = self.page("alice", phone=True)
        phone.conversation("u:erin")
        phone.click("#manage")
        button = phone.visible("#dialog [data-action=block]")
        self.assertEqual(button.text, "Unblock erin")
        phone.shot(self.shots, "phone-blocked-dialog")
        button.click()
        wait_until(lambda: phone.find("#dialog [data-action=block]").text == "Block erin", "erin unblocked")
        phone.find("#dialog .close").click()
        self.server.cli("send", "--as", "erin", "--password", PASSWORD, "--to", "alice", "解除之后 after")
        phone.message("解除之后 after")
        self.assertNotIn("withheld", phone.js("return document.body.innerText"))
        self.assertFalse(phone.read("#chat-subtitle").endswith("· blocked"))

    # Pins and deleting for oneself

    def test_10_pin_at_the_top_and_delete_for_me(self):
        alice = self.alice
        for text in ("置顶这条 📌 pin me", "שלום delete me", "third"):
            self.server.cli("send", "--as", "bob", "--password", PASSWORD, "--to", "alice", text)
        bob = self.page("bob", phone=True)
        alice.conversation("u:bob")
        alice.message("third")
        alice.actions("置顶这条 📌 pin me", "pin")
        bar = lambda page: page.js("return document.querySelector('#messages .pinned-bar')?.innerText ?? ''")
        wait_until(lambda: "置顶这条 📌 pin me" in bar(alice), "the pinned bar")
        lines = self.server.cli("history", "--as", "bob", "--password", PASSWORD, "--with", "alice", "--json")
        self.assertIn('"pinned":true', next(line for line in lines.splitlines() if "pin me" in line))
        alice.shot(self.shots, "desktop-pinned")
        # Bob (on a phone) sees it at the top too, live, and unpins it from the list the bar opens.
        bob.conversation("u:alice")
        wait_until(lambda: "置顶这条 📌 pin me" in bar(bob), "the pin on bob's page")
        bob.shot(self.shots, "phone-pinned")
        bob.click("#messages .pinned-bar")
        bob.visible("#dialog [data-action=unpin]").click()
        wait_until(lambda: bar(alice) == "", "the pin gone from alice's page")
        bob.find("#dialog .close").click()
        # Delete for me: gone from alice's page, after a reload too; bob keeps it.
        alice.actions("שלום delete me", "hide")
        self.confirmation(alice, "Delete this message for you?")
        wait_until(lambda: "delete me" not in alice.js("return document.getElementById('messages').innerText"),
                   "the message gone")
        self.reload(alice)
        alice.conversation("u:bob")
        alice.message("third")
        self.assertNotIn("delete me", alice.js("return document.getElementById('messages').innerText"))
        bob.message("שלום delete me")
        # The newest deleted for her: the list's preview is the newest she still has.
        alice.actions("third", "hide")
        self.confirmation(alice, "Delete this message for you?")
        preview = lambda: alice.js("return document.querySelector('#conversations [data-key=\"u:bob\"]')?.innerText ?? ''")
        wait_until(lambda: "third" not in preview() and "pin me" in preview(), "the preview without the deleted one")

    # Voice notes

    def voice_notes(self, page, key):
        return page.driver.execute_async_script(VOICE_NOTES, key)

    def fetch_media(self, page, sha256):
        token = json.loads(page.js("return localStorage.getItem('courier.session')"))["token"]
        request = urllib.request.Request(f"{self.server.base}/media/{sha256}",
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request) as answer:
            return answer.read()

    def timer(self, page):
        return page.js("return document.querySelector('#composer .recording [role=timer]')?.textContent")

    def mic_free(self, page):
        return page.js("return __streams.every((s) => s.getTracks().every((t) => t.readyState === 'ended'))")

    def record(self, page, size, shot=False):
        """Starts a recording, and waits for the timer to say a second has passed; when the 🎤 was clicked."""
        clicked = time.monotonic()
        page.click("#voice")
        wait_until(lambda: self.timer(page) == "0:01", "a second recorded")
        self.assertFalse(page.find("#draft").is_displayed(), "the recorder in the draft's place")
        self.assertEqual(page.js("return document.activeElement.getAttribute('aria-label')"), "Send the voice note")
        self.assertFalse(self.mic_free(page), "the microphone in use")
        if shot:
            page.shot(self.shots, f"{size}-voice-recording")
            self.assertLessEqual(page.js("return document.documentElement.scrollWidth"),
                                 page.js("return window.innerWidth"), size)
            recorder = page.js("const r = document.querySelector('#composer .recording').parentElement"
                               ".getBoundingClientRect(); return [r.left, r.right, r.height]")
            self.assertGreaterEqual(recorder[0], 0)
            self.assertLessEqual(recorder[1], page.js("return window.innerWidth"))
            self.assertLess(recorder[2], 80, "the recorder one row high")
        return clicked

    def test_11_voice_note_recorded_and_sent(self):
        self.server.cli("send", "--as", "bob", "--password", PASSWORD, "--to", "alice", "录一段语音 voice please")
        alice, bob = self.alice, self.page("bob", phone=True)
        alice.conversation("u:bob")
        bob.conversation("u:alice")
        # Alice on a desktop sends to bob on a phone; then the other way.
        for size, page, key, other, other_key, user in (("desktop", alice, "u:bob", bob, "u:alice", "alice"),
                                                         ("phone", bob, "u:alice", alice, "u:bob", "bob")):
            page.message("录一段语音 voice please")
            page.js(KEEP_STREAMS)
            mic = page.visible("#voice")
            self.assertEqual(mic.get_attribute("aria-label"), "Record a voice note")
            before = len(self.voice_notes(page, key))
            # Cancelled: nothing sent, the microphone let go of, the draft back.
            self.record(page, size)
            page.click('#composer [aria-label="Cancel the voice note"]')
            wait_until(lambda: page.find("#draft").is_displayed(), "the draft back")
            self.assertEqual(page.all("#composer .recording"), [])
            self.assertTrue(self.mic_free(page), "the microphone let go of after Cancel")
            # Past the limit (the page's clock moved on 15 min): it stops and waits; Cancel drops it too.
            page.click("#voice")
            page.visible("#composer .recording")
            page.js("window.__realNow = Date.now; Date.now = () => window.__realNow() + 15 * 60 * 1000;")
            try:
                wait_until(lambda: self.timer(page) == "15:00", "stopped at 15:00")
                wait_until(lambda: self.mic_free(page), "the microphone let go of at the limit")
                page.click('#composer [aria-label="Cancel the voice note"]')
            finally:
                page.js("Date.now = window.__realNow;")
            # Recorded and sent.
            clicked = self.record(page, size, shot=True)
            page.click('#composer [aria-label="Send the voice note"]')
            wait_until(lambda: page.find("#draft").is_displayed(), "the draft back")
            self.assertTrue(self.mic_free(page), "the microphone let go of after Send")
            notes = wait_until(lambda: (lambda n: n if len(n) == before + 1 else None)(self.voice_notes(page, key)),
                               "the voice note in the sender's page")
            media = notes[-1]
            self.assertEqual(media["kind"], "KIND_VOICE")
            self.assertRegex(media["mime"], r"^audio/(webm|ogg)$")
            self.assertRegex(media["name"], r"^voice-\d{8}-\d{6}\.(webm|ogg)$")
            self.assertGreaterEqual(media["durationMs"], 1000)
            self.assertLessEqual(media["durationMs"], 1000 * (time.monotonic() - clicked) + 50)
            # The other side: the same Media, its length shown beside the player; the bytes a real recording.
            theirs = wait_until(lambda: [m for m in self.voice_notes(other, other_key)
                                         if m["sha256"] == media["sha256"]], "the voice note on the other page")[0]
            self.assertEqual((theirs["kind"], theirs["durationMs"], theirs["mime"]),
                             ("KIND_VOICE", media["durationMs"], media["mime"]))
            seconds = media["durationMs"] // 1000
            wait_until(lambda: len(other.all("#messages .voice-length")) == len(other.all("#messages audio.voice"))
                       == (1 if size == "desktop" else 2), "every voice note's length shown")
            self.assertEqual(other.all("#messages .voice-length")[-1].text, f"0:{seconds:02d}")
            data = self.fetch_media(other, media["sha256"])
            self.assertEqual(len(data), int(media["size"]))
            self.assertTrue(data.startswith(b"\x1a\x45\xdf\xa3" if media["mime"] == "audio/webm" else b"OggS"),
                            data[:16])
            # The server's history: one voice note, the cancelled ones never sent.
            lines = [json.loads(line) for line in self.server.cli(
                "history", "--as", user, "--password", PASSWORD, "--with", "bob" if user == "alice" else "alice",
                "--json").splitlines()]
            voices = [line for line in lines if line["kind"] == "voice"]
            self.assertEqual(len(voices), 1 if size == "desktop" else 2)
            self.assertEqual((voices[-1]["sha256"], voices[-1]["mime"], voices[-1]["from"]),
                             (media["sha256"], media["mime"], user))
            self.assertEqual(len(self.voice_notes(page, key)), before + 1)
            other.shot(self.shots, f"{'phone' if size == 'desktop' else 'desktop'}-voice-received")
            page.shot(self.shots, f"{size}-voice-sent")
        # A microphone refused: said in the page's way, nothing recorded.
        alice.js("navigator.mediaDevices.getUserMedia = () => Promise.reject("
                 "new DOMException('Permission denied', 'NotAllowedError'))")
        alice.click("#voice")
        wait_until(lambda: any(t.text == "The microphone is not allowed for this page." for t in alice.all(".toast")),
                   "the refusal said")
        self.assertEqual(alice.all("#composer .recording"), [])
        self.assertTrue(alice.find("#draft").is_displayed())
        alice.shot(self.shots, "desktop-voice-refused")
        alice.driver.refresh()
        alice.wait_online()

    # Forwarding

    def picture_message(self, page, width):
        """The acknowledged message whose picture is `width` pixels wide, once it is shown."""
        def find():
            for element in page.all("#messages .message[data-seq]"):
                for image in element.find_elements(By.CSS_SELECTOR, "img.image"):
                    if page.js("return arguments[0].complete && arguments[0].naturalWidth", image) == width:
                        return element
            return None
        return wait_until(find, f"a picture {width} pixels wide")

    def forward_to(self, page, key):
        """Picks a conversation in the Forward dialog; the dialog closes."""
        page.click(f'#dialog [data-key="{key}"]')
        wait_until(lambda: not page.find("#dialog").is_displayed(), "the dialog closed")

    def menu_actions(self, page):
        return page.js("return [...document.querySelectorAll('#menu [data-action]')].map((b) => b.dataset.action)")

    def history(self, user, peer):
        return [json.loads(line) for line in self.server.cli(
            "history", "--as", user, "--password", PASSWORD, "--with", peer, "--json").splitlines()]

    def test_12_forward_text_and_media(self):
        alice = self.alice
        self.server.cli("send", "--as", "zhangwei", "--password", PASSWORD, "--to", "alice", "明天见 👋")
        self.server.cli("send", "--as", "carol", "--password", PASSWORD, "--to", "alice", "carol 在这里")
        # Carol sees 张伟's display name only as someone she knows (the server shows strangers a name alone).
        self.server.cli("send", "--as", "zhangwei", "--password", PASSWORD, "--to", "carol", "你好 carol")
        alice.conversation("u:zhangwei")
        alice.message("明天见 👋")
        alice.actions("明天见 👋", "forward")
        # The dialog lists alice's conversations by the names the page shows them by; the filter narrows them.
        wait_until(lambda: alice.read('#dialog [data-key="u:zhangwei"] .conversation-title') == "张伟", "张伟 listed")
        self.assertEqual(alice.read("#dialog h2"), "Forward to…")
        self.assertIn("u:carol", [b.get_attribute("data-key") for b in alice.all("#dialog .conversation")])
        self.contrast(alice, "desktop forward dialog")
        alice.shot(self.shots, "desktop-forward-dialog")
        alice.find("#dialog input[type=search]").send_keys("car")
        wait_until(lambda: [b.get_attribute("data-key") for b in alice.all("#dialog .conversation")] == ["u:carol"],
                   "carol alone left")
        self.forward_to(alice, "u:carol")
        wait_until(lambda: any(t.text == "Forwarded to carol" for t in alice.all(".toast")), "the forward said")
        # Carol (on a phone) gets it marked with the first sender's display name; the server says its user name.
        carol = self.page("carol", phone=True)
        carol.conversation("u:alice")
        forwarded = lambda page, text: page.message(text).find_element(By.CSS_SELECTOR, ".forwarded").text
        wait_until(lambda: forwarded(carol, "明天见 👋") == "Forwarded from 张伟", "the forward marked on carol's page")
        self.assertEqual(carol.js("return arguments[0].querySelector('.bubble > p').className",
                                  carol.message("明天见 👋")), "forwarded", "the line above the body")
        self.assertEqual([(m["from"], m["forwarded_from"]) for m in self.history("carol", "alice")
                          if m.get("text") == "明天见 👋"], [("alice", "zhangwei")])
        # Forwarded again, from the phone: still marked with the first sender.
        carol.actions("明天见 👋", "forward")
        carol.visible('#dialog [data-key="u:zhangwei"]')
        carol.shot(self.shots, "phone-forward-dialog")
        self.forward_to(carol, "u:zhangwei")
        wait_until(lambda: [m["forwarded_from"] for m in self.history("zhangwei", "carol")
                            if m.get("text") == "明天见 👋"] == ["zhangwei"], "the forward of a forward")
        # Alice's copy is hers but not to edit; her own words are.
        alice.conversation("u:carol")
        wait_until(lambda: forwarded(alice, "明天见 👋") == "Forwarded from 张伟", "the forward on alice's page")
        alice.open_menu("明天见 👋")
        self.assertIn("forward", self.menu_actions(alice))
        self.assertNotIn("edit", self.menu_actions(alice))
        alice.press(Keys.ESCAPE)
        alice.send("我自己的话 my own")
        alice.open_menu("我自己的话 my own")
        wait_until(lambda: "edit" in self.menu_actions(alice), "Edit on her own words")
        alice.press(Keys.ESCAPE)
        # A picture: forwarded without an upload, fetched and shown on carol's page.
        path = os.path.join(self.folder, "转发 forward.png")
        with open(path, "wb") as file:
            file.write(png(72, 40))
        alice.conversation("u:zhangwei")
        alice.find("#file").send_keys(path)
        def open_picture_menu():
            self.picture_message(alice, 72).find_element(By.CSS_SELECTOR, ".actions").click()
            return True
        wait_until(open_picture_menu, "the picture's menu")
        alice.visible("#menu [data-action=forward]").click()
        self.forward_to(alice, "u:carol")
        copy = self.picture_message(carol, 72)
        self.assertEqual(copy.find_element(By.CSS_SELECTOR, ".forwarded").text, "Forwarded from alice")
        pictures = wait_until(lambda: [m for m in self.history("carol", "alice") if m["kind"] == "image"],
                              "the picture in carol's history")
        self.assertEqual((pictures[-1]["from"], pictures[-1]["forwarded_from"]), ("alice", "alice"))
        with open(path, "rb") as file:
            self.assertEqual(self.fetch_media(carol, pictures[-1]["sha256"]), file.read())
        self.contrast(carol, "phone forwarded")
        carol.shot(self.shots, "phone-forwarded")
        alice.conversation("u:carol")
        self.picture_message(alice, 72)
        self.contrast(alice, "desktop forwarded")
        alice.shot(self.shots, "desktop-forwarded")
        # Dark: the line stays readable.
        emulate_scheme(carol, "dark")
        wait_until(lambda: carol.js(BACKGROUND) < 0.15, "a dark page")
        self.contrast(carol, "phone forwarded, dark")
        carol.shot(self.shots, "phone-dark-forwarded")
        carol.quit()
        self.pages.remove(carol)

    # Who reacted

    def chip(self, page, text, key):
        return page.message(text).find_element(By.CSS_SELECTOR, f'.reaction[data-key="{key}"]')

    def chips(self, page, text):
        return [c.text for c in page.message(text).find_elements(By.CSS_SELECTOR, ".reaction")]

    def test_13_who_reacted(self):
        alice = self.alice
        text = "谁点了赞？ who reacted?"
        self.admin("group", "create", "reactions", "--owner", "zhangwei", "--members", "alice,tanaka,layla,neko,dana")
        self.server.cli("send", "--as", "zhangwei", "--password", PASSWORD, "--group", "reactions",
                        "--id", "who-reacted", text)
        for user, key in (("tanaka", "👍"), ("neko", "❤️"), ("layla", "👍"), ("alice", "👍"), ("dana", "❤️")):
            self.server.cli("react", "--as", user, "--password", PASSWORD, "who-reacted", key, "--group", "reactions")
        expected = [["👍", ["田中", "ليلى", "alice"]], ["❤️", ["🐱 Neko", "דנה"]]]
        alice.conversation("g:reactions")
        wait_until(lambda: self.chips(alice, text) == ["👍 3", "❤️ 2"], "the reactions shown")
        self.assertIn("who reacted", self.chip(alice, text, "👍").get_attribute("title"))
        alice.driver.execute_async_script(WATCH_REACTS)
        # A long press on 👍 lists who gave each, the earliest first, by their display names; it toggles nothing,
        # even let go before the list comes.
        alice.js("window.__slow = true")
        def hold():
            ActionChains(alice.driver).click_and_hold(self.chip(alice, text, "👍")).perform()
            return True
        wait_until(hold, "a press on 👍")
        wait_until(lambda: alice.js("return !!window.__answer"), "the list asked for")
        ActionChains(alice.driver).release().perform()
        alice.js("window.__slow = false; window.__answer()")
        alice.visible('#dialog li[data-key="👍"]')
        self.assertEqual(alice.read("#dialog h2"), "Who reacted")
        self.assertEqual([line[:2] for line in alice.js(REACTORS)], expected)
        self.assertEqual(alice.js(REACTORS)[0][2], "👍 3: 田中, ليلى, alice")
        self.contrast(alice, "desktop who reacted")
        alice.shot(self.shots, "desktop-who-reacted")
        alice.find("#dialog .close").click()
        # A right click on ❤️ too; past the users listed, how many more.
        alice.js("window.__cut = true")
        def right_click():
            ActionChains(alice.driver).context_click(self.chip(alice, text, "❤️")).perform()
            return True
        wait_until(right_click, "a right click on ❤️")
        alice.visible('#dialog li[data-key="❤️"]')
        self.assertEqual([line[2] for line in alice.js(REACTORS)], ["👍 3: 田中 and 2 more", "❤️ 2: 🐱 Neko and 1 more"])
        alice.js("window.__cut = false")
        alice.find("#dialog .close").click()
        wait_until(right_click, "another right click on ❤️")
        wait_until(lambda: [line[:2] for line in alice.js(REACTORS)] == expected, "every name again")
        alice.find("#dialog .close").click()
        self.assertEqual(alice.js("return __reacts"), [], "nothing toggled by the long press or the right click")
        self.assertEqual(self.chips(alice, text), ["👍 3", "❤️ 2"])
        self.assertEqual(self.chip(alice, text, "👍").get_attribute("aria-pressed"), "true")
        # A plain click still toggles alice's own, once.
        self.chip(alice, text, "👍").click()
        wait_until(lambda: self.chips(alice, text) == ["👍 2", "❤️ 2"], "alice's 👍 taken off")
        self.assertEqual([(r["key"], r.get("off")) for r in alice.js("return __reacts")], [("👍", True)])
        self.chip(alice, text, "👍").click()
        wait_until(lambda: self.chips(alice, text) == ["👍 3", "❤️ 2"], "alice's 👍 back")
        # On a phone, a touch held on ❤️.
        layla = self.page("layla", phone=True)
        layla.conversation("g:reactions")
        wait_until(lambda: self.chips(layla, text) == ["👍 3", "❤️ 2"], "the reactions on the phone")
        layla.driver.execute_async_script(WATCH_REACTS)
        finger = PointerInput(interaction.POINTER_TOUCH, "finger")
        def touch():
            actions = ActionBuilder(layla.driver, mouse=finger)
            actions.pointer_action.move_to(self.chip(layla, text, "❤️")).pointer_down()
            actions.perform()
            return True
        wait_until(touch, "a touch on ❤️")
        layla.visible('#dialog li[data-key="❤️"]')
        actions = ActionBuilder(layla.driver, mouse=finger)
        actions.pointer_action.pointer_up()
        actions.perform()
        self.assertEqual([line[:2] for line in layla.js(REACTORS)], expected)
        self.contrast(layla, "phone who reacted")
        layla.shot(self.shots, "phone-who-reacted")
        layla.find("#dialog .close").click()
        self.assertEqual(layla.js("return __reacts"), [], "nothing toggled by the touch held")
        self.assertEqual(self.chips(layla, text), ["👍 3", "❤️ 2"])
        # The context-menu key after that touch (a keydown, then the menu's event, as Shift+F10 gives them) still
        # lists them: the press before it says nothing of this one.
        layla.js("""const chip = arguments[0]; chip.focus();
            chip.dispatchEvent(new KeyboardEvent('keydown', {key: 'F10', shiftKey: true, bubbles: true}));
            chip.dispatchEvent(new MouseEvent('contextmenu', {bubbles: true, cancelable: true}));""",
                 self.chip(layla, text, "👍"))
        layla.visible('#dialog li[data-key="👍"]')
        layla.find("#dialog .close").click()
        layla.quit()
        self.pages.remove(layla)

    # Search

    def search(self, page, query):
        """The search's hits for a query, as (conversation key, marked words, text) once they are shown."""
        box = page.visible("#search")
        box.clear()
        box.send_keys(query + Keys.ENTER)
        wait_until(lambda: f"“{query}”" in page.read("#search-results") or None, f"the search for {query}")
        def hits():
            found = page.all("#search-results .hit")
            return [(h.get_attribute("data-key"), [m.text for m in h.find_elements(By.CSS_SELECTOR, "mark")], h.text)
                    for h in found] or None
        return wait_until(hits, f"hits for {query}")

    def test_14_search_by_beginnings_and_file_names(self):
        alice = self.alice
        self.server.cli("send", "--as", "gina", "--password", PASSWORD, "--to", "alice", "See you TOMORROW at the café 👋")
        self.server.cli("send", "--as", "gina", "--password", PASSWORD, "--to", "alice", "Привет, увидимся завтра")
        self.server.cli("send", "--as", "gina", "--password", PASSWORD, "--to", "alice", "明天见，带上报告")
        # A file sent from the page, found by its name.
        path = os.path.join(self.folder, "Quarterly-Report 季度.txt")
        with open(path, "w") as file:
            file.write("numbers\n")
        alice.conversation("u:gina")
        alice.message("明天见，带上报告")
        alice.find("#file").send_keys(path)
        wait_until(lambda: [m for m in self.history("alice", "gina") if m["kind"] == "file"], "the file sent")
        # A word by its beginning, in Latin and Cyrillic; the mark covers what was typed.
        hits = self.search(alice, "tomor")
        self.assertEqual([(key, marks) for key, marks, _ in hits], [("u:gina", ["TOMOR"])])
        hits = self.search(alice, "при зав")
        self.assertEqual([(key, marks) for key, marks, _ in hits], [("u:gina", ["При", "зав"])])
        # Two letters are a whole word, not a beginning; a word's middle is not its beginning.
        self.assertEqual(self.search_none(alice, "yo"), True)
        self.assertEqual(self.search_none(alice, "morrow"), True)
        # The file by a beginning of its name, and by the Chinese in it.
        for query, mark in (("quarter", "Quarter"), ("季度", "季度")):
            hits = self.search(alice, query)
            self.assertEqual(len(hits), 1, hits)
            self.assertIn(mark, hits[0][1])
            self.assertIn("Quarterly-Report 季度.txt", hits[0][2])
        alice.shot(self.shots, "desktop-search-file")
        alice.click("#search-results .hit")
        wait_until(lambda: alice.all("#messages .message.flash"), "the jump to the file")
        box = alice.find("#search")
        box.clear()
        box.send_keys(Keys.ENTER)
        # On a phone, the same.
        gina = self.page("gina", phone=True)
        hits = self.search(gina, "TOMORR")
        self.assertEqual([(key, marks) for key, marks, _ in hits], [("u:alice", ["TOMORR"])])
        self.contrast(gina, "phone search")
        gina.shot(self.shots, "phone-search-beginning")
        gina.quit()
        self.pages.remove(gina)

    def search_none(self, page, query):
        """True once the search says it found nothing (and no hit is shown)."""
        box = page.visible("#search")
        box.clear()
        box.send_keys(query + Keys.ENTER)
        wait_until(lambda: f"Nothing found for “{query}”" in page.read("#search-results") or None,
                   f"no hits for {query}")
        return page.all("#search-results .hit") == []


if __name__ == "__main__":
    if not os.path.exists(COURIER):
        sys.exit(f"{COURIER} not found: build first (swift build)")
    result = unittest.main(verbosity=2, exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)
