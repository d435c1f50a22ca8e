import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStore
import CourierTesting
import CourierWire
import Foundation
import Testing

@Suite("Behind a trusted proxy: its PROXY headers and X-Forwarded-For name the clients each per-address limit counts")
struct TrustedProxyTests {
    static func header(_ client: String, port: Int = 40_000) -> [UInt8] {
        Array("PROXY TCP4 \(client) 127.0.0.1 \(port) 6970\r\n".utf8)
    }

    @Test(
        "native and compat: each client the header names has its own share; a header from anyone else, none from the proxy, or a silent proxy connection is closed"
    )
    func proxyProtocol() async throws {
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let port = fixture.ports.native
                // 203.0.113.7 takes its one connection not logged in.
                let waiting = try await NativeTestClient.connect(
                    port: port,
                    from: "127.0.0.2",
                    first: Self.header("203.0.113.7")
                )
                try await waitUntil("it is admitted") {
                    try await fixture.metric("courier_connections_open") == 1
                }
                // Another from 203.0.113.7 through the proxy is refused: it counts as that client, not the proxy.
                let second = try await RawConnection.connect(port: port, from: "127.0.0.2")
                try await second.write(Self.header("203.0.113.7", port: 40_001))
                let refused = String(decoding: try await second.readUntilClosed(), as: UTF8.self)
                #expect(refused.contains(ErrorCodes.serverFull), "\(refused)")
                // Another client through the same proxy logs in.
                let other = try await NativeTestClient.connect(
                    port: port,
                    from: "127.0.0.2",
                    first: Self.header("203.0.113.8")
                )
                let welcome = try await other.logIn("alice", device: "代理 🛰")
                #expect(!welcome.token.isEmpty)
                // The compat port reads the header too.
                let compat = try await RawConnection.connect(port: fixture.ports.compat, from: "127.0.0.2")
                try await compat.write(
                    Self.header("198.51.100.9")
                        + (try CompatTestClient.packet("auth", ["user": "bob", "password": "pw-bob"]))
                )
                _ = try await compat.read(atLeast: 1)
                try await waitUntil("the compat login is answered") {
                    String(decoding: compat.bytes, as: UTF8.self).contains("welcome")
                }

                // From anyone else, a PROXY header is a client's own bytes: not a frame, and closed.
                let stranger = try await RawConnection.connect(port: port, from: "127.0.0.3")
                try await stranger.write(Self.header("203.0.113.9"))
                _ = try await stranger.readUntilClosed()
                // A client not behind the proxy needs no header.
                let (direct, _) = try await NativeTestClient.login(port: port, "bob")
                // A client whose first bytes after the header are not a native preface: the port's handlers close
                // it as they start, and its place is given back (the open count goes back to what it was).
                let before = try await fixture.metric("courier_connections_open")
                for attempt in 0..<3 {
                    let garbled = try await RawConnection.connect(port: port, from: "127.0.0.2")
                    try await garbled.write(
                        Self.header("198.51.100.\(40 + attempt)") + Array("GET / HTTP/1.1\r\n\r\n".utf8)
                    )
                    _ = try await garbled.readUntilClosed()
                }
                try await waitUntil("the garbled connections' places are given back") {
                    try await fixture.metric("courier_connections_open") == before
                }
                // The proxy's connection without a header, or with version 2's: closed, nothing said.
                for first in [[0, 0, 0, 8, 1, 2, 3, 4], Array("\r\n\r\n\u{0}\r\nQUIT\n".utf8)] as [[UInt8]] {
                    let bare = try await RawConnection.connect(port: port, from: "127.0.0.2")
                    try await bare.write(first)
                    #expect(try await bare.readUntilClosed().isEmpty)
                }
                for client in [waiting, other, direct] { await client.close() }
                await compat.close()
            },
            configure: { configuration in
                configuration.trustedProxies = try! TrustedProxies(["127.0.0.2"])
                configuration.limits.maxUnauthenticatedPerAddress = 1
            }
        )
        // A proxy's connection silent past the login deadline: closed, its header never having come. (A server of
        // its own, with a short deadline: the logins above must not race one on a busy machine.)
        try await ServerFixture.with(
            { fixture in
                let silent = try await RawConnection.connect(port: fixture.ports.native, from: "127.0.0.2")
                #expect(try await silent.readUntilClosed().isEmpty)
                #expect(!silent.channel.isActive)
            },
            configure: { configuration in
                configuration.trustedProxies = try! TrustedProxies(["127.0.0.2"])
                configuration.limits.authTimeout = .milliseconds(500)
            }
        )
    }

    @Test(
        "HTTP and /ws: X-Forwarded-For's last address that is not a proxy is the client, for the API's address rate and the session's share; from anyone else it is ignored"
    )
    func forwardedFor() async throws {
        @Sendable func me(_ port: Int, _ token: String, from forwarded: String) async throws -> Int {
            try await BotAPITests.call(
                port,
                "GET",
                "/api/v1/me",
                token: token,
                headers: ["X-Forwarded-For: \(forwarded)"]
            ).status
        }
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let token = try await fixture.store.addBot(name: "helper", owner: "alice", nowMs: WebhookTests.now())
                let port = fixture.ports.http
                var statuses: [Int] = []
                for forwarded in ["198.51.100.1", "198.51.100.1", "198.51.100.1", "6.6.6.6, 198.51.100.1"] {
                    statuses.append(try await me(port, token, from: forwarded))
                }
                // The address said on the left is the client's word: the proxy's own (the last) counts.
                #expect(statuses == [200, 200, 429, 429], "\(statuses)")
                #expect(try await me(port, token, from: "198.51.100.2") == 200)
                #expect(try await me(port, token, from: "198.51.100.1, 127.0.0.1") == 429, "a proxy's hop is skipped")

                // The proxy holds connections for many clients: no share of its own on the HTTP port.
                let held = try await RawConnection.connect(port: port)
                #expect(try await me(port, token, from: "198.51.100.3") == 200)
                await held.close()

                // /ws: the session's share is the client's.
                let first = try await WebSocketTestClient.connect(
                    port: port,
                    headers: [("X-Forwarded-For", "198.51.100.1")]
                )
                try await waitUntil("it is admitted") {
                    try await fixture.metric("courier_connections_open") == 1
                }
                let again = try await WebSocketTestClient.connect(
                    port: port,
                    headers: [("X-Forwarded-For", "198.51.100.1")]
                )
                // Refused as it opens: closed, and never counted in. (Its error envelope is not looked for: when the
                // server's close comes before NIO's client upgrade has put the WebSocket handlers in, it is lost.)
                _ = try await again.expectClose()
                #expect(try await fixture.metric("courier_connections_total") == 1)
                let other = try await WebSocketTestClient.connect(
                    port: port,
                    headers: [("X-Forwarded-For", "10.9.9.9, 198.51.100.2")]
                )
                #expect(!(try await other.logIn("alice", device: "浏览器")).token.isEmpty)
                #expect(try await fixture.metric("courier_connections_total") == 2)
                await first.close()
                await other.close()
            },
            configure: { configuration in
                configuration.trustedProxies = try! TrustedProxies(["127.0.0.1"])
                configuration.api.requestsPerSecondPerAddress = 0.01
                configuration.api.requestBurstPerAddress = 2
                configuration.http.maxConnectionsPerAddress = 1
                configuration.limits.maxUnauthenticatedPerAddress = 1
            }
        )
        // Not a trusted proxy: the header is the client's word, and ignored.
        try await ServerFixture.with(
            { fixture in
                try await fixture.user("alice")
                let token = try await fixture.store.addBot(name: "helper", owner: "alice", nowMs: WebhookTests.now())
                var statuses: [Int] = []
                for forwarded in ["198.51.100.1", "198.51.100.2", "198.51.100.3"] {
                    statuses.append(try await me(fixture.ports.http, token, from: forwarded))
                }
                #expect(statuses == [200, 200, 429], "\(statuses)")
            },
            configure: { configuration in
                configuration.trustedProxies = try! TrustedProxies(["10.0.0.1"])
                configuration.api.requestsPerSecondPerAddress = 0.01
                configuration.api.requestBurstPerAddress = 2
            }
        )
    }

    @Test("trusted networks: IPv4 and IPv6 prefixes, IPv4-mapped addresses; a bad one is named")
    func networks() throws {
        let proxies = try TrustedProxies(["10.0.0.0/8", "192.0.2.1", "2001:db8::/32", "::1"])
        for ip in ["10.1.2.3", "10.255.255.255", "192.0.2.1", "::ffff:10.0.0.1", "2001:db8:ffff::1", "::1"] {
            #expect(proxies.contains(ip: ip), "\(ip)")
        }
        for ip in ["11.0.0.1", "192.0.2.2", "2001:db9::1", "::2", "not an address", ""] {
            #expect(!proxies.contains(ip: ip), "\(ip)")
        }
        #expect(try TrustedProxies(["0.0.0.0/0"]).contains(ip: "203.0.113.1"))
        #expect(try !TrustedProxies(["0.0.0.0/0"]).contains(ip: "2001:db8::1"))
        #expect(proxies.client(forwardedFor: ["203.0.113.5, 10.0.0.7"]) == "203.0.113.5")
        #expect(proxies.client(forwardedFor: ["1.1.1.1", "203.0.113.5"]) == "203.0.113.5")
        #expect(proxies.client(forwardedFor: ["10.0.0.1"]) == nil)
        #expect(proxies.client(forwardedFor: ["unknown, 10.0.0.1"]) == nil)
        #expect(proxies.client(forwardedFor: []) == nil)
        #expect(proxies.client(forwardedFor: ["2001:DB8:0:0::5"]) == nil, "2001:db8::/32 is a proxy's")
        #expect(proxies.client(forwardedFor: ["2001:DB9:0:0::5"]) == "2001:db9::5")
        #expect(proxies.client(forwardedFor: ["203.0.113.5\u{0}junk"]) == nil)
        for bad in ["10.0.0.0/33", "example.com", "10.0.0.0/", "::/129", "10.0.0.0/-1", "１０.0.0.1"] {
            #expect(throws: TrustedProxies.Invalid.self, "\(bad)") { try TrustedProxies([bad]) }
        }
    }
}
