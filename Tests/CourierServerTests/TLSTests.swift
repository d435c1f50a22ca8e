import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierStoreSQLite
import CourierTesting
import CourierWire
import Foundation
import NIOCore
import NIOSSL
import Testing

@Suite("TLS on all three ports", .serialized)
struct TLSTests {
    @Test("native, compat and HTTP speak TLS with the configured certificate; untrusting and plain clients are refused")
    func allPorts() async throws {
        try await withTemporaryDirectory(prefix: "courier-tls") { folder in
            let certificate = try await TestCertificate.make(in: folder)
            let trusting = certificate.trustingClient
            try await ServerFixture.with(
                { fixture in
                    try await fixture.user("alice")
                    try await fixture.user("bob")
                    // Native ⇄ compat, both over TLS.
                    let (alice, _) = try await NativeTestClient.login(fixture, "alice", tls: trusting)
                    let bob = try await CompatTestClient.connect(port: fixture.ports.compat, tls: trusting)
                    try await bob.write(try CompatTestClient.packet("auth", ["user": "bob", "password": "pw-bob"]))
                    _ = try await bob.expect("welcome")
                    #expect(try await alice.sendText("over TLS", to: .user("bob")).ack != nil)
                    #expect(String(buffer: try await bob.expect("txt").payload) == "over TLS")
                    try await bob.write(
                        try CompatTestClient.packet("txt", ["to": "alice", "id": "c1"], payload: Array("back".utf8))
                    )
                    #expect(CompatTests.string(try await bob.expect("ack"), "id") == "c1")
                    #expect(try await alice.messages(1).map(\.body.text) == ["back"])

                    // HTTP, through curl: trusted with --cacert; refused without it (60: the peer certificate
                    // cannot be authenticated); plain HTTP gets no HTTP answer.
                    let https = "https://127.0.0.1:\(fixture.ports.http)/health"
                    let health = try await HTTPTests.curl(["--cacert", certificate.certificateFile, https])
                    #expect(health.contains("\"status\":\"ok\""), "\(health)")
                    let untrusted = try await ExternalProgram.run(
                        "/usr/bin/curl",
                        ["--silent", "--max-time", "60", https]
                    )
                    #expect(untrusted.status == 60, "\(untrusted)")
                    let plainHTTP = try await ExternalProgram.run(
                        "/usr/bin/curl",
                        ["--silent", "--max-time", "60", "http://127.0.0.1:\(fixture.ports.http)/health"]
                    )
                    #expect(plainHTTP.status != 0 && !plainHTTP.output.contains("status"), "\(plainHTTP)")

                    // The WebSocket gateway on the same port: wss://, and a message from the native port through it.
                    let (web, _) = try await WebSocketTestClient.login(port: fixture.ports.http, "bob", tls: trusting)
                    #expect(try await alice.sendText("到 wss", to: .user("bob")).ack != nil)
                    #expect(try await web.messages(1).map(\.body.text) == ["到 wss"])
                    _ = try await bob.expect("txt")
                    await web.close()

                    // A native client that does not trust the certificate, and one that speaks plain TCP: neither
                    // gets a welcome, and the server closes the plain one.
                    await #expect(throws: (any Error).self) {
                        _ = try await NativeTestClient.login(fixture, "alice", tls: .makeClientConfiguration())
                    }
                    var preface = ByteBuffer()
                    NativeFraming.writePreface(into: &preface)
                    let plain = try await RawConnection.connect(port: fixture.ports.native)
                    try await plain.write(Array(preface.readableBytesView))
                    let answer = try await plain.readUntilClosed()
                    #expect(!answer.starts(with: Array(preface.readableBytesView)), "a plain client got an answer")
                    let compatPlain = try await RawConnection.connect(port: fixture.ports.compat)
                    try await compatPlain.write(
                        try CompatTestClient.packet("auth", ["user": "bob", "password": "pw-bob"])
                    )
                    #expect(
                        !String(decoding: try await compatPlain.readUntilClosed(), as: UTF8.self).contains("welcome")
                    )

                    // The refused peers harmed no one: the TLS sessions go on.
                    #expect(try await alice.sendText("still here", to: .user("bob")).ack != nil)
                    #expect(String(buffer: try await bob.expect("txt").payload) == "still here")
                    await alice.close()
                    await bob.close()
                },
                configure: { configuration in
                    configuration.tls = try? ServerConfiguration.tls(
                        certificateChainFile: certificate.certificateFile,
                        privateKeyFile: certificate.keyFile
                    )
                    #expect(configuration.tls != nil)
                }
            )
        }
    }

    @Test("certificate and key files that cannot be used are named in the error")
    func unusableFiles() async throws {
        try await withTemporaryDirectory(prefix: "courier-tls") { folder in
            let certificate = try await TestCertificate.make(in: folder)
            let other = try await TestCertificate.make(in: folder, name: "other")
            let missing = folder.appendingPathComponent("missing.pem").path
            #expect {
                _ = try ServerConfiguration.tls(certificateChainFile: missing, privateKeyFile: certificate.keyFile)
            } throws: { error in
                "\(error)".contains(missing) && "\(error)".contains("certificate chain")
            }
            #expect {
                _ = try ServerConfiguration.tls(
                    certificateChainFile: certificate.certificateFile,
                    privateKeyFile: certificate.certificateFile
                )
            } throws: { error in
                "\(error)".contains(certificate.certificateFile) && "\(error)".contains("private key")
            }
            // A key that does not belong to the certificate: the server refuses to start.
            var configuration = ServerConfiguration()
            configuration.dataFolder = folder.appendingPathComponent("data")
            configuration.tls = try ServerConfiguration.tls(
                certificateChainFile: certificate.certificateFile,
                privateKeyFile: other.keyFile
            )
            #expect(throws: NIOSSLError.self) {
                _ = try CourierServer(configuration: configuration, logger: .init(label: "test")) {
                    try SQLiteStore(
                        folder: $0,
                        configuration: .init(serving: configuration.store),
                        logger: .init(label: "test")
                    )
                }
            }
        }
    }
}
