import Foundation

/// A push service on loopback for the tests, written in Python on PyPI's `http-ece` and `cryptography` (no code of
/// Courier's): it makes subscribers (a P-256 key pair and an auth secret each, at an endpoint of its own), takes
/// pushes as RFC 8030 says, opens each one with the subscriber's keys (RFC 8291), checks its VAPID token (RFC 8292:
/// the ES256 signature under the key the header names, `aud` the endpoint's origin, `exp` within a day), and
/// answers each endpoint with the statuses a test asks for (201 otherwise).
///
/// - `GET /subscribe?name=N` makes a subscriber: `PushSubscription.toJSON()` as a browser gives it.
/// - `POST /answers` `{"N": ["429:2", "500", "410", "hang"]}`: the next answers of N's endpoint
///   (`status[:Retry-After]`; `hang` never answers, and is listed with status 0).
/// - `GET /received` lists every push taken, in order: `name`, `status` (the answer), `headers` (lower-case names),
///   `payload` (the opened JSON's members, or null with `error`), `vapid` (`valid`, `aud`, `exp`, `sub`, `k`).
///
/// - `POST /gateway/N/_matrix/push/v1/notify`: a push gateway (Matrix's Push Gateway API) named N. It checks the
///   body's shape (`notification` with `devices`, `counts.unread`, `prio`), lists it as a push to N (`payload`: the
///   notification's members), and answers 200 with `{"rejected": []}`, or as N's answers say (`200:rejected` lists
///   every pushkey of the request as rejected).
///
/// - `POST /webhook/N`: a bot's webhook named N, its deliveries verified with PyPI's `standardwebhooks` under the
///   secret `POST /secrets {"N": "whsec_…"}` registered (`signature`), and verified again as if six minutes later,
///   which the library must refuse (`replay_refused`); `payload` is the update's members.
///
/// The service stops when the test's process ends, or after an hour.
public final class TestPushService: Sendable {
    public let port: Int
    /// The Python process's id, to stop it.
    private let process: ChildProcess
    private let folder: TemporaryDirectory

    /// The origin subscribers' endpoints are on.
    public var origin: String { "http://127.0.0.1:\(self.port)" }

    /// The URL of a bot's webhook named `name`, whose deliveries are verified under `secret` (`whsec_…`).
    public func webhook(_ name: String) -> String { "\(self.origin)/webhook/\(name)" }

    /// Registers the secret a webhook's deliveries are verified under.
    public func expect(secret: String, for name: String) async throws {
        let body = try JSONSerialization.data(withJSONObject: [name: secret])
        _ = try await ExternalProgram.curl([
            "--silent", "--fail", "--data-binary", String(decoding: body, as: UTF8.self), "\(self.origin)/secrets",
        ])
    }

    /// The `notify` URL of a push gateway named `name`.
    public func gateway(_ name: String) -> String { "\(self.origin)/gateway/\(name)/_matrix/push/v1/notify" }

    private init(port: Int, process: ChildProcess, folder: TemporaryDirectory) {
        self.port = port
        self.process = process
        self.folder = folder
    }

    deinit {
        self.process.terminate()
        self.folder.remove()
    }

    /// Starts a push service on a free port of 127.0.0.1.
    public static func start() async throws -> TestPushService {
        let folder = try TemporaryDirectory(prefix: "courier-push-service")
        let portFile = folder.url.appendingPathComponent("port")
        let process = try ChildProcess(
            executable: "/usr/bin/env",
            arguments: ["python3", "-c", Self.script, portFile.path, String(getpid())],
            standardOutput: .null
        )
        var port = 0
        try await waitUntil("the push service listens") {
            guard process.isRunning else {
                throw ExternalProgram.Failure(
                    description: "the push service (python3 with http-ece, which scripts/test installs) exited"
                )
            }
            guard let text = try? String(contentsOf: portFile, encoding: .utf8), let number = Int(text) else {
                return false
            }
            port = number
            return true
        }
        return TestPushService(port: port, process: process, folder: folder)
    }

