import CourierPostgresTesting
import CourierServer
import CourierServerTesting
import CourierTesting
import Foundation
import Testing

@Suite("Web Push: the server's VAPID public key, kept with the data and the same on every node")
struct PushKeyTests {
    /// `GET /api/v1/push/vapid-public-key` with curl: the key, after checking the answer's type and shape.
    static func publicKey(port: Int) async throws -> String {
        let output = try await ExternalProgram.output(
            "/usr/bin/curl",
            [
                "--silent", "--show-error", "--fail", "--max-time", "60", "--write-out", "\n%{content_type}",
                "http://127.0.0.1:\(port)/api/v1/push/vapid-public-key",
            ]
        )
        let lines = output.split(separator: "\n")
        #expect(lines.last == "application/json")
        let object = try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: String]
        let key = try #require(object?["key"])
        #expect(object?.count == 1)
        return key
    }

    /// Whether a base64url key is an uncompressed P-256 point, by PyPI's cryptography.
    static func isP256Point(_ key: String) async throws -> Bool {
        let script = """
            import base64, sys
            from cryptography.hazmat.primitives.asymmetric import ec
            raw = base64.urlsafe_b64decode(sys.argv[1] + '=' * (-len(sys.argv[1]) % 4))
            ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw)
            print(len(raw))
            """
        let result = try await ExternalProgram.run("/usr/bin/env", ["python3", "-c", script, key])
        return result.status == 0 && result.output.trimmingCharacters(in: .whitespacesAndNewlines) == "65"
    }

    @Test("one server: a P-256 point, made on the first start and the same after a restart on the same data")
    func keptAcrossRestarts() async throws {
        let folder = try TemporaryDirectory(prefix: "push-key")
        defer { folder.remove() }
        let first = try await ServerFixture.with(folder: folder.url) { server in
            try await Self.publicKey(port: server.ports.http)
        }
        #expect(try await Self.isP256Point(first))
        let second = try await ServerFixture.with(folder: folder.url) { server in
            try await Self.publicKey(port: server.ports.http)
        }
        #expect(second == first)
        let elsewhere = try await ServerFixture.with { server in try await Self.publicKey(port: server.ports.http) }
        #expect(elsewhere != first, "another server's data, another key")
    }

    @Test(
        "two nodes on one PostgreSQL database give the same key",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func sameOnEveryNode() async throws {
        try await ClusterFixture.with(nodes: 2) { cluster in
            let keys = try await [
                Self.publicKey(port: cluster.nodes[0].ports.http), Self.publicKey(port: cluster.nodes[1].ports.http),
            ]
            #expect(keys[0] == keys[1])
            #expect(try await Self.isP256Point(keys[0]))
        }
    }
}
