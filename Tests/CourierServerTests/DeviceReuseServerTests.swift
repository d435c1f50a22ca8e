import CourierProtocol
import CourierServerTesting
import CourierStore
import CourierTesting
import Testing

/// Round three: every password login made a device, so a client of the notes' kind (which keeps no token) that
/// logged in a hundred times in a month was locked out by the cap.
@Suite(
    "Password logins on the compat port take their device over again; the cap never locks a password out",
    .serialized
)
struct DeviceReuseServerTests {
    static func auth(_ port: Int, _ fields: [(String, String)]) async throws -> CompatTestClient {
        let client = try await CompatTestClient.connect(port: port)
        try await client.write(
            CompatTestClient.notesPacket([("type", "auth"), ("user", "carol"), ("password", "pw-carol")] + fields)
        )
        _ = try await client.expect("welcome")
        return client
    }

    @Test("logins without a device id reuse the oldest idle compat device; with one, that client's own")
    func compatLogins() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("carol")
            let port = fixture.ports.compat
            for _ in 0..<6 {
                let client = try await Self.auth(port, [])
                await client.close()
                // Closed before the next: the device is idle again once the server has seen the close.
                try await waitUntil("carol's device idle") {
                    try await fixture.store.devices(of: "carol").allSatisfy { $0.connectedSinceMs == nil }
                }
            }
            #expect(try await fixture.store.devices(of: "carol").map(\.name) == ["compat"])
            // Two at once: the second cannot take the first's device (it is connected), so it makes one.
            let first = try await Self.auth(port, [])
            let second = try await Self.auth(port, [])
            #expect(try await fixture.store.devices(of: "carol").map(\.name) == ["compat", "compat"])
            await first.close()
            await second.close()
            // A client that names itself gets its own device, every time.
            for _ in 0..<3 {
                let named = try await Self.auth(port, [("device", "pager-7")])
                await named.close()
            }
            let names = try await fixture.store.devices(of: "carol").map(\.name)
            #expect(names.filter { $0 == "compat/pager-7" }.count == 1, "\(names)")
            #expect(names.count == 3, "\(names)")
        }
    }

    @Test("past max-devices-per-user a password login still gets in, logging out the device used longest ago")
    func capNeverLocksOut() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("carol")
            var tokens: [String] = []
            for index in 0..<3 {
                let (client, welcome) = try await NativeTestClient.login(fixture, "carol", device: "d\(index)")
                tokens.append(welcome.token)
                await client.close()
            }
            let (fourth, _) = try await NativeTestClient.login(fixture, "carol", device: "d3")
            let usable = try await fixture.store.devices(of: "carol").filter { $0.revokedMs == nil }.map(\.name)
            #expect(usable == ["d1", "d2", "d3"], "\(usable)")
            // The first device's token is logged out.
            let refused = try await NativeTestClient.connect(port: fixture.ports.native)
            var hello = ClientEnvelope()
            hello.hello.token = tokens[0]
            _ = try await refused.send(hello)
            let answer = try await refused.expect("the refusal") { $0.failure }
            #expect(answer.code == ErrorCodes.tokenRevoked, "\(answer)")
            await refused.close()
            await fourth.close()
        } configure: {
            $0.store.limits.maxDevicesPerUser = 3
        }
    }
}
