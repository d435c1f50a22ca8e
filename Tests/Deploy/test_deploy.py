#!/usr/bin/env python3
"""docs/DEPLOY.md's "nginx and TLS in front", run as the page has it.

The page's two nginx blocks and its courier.toml block are taken from the page itself. Only the name, the
certificate's paths and the port numbers are changed: chat.example.com becomes chat.example.test, the certificate a
self-signed one made here with openssl, and every port a free one on 127.0.0.1. Then Debian's nginx runs them in
front of a real `courier serve --config`. Through nginx, Chromium uses the web chat over HTTPS while the CLI logs in
through the native stream port with --tls; a compat client logs in on the compat stream port; a file's byte range
comes through /media; port 80 redirects. A connection that skips nginx is closed.

Run by scripts/test:  python3 Tests/Deploy/test_deploy.py
  COURIER_BIN   the courier binary (default .build/debug/courier)
"""

import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Web"))
from test_web import COURIER, LIMIT, PASSWORD, ROOT, Page, wait_until  # noqa: E402

NAME = "chat.example.test"
STREAM_MODULE = "/usr/lib/nginx/modules/ngx_stream_module.so"


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def documented_blocks():
    """The fenced blocks of DEPLOY.md's nginx section, by language, in order."""
    with open(os.path.join(ROOT, "docs/DEPLOY.md"), encoding="utf-8") as file:
        text = file.read()
    section = text.split("## nginx and TLS in front", 1)[1].split("\n## ", 1)[0]
    blocks = {}
    for language, body in re.findall(r"^```(\w*)\n(.*?)^```$", section, flags=re.S | re.M):
        blocks.setdefault(language, []).append(body)
    return blocks


def substitute(text, replacements):
    """Each replacement must apply: a page that changed its names or ports fails here, not silently."""
    for old, new in replacements:
        if old not in text:
            raise AssertionError(f"DEPLOY.md's block no longer says {old!r}:\n{text}")
        text = text.replace(old, new)
    return text


def wait_for_port(port, what):
    def accepts():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False
    wait_until(accepts, what)


class DeployTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="courier-deploy-")
        folder = cls.folder
        blocks = documented_blocks()
        assert len(blocks.get("nginx", [])) == 2 and len(blocks.get("toml", [])) == 1, blocks.keys()
        http_conf, stream_conf = blocks["nginx"]
        toml = blocks["toml"][0]

        ports = {name: free_port() for name in ("https", "http", "native_tls", "compat_tls", "native", "compat",
                                                "courier_http")}
        cls.ports = ports
        cert, key = os.path.join(folder, "fullchain.pem"), os.path.join(folder, "privkey.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={NAME}",
                        "-addext", f"subjectAltName=DNS:{NAME},IP:127.0.0.1"],
                       check=True, capture_output=True)
        cls.cert = cert
        acme = os.path.join(folder, "acme")
        os.makedirs(acme)
        certificates = [("/etc/letsencrypt/live/chat.example.com/fullchain.pem", cert),
                        ("/etc/letsencrypt/live/chat.example.com/privkey.pem", key)]
        upstreams = [("server 127.0.0.1:6980;", f"server 127.0.0.1:{ports['courier_http']};")]
        http_conf = substitute(http_conf, certificates + upstreams + [
            ("listen 80;", f"listen 127.0.0.1:{ports['http']};"),
            ("listen 443 ssl;", f"listen 127.0.0.1:{ports['https']} ssl;"),
            ("root /var/www/acme;", f"root {acme};"),
            ("server_name chat.example.com;", f"server_name {NAME};"),
        ])
        stream_conf = substitute(stream_conf, certificates + [
            ("server 127.0.0.1:6970;", f"server 127.0.0.1:{ports['native']};"),
            ("server 127.0.0.1:6969;", f"server 127.0.0.1:{ports['compat']};"),
            ("listen 6971 ssl;", f"listen 127.0.0.1:{ports['native_tls']} ssl;"),
            ("listen 6968 ssl;", f"listen 127.0.0.1:{ports['compat_tls']} ssl;"),
        ])
        cls.origin = f"https://{NAME}:{ports['https']}"
        data = os.path.join(folder, "数据")
        toml = substitute(toml, [
            ('data = "/var/lib/courier"', f'data = "{data}"'),
            ("port = 6970", f"port = {ports['native']}"),
            ("compat-port = 6969", f"compat-port = {ports['compat']}"),
            ("http-port = 6980", f"http-port = {ports['courier_http']}"),
            ('allow-origin = ["https://chat.example.com"]', f'allow-origin = ["{cls.origin}"]'),
        ])
        cls.config = os.path.join(folder, "courier.toml")
        with open(cls.config, "w", encoding="utf-8") as file:
            file.write(toml)
        os.chmod(cls.config, 0o640)

        cls.home = os.path.join(folder, "home")
        os.makedirs(cls.home)
        for user in ("alice", "bob"):
            cls.courier("user", "add", user, "--password", PASSWORD, "--config", cls.config)

        # Beside the page's settings, small per-address limits (flags win over the file), for test 4 to see whom
        # Courier counts: each client behind nginx, or nginx.
        cls.server = subprocess.Popen([COURIER, "serve", "--config", cls.config, "--log-level", "warning",
                                       "--limit", "max-unauthenticated-per-address=1",
                                       "--limit", "api-requests-per-second-per-address=0.01",
                                       "--limit", "api-request-burst-per-address=2"],
                                      stdout=subprocess.PIPE, stderr=sys.stderr, text=True, env=cls.env())
        line = cls.server.stdout.readline()
        if "listening" not in line:
            raise RuntimeError(f"courier serve did not start: {line!r}")

        nginx_folder = os.path.join(folder, "nginx")
        os.makedirs(nginx_folder)
        for name, text in (("courier.conf", http_conf), ("courier-stream.conf", stream_conf)):
            with open(os.path.join(nginx_folder, name), "w", encoding="utf-8") as file:
                file.write(text)
        # What Debian's nginx.conf gives around the two files: the stream module, an http block including conf.d,
        # a stream block including the TCP part. Here as an unprivileged nginx in the foreground, its files in the
        # temporary folder.
        main = f"""
load_module {STREAM_MODULE};
{"user root;" if os.geteuid() == 0 else ""}
daemon off;
worker_processes 1;
pid {nginx_folder}/nginx.pid;
error_log {nginx_folder}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log {nginx_folder}/access.log;
    client_body_temp_path {nginx_folder}/body;
    proxy_temp_path {nginx_folder}/proxy;
    fastcgi_temp_path {nginx_folder}/fastcgi;
    uwsgi_temp_path {nginx_folder}/uwsgi;
    scgi_temp_path {nginx_folder}/scgi;
    include {nginx_folder}/courier.conf;
}}
stream {{
    include {nginx_folder}/courier-stream.conf;
}}
"""
        with open(os.path.join(nginx_folder, "nginx.conf"), "w", encoding="utf-8") as file:
            file.write(main)
        checked = subprocess.run(["nginx", "-t", "-p", nginx_folder, "-c", os.path.join(nginx_folder, "nginx.conf")],
                                 capture_output=True, text=True)
        if checked.returncode != 0:
            raise AssertionError(f"nginx -t refused the documented configuration:\n{checked.stderr}")
        cls.nginx = subprocess.Popen(["nginx", "-p", nginx_folder, "-c", os.path.join(nginx_folder, "nginx.conf")],
                                     stderr=sys.stderr)
        for name in ("https", "http", "native_tls", "compat_tls"):
            wait_for_port(ports[name], f"nginx on its {name} port")
        cls.pages = []

    @classmethod
    def tearDownClass(cls):
        for page in cls.pages:
            page.quit()
        for process in (cls.nginx, cls.server):
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=60)
        cls.server.stdout.close()
        shutil.rmtree(cls.folder, ignore_errors=True)

    @classmethod
    def env(cls):
        return dict(os.environ, HOME=cls.home, XDG_CONFIG_HOME=os.path.join(cls.home, "config"),
                    XDG_DATA_HOME=os.path.join(cls.home, "share"), COURIER_CONFIG="", COURIER_DATA="")

    @classmethod
    def courier(cls, *arguments, check=True):
        done = subprocess.run([COURIER, *arguments], capture_output=True, text=True, env=cls.env(), timeout=120)
        if check and done.returncode != 0:
            raise AssertionError(f"courier {' '.join(arguments)} failed: {done.stdout}{done.stderr}")
        return done

    def cli(self, *arguments):
        """A client command as bob, through nginx's native stream port, trusting the self-signed certificate."""
        return self.courier(*arguments, "--as", "bob", "--password", PASSWORD,
                            "--server", f"127.0.0.1:{self.ports['native_tls']}", "--tls", "--tls-ca", self.cert).stdout

    def curl(self, *arguments):
        done = subprocess.run(["curl", "--silent", "--show-error", "--max-time", "60", "--cacert", self.cert,
                               "--resolve", f"{NAME}:{self.ports['https']}:127.0.0.1", *arguments],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout

    def test_1_the_web_chat_and_the_cli_through_nginx(self):
        # The page over HTTPS, with its security headers.
        headers = self.curl("--dump-header", "-", "--output", "/dev/null", f"{self.origin}/")
        self.assertRegex(headers, r"^HTTP/1\.1 200")
        self.assertIn("content-security-policy:", headers.lower())
        self.assertIn("strict-transport-security: max-age=31536000", headers.lower())
        # /metrics is for Prometheus on Courier's own port, not for the world.
        hidden = self.curl("--output", "/dev/null", "--write-out", "%{http_code}", f"{self.origin}/metrics")
        self.assertEqual(hidden, "404")
        direct = subprocess.run(["curl", "--silent", f"http://127.0.0.1:{self.ports['courier_http']}/metrics"],
                                capture_output=True, text=True)
        self.assertIn("courier_connections_open", direct.stdout)
        # Port 80 sends browsers to https.
        moved = subprocess.run(["curl", "--silent", "--dump-header", "-", "--output", "/dev/null",
                                "--resolve", f"{NAME}:{self.ports['http']}:127.0.0.1",
                                f"http://{NAME}:{self.ports['http']}/chat?x=1"], capture_output=True, text=True)
        self.assertRegex(moved.stdout, r"^HTTP/1\.1 301")
        self.assertIn(f"location: https://{NAME}/chat?x=1", moved.stdout.lower())

        # The CLI through the native stream port, with TLS: nginx adds the PROXY header Courier expects.
        self.cli("send", "--to", "alice", "经由 nginx 的问候 👋 مرحبا")
        page = Page(self.origin, arguments=(f"--host-resolver-rules=MAP {NAME} 127.0.0.1",
                                            "--ignore-certificate-errors"))
        self.pages.append(page)
        page.log_in("alice")  # online: the page's /ws came through nginx's upgrade
        page.conversation("u:bob")
        page.message("经由 nginx 的问候 👋 مرحبا")
        page.send("收到了 ✅ nginx 后面")

        def answered():
            lines = self.cli("history", "--with", "alice", "--json")
            return [json.loads(line) for line in lines.splitlines() if "收到了 ✅ nginx 后面" in line]
        self.assertEqual(len(wait_until(answered, "the page's answer in bob's history")), 1)

        # A file through the native stream port, and a byte range of it through /media.
        path = os.path.join(self.folder, "文件.bin")
        content = bytes(range(256)) * 1024
        with open(path, "wb") as file:
            file.write(content)
        self.cli("send", "--to", "alice", "--file", path, "一个文件")

        def sent_file():
            lines = self.cli("history", "--with", "alice", "--json")
            return next((json.loads(line) for line in lines.splitlines() if '"sha256"' in line), None)
        sha256 = wait_until(sent_file, "the file in bob's history")["sha256"]
        token = json.loads(page.js("return localStorage.getItem('courier.session')"))["token"]
        ranged = subprocess.run(["curl", "--silent", "--show-error", "--max-time", "60", "--cacert", self.cert,
                                 "--resolve", f"{NAME}:{self.ports['https']}:127.0.0.1",
                                 "--header", f"Authorization: Bearer {token}", "--range", "1000-1009",
                                 "--dump-header", os.path.join(self.folder, "range-headers"),
                                 f"{self.origin}/media/{sha256}"], capture_output=True, timeout=120)
        self.assertEqual(ranged.returncode, 0, ranged.stderr)
        self.assertEqual(ranged.stdout, content[1000:1010])
        with open(os.path.join(self.folder, "range-headers"), encoding="latin-1") as file:
            range_headers = file.read().lower()
        self.assertRegex(range_headers, r"^http/1\.1 206")
        self.assertIn(f"content-range: bytes 1000-1009/{len(content)}", range_headers)

    def test_2_compat_through_the_stream_port(self):
        context = ssl.create_default_context(cafile=self.cert)
        with socket.create_connection(("127.0.0.1", self.ports["compat_tls"]), timeout=LIMIT) as raw:
            with context.wrap_socket(raw, server_hostname=NAME) as tls:
                header = json.dumps({"type": "auth", "user": "alice", "password": PASSWORD, "size": 0},
                                    ensure_ascii=False)
                tls.sendall(header.encode() + b"\r\n")
                received = b""
                deadline = time.monotonic() + LIMIT
                while b"welcome" not in received and time.monotonic() < deadline:
                    chunk = tls.recv(4096)
                    if not chunk:
                        break
                    received += chunk
                self.assertIn(b'"welcome"', received)

    def test_3_a_connection_that_skips_nginx_is_closed(self):
        # Loopback is the trusted proxy's address here: without nginx's PROXY header Courier closes the connection
        # before it is anybody's.
        with socket.create_connection(("127.0.0.1", self.ports["native"]), timeout=LIMIT) as direct:
            direct.sendall(b"\x89CRW\r\n\x1a\n\x00\x01")  # the native preface, as a client sends it first
            try:
                answer = direct.recv(100)
            except ConnectionResetError:
                answer = b""
            self.assertEqual(answer, b"")


    def open_connections(self):
        """courier_connections_open, from Courier's own port."""
        metrics = subprocess.run(["curl", "--silent", f"http://127.0.0.1:{self.ports['courier_http']}/metrics"],
                                 capture_output=True, text=True).stdout
        return int(float(re.search(r"^courier_connections_open (\S+)$", metrics, re.M).group(1)))

    def compat_from(self, address):
        """A TLS connection to nginx's compat stream port from a loopback address of its own, not logged in."""
        context = ssl.create_default_context(cafile=self.cert)
        raw = socket.create_connection(("127.0.0.1", self.ports["compat_tls"]), timeout=LIMIT,
                                       source_address=(address, 0))
        return context.wrap_socket(raw, server_hostname=NAME)

    def test_4_courier_counts_each_client_behind_nginx(self):
        # One connection not logged in per address (the limit given above). Two clients behind nginx each have
        # theirs; a second from the first is refused. Had Courier counted nginx, the second client would be.
        before = self.open_connections()
        first = self.compat_from("127.0.0.2")
        wait_until(lambda: self.open_connections() == before + 1, "the first client's connection counted")
        other = self.compat_from("127.0.0.3")
        wait_until(lambda: self.open_connections() == before + 2, "the other client's connection counted")
        again = self.compat_from("127.0.0.2")
        refused = b""
        while True:
            chunk = again.recv(4096)
            if not chunk:
                break
            refused += chunk
        self.assertIn(b"server-full", refused)
        for connection in (first, other, again):
            connection.close()

        # The API's rate per address counts each client by the X-Forwarded-For nginx adds.
        def me(address):
            return subprocess.run(["curl", "--silent", "--output", "/dev/null", "--write-out", "%{http_code}",
                                   "--interface", address, "--cacert", self.cert,
                                   "--resolve", f"{NAME}:{self.ports['https']}:127.0.0.1",
                                   "--header", "X-Forwarded-For: 198.51.100.77",  # the client's word: not believed
                                   f"{self.origin}/api/v1/me"], capture_output=True, text=True).stdout
        self.assertEqual([me("127.0.0.4") for _ in range(3)], ["401", "401", "429"])
        self.assertEqual(me("127.0.0.5"), "401")


if __name__ == "__main__":
    unittest.main(verbosity=2)