    /// A new subscriber: the JSON a browser's `PushSubscription.toJSON()` gives, and its endpoint.
    public func subscribe(_ name: String) async throws -> (json: String, endpoint: String) {
        let json = try await ExternalProgram.curl(["--silent", "--fail", "\(self.origin)/subscribe?name=\(name)"])
        guard let object = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any],
            let endpoint = object["endpoint"] as? String
        else { throw ExternalProgram.Failure(description: "the push service's subscriber: \(json)") }
        return (json, endpoint)
    }

    /// Sets the next answers of a subscriber's endpoint (`"429:2"`: 429 with `Retry-After: 2`).
    public func answer(_ name: String, with answers: [String]) async throws {
        let body = try JSONSerialization.data(withJSONObject: [name: answers])
        _ = try await ExternalProgram.curl([
            "--silent", "--fail", "--data-binary", String(decoding: body, as: UTF8.self), "\(self.origin)/answers",
        ])
    }

    /// One push the service took.
    public struct Push: Sendable {
        public var name: String
        public var status: Int
        public var headers: [String: String]
        /// The opened payload's members (nil when it could not be opened: see ``error``): strings as they are, other
        /// values as compact JSON (`true`, `{"user":"alice"}`).
        public var payload: [String: String]?
        public var error: String?
        public var vapidValid: Bool
        public var audience: String?
        public var expiresSeconds: Int64?
        public var subject: String?
        public var vapidKey: String?
        /// For a webhook: whether standardwebhooks verified its signature, and refused it again as a replay six
        /// minutes later.
        public var signatureValid = false
        public var replayRefused = false
    }

    /// Every push taken so far, in order.
    public func received() async throws -> [Push] {
        let json = try await ExternalProgram.curl(["--silent", "--fail", "\(self.origin)/received"])
        guard let list = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]] else {
            throw ExternalProgram.Failure(description: "the push service's list: \(json)")
        }
        return list.map { entry in
            let vapid = entry["vapid"] as? [String: Any] ?? [:]
            return Push(
                name: entry["name"] as? String ?? "",
                status: entry["status"] as? Int ?? 0,
                headers: entry["headers"] as? [String: String] ?? [:],
                payload: entry["payload"] as? [String: String],
                error: entry["error"] as? String,
                vapidValid: vapid["valid"] as? Bool ?? false,
                audience: vapid["aud"] as? String,
                expiresSeconds: (vapid["exp"] as? NSNumber)?.int64Value,
                subject: vapid["sub"] as? String,
                vapidKey: vapid["k"] as? String,
                signatureValid: entry["signature"] as? Bool ?? false,
                replayRefused: entry["replay_refused"] as? Bool ?? false
            )
        }
    }

    static let script = #"""
        import base64, json, os, sys, threading, time, urllib.parse
        from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
        import http_ece
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

        port_file, parent = sys.argv[1], int(sys.argv[2])
        lock = threading.Lock()
        subscribers, answers, received, secrets = {}, {}, [], {}

        def b64d(s):
            return base64.urlsafe_b64decode(s + '=' * (-len(s) % 4))

        def b64e(b):
            return base64.urlsafe_b64encode(b).decode().rstrip('=')

        def check_vapid(header, origin):
            out = {'valid': False}
            try:
                scheme, _, rest = header.partition(' ')
                if scheme.lower() != 'vapid':
                    return out
                params = dict(p.strip().split('=', 1) for p in rest.split(','))
                token, key = params['t'], params['k']
                out['k'] = key
                head, claims, signature = token.split('.')
                header_json, claims_json = json.loads(b64d(head)), json.loads(b64d(claims))
                out.update({k: claims_json.get(k) for k in ('aud', 'exp', 'sub')})
                public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64d(key))
                raw = b64d(signature)
                der = encode_dss_signature(int.from_bytes(raw[:32], 'big'), int.from_bytes(raw[32:], 'big'))
                public.verify(der, (head + '.' + claims).encode(), ec.ECDSA(hashes.SHA256()))
                now = time.time()
                out['valid'] = (header_json.get('alg') == 'ES256' and claims_json.get('aud') == origin
                                and now < claims_json.get('exp', 0) <= now + 86400 + 60 and len(raw) == 64)
            except Exception as error:
                out['error'] = repr(error)
            return out

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, status, body=b'', headers=()):
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                url = urllib.parse.urlparse(self.path)
                if url.path == '/subscribe':
                    name = urllib.parse.parse_qs(url.query)['name'][0]
                    key = ec.generate_private_key(ec.SECP256R1())
                    auth = os.urandom(16)
                    point = key.public_key().public_bytes(serialization.Encoding.X962,
                                                          serialization.PublicFormat.UncompressedPoint)
                    with lock:
                        subscribers[name] = (key, auth)
                    body = {'endpoint': 'http://127.0.0.1:%d/push/%s' % (self.server.server_port, name),
                            'expirationTime': None, 'keys': {'p256dh': b64e(point), 'auth': b64e(auth)}}
                    self.reply(200, json.dumps(body).encode(), [('Content-Type', 'application/json')])
                elif url.path == '/received':
                    with lock:
                        body = json.dumps(received)
                    self.reply(200, body.encode(), [('Content-Type', 'application/json')])
                else:
                    self.reply(404)

            def do_POST(self):
                length = int(self.headers.get('Content-Length', '0'))
                body = self.rfile.read(length)
                if self.path == '/answers':
                    with lock:
                        for name, list_ in json.loads(body).items():
                            answers[name] = list(list_)
                    self.reply(204)
                    return
                if self.path.startswith('/gateway/'):
                    self.gateway(body)
                    return
                if self.path == '/secrets':
                    with lock:
                        secrets.update(json.loads(body))
                    self.reply(204)
                    return
                if self.path.startswith('/webhook/'):
                    self.webhook(body)
                    return
                if not self.path.startswith('/push/'):
                    self.reply(404)
                    return
                name = self.path[len('/push/'):]
                with lock:
                    subscriber = subscribers.get(name)
                    planned = answers.get(name) or ['201']
                    answer = planned.pop(0) if answers.get(name) else '201'
                status, _, retry_after = answer.partition(':')
                entry = {'name': name, 'status': 0 if status == 'hang' else int(status),
                         'headers': {k.lower(): v for k, v in self.headers.items()},
                         'payload': None,
                         'vapid': check_vapid(self.headers.get('Authorization', ''),
                                              'http://127.0.0.1:%d' % self.server.server_port)}
                try:
                    key, auth = subscriber
                    opened = http_ece.decrypt(body, private_key=key, auth_secret=auth, version='aes128gcm')
                    entry['payload'] = {k: v if isinstance(v, str) else
                                        json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(',', ':'))
                                        for k, v in json.loads(opened).items()}
                except Exception as error:
                    entry['error'] = repr(error)
                with lock:
                    received.append(entry)
                if status == 'hang':
                    # Never answers (the sender is killed meanwhile, or gives up at its deadline).
                    time.sleep(3600)
                    return
                self.reply(int(status), b'', [('Retry-After', retry_after)] if retry_after else [])

            def gateway(self, body):
                # /gateway/NAME/_matrix/push/v1/notify: a push gateway as Matrix's Push Gateway API says.
                name = self.path[len('/gateway/'):].split('/')[0]
                with lock:
                    answer = answers[name].pop(0) if answers.get(name) else '200'
                status, _, extra = answer.partition(':')
                entry = {'name': name, 'status': 0 if status == 'hang' else int(status), 'path': self.path,
                         'headers': {k.lower(): v for k, v in self.headers.items()}, 'payload': None,
                         'vapid': {'valid': False}}
                pushkeys = []
                try:
                    notification = json.loads(body)['notification']
                    devices = notification['devices']
                    assert isinstance(devices, list) and devices, 'devices'
                    for device in devices:
                        assert isinstance(device['app_id'], str) and isinstance(device['pushkey'], str), 'device'
                        pushkeys.append(device['pushkey'])
                    assert isinstance(notification['counts']['unread'], int), 'counts'
                    assert notification['prio'] in ('high', 'low'), 'prio'
                    entry['payload'] = {k: v if isinstance(v, str) else
                                        json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(',', ':'))
                                        for k, v in notification.items()}
                except Exception as error:
                    entry['error'] = repr(error)
                with lock:
                    received.append(entry)
                if status == 'hang':
                    time.sleep(3600)
                    return
                reply = json.dumps({'rejected': pushkeys if extra == 'rejected' else []}).encode()
                headers = [('Content-Type', 'application/json')]
                if extra and extra != 'rejected':
                    headers.append(('Retry-After', extra))
                self.reply(int(status), reply, headers)

            def webhook(self, body):
                # /webhook/NAME: a bot's webhook, its deliveries checked with PyPI's standardwebhooks (the spec's
                # reference library) under the secret the test registered for NAME, and checked again six minutes
                # later, which the library must refuse as a replay.
                import standardwebhooks
                import standardwebhooks.webhooks as library
                name = self.path[len('/webhook/'):].split('/')[0]
                with lock:
                    answer = answers[name].pop(0) if answers.get(name) else '200'
                    secret = secrets.get(name)
                status, _, extra = answer.partition(':')
                headers = {k.lower(): v for k, v in self.headers.items()}
                entry = {'name': name, 'status': 0 if status == 'hang' else int(status), 'headers': headers,
                         'payload': None, 'vapid': {'valid': False}, 'signature': False, 'replay_refused': False}
                try:
                    update = standardwebhooks.Webhook(secret).verify(body, headers)
                    entry['signature'] = True
                    entry['payload'] = {k: v if isinstance(v, str) else
                                        json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(',', ':'))
                                        for k, v in update.items()}
                    real = library.datetime

                    class Later(real):
                        @classmethod
                        def now(cls, tz=None):
                            return real.now(tz) + library.timedelta(minutes=6)

                    library.datetime = Later
                    try:
                        standardwebhooks.Webhook(secret).verify(body, headers)
                    except standardwebhooks.webhooks.WebhookVerificationError as error:
                        entry['replay_refused'] = 'too old' in str(error)
                    finally:
                        library.datetime = real
                except Exception as error:
                    entry['error'] = repr(error)
                with lock:
                    received.append(entry)
                if status == 'hang':
                    time.sleep(3600)
                    return
                self.reply(int(status), b'', [('Retry-After', extra)] if extra else [])

        server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        with open(port_file + '.tmp', 'w') as f:
            f.write(str(server.server_port))
        os.rename(port_file + '.tmp', port_file)
        deadline = time.time() + 3600
        while time.time() < deadline and os.getppid() == parent:
            time.sleep(0.5)
        """#
}
