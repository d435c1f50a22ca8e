import Logging
import Testing

@testable import CourierServer

@Suite("Push targets: only public addresses, checked after resolving, whatever the spelling")
struct PushTargetTests {
    @Test(
        "addresses: loopback, private, shared, link-local, metadata, multicast, documentation and embedded forms refused",
        arguments: [
            ("127.0.0.1", false), ("10.1.2.3", false), ("169.254.169.254", false), ("100.64.0.1", false),
            ("100.128.0.1", true), ("172.16.0.1", false), ("172.31.255.255", false), ("172.32.0.1", true),
            ("192.168.1.1", false), ("192.0.2.1", false), ("198.18.0.1", false), ("224.0.0.1", false),
            ("255.255.255.255", false), ("0.0.0.0", false), ("8.8.8.8", true), ("::1", false), ("::", false),
            ("::ffff:127.0.0.1", false), ("::ffff:8.8.8.8", true), ("fe80::1", false), ("fc00::1", false),
            ("fd12:3456::1", false), ("ff02::1", false), ("2001:db8::1", false), ("2001::1", false),
            ("64:ff9b::7f00:1", false), ("64:ff9b::808:808", true), ("2002:7f00:1::", false),
            ("2002:808:808::", true), ("2606:4700::1111", true), ("not an address", false),
        ]
    )
    func addresses(address: String, allowed: Bool) {
        #expect(TargetAddress.isPublic(address) == allowed, "\(address)")
    }

    @Test(
        "URLs that reach this machine are refused before any connection, in any spelling; plain http too",
        arguments: [
            "https://127.0.0.1/push", "https://localhost/push", "https://LOCALHOST/push", "https://LocalHost./push",
            "https://2130706433/push", "https://0x7f.1/push", "https://[::1]/push", "https://[::ffff:127.0.0.1]/push",
            "https://169.254.169.254/latest/meta-data", "http://example.com/push", "ftp://example.com/push",
            "https:///push",
        ]
    )
    func refused(url: String) async throws {
        let http = OutboundHTTP(limits: OutboundHTTP.Limits(), logger: Logger(label: "test"))
        await #expect(throws: OutboundHTTP.Refusal.self) { _ = try await http.client(for: url) }
        await http.shutdown()
    }
}
