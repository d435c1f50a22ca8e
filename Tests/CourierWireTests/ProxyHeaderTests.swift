import CourierWire
import NIOCore
import Testing

@Suite("The PROXY protocol's version 1 header, as a trusted proxy (nginx's stream module) sends it")
struct ProxyHeaderTests {
    static func feed(_ chunks: [String]) -> ProxyHeader.Outcome {
        var reader = ProxyHeader.Reader()
        var outcome = ProxyHeader.Outcome.incomplete
        for chunk in chunks {
            outcome = reader.feed(ByteBuffer(string: chunk))
            if case .incomplete = outcome { continue }
            return outcome
        }
        return outcome
    }

    static func source(_ outcome: ProxyHeader.Outcome) -> (ip: String, port: Int)?? {
        if case .header(let header, _) = outcome { return header.source }
        return nil
    }

    @Test("TCP4 and TCP6 name the client; UNKNOWN names none; the bytes after the header are the client's own")
    func valid() {
        let four = Self.feed(["PROXY TCP4 203.0.113.7 192.0.2.1 51234 6970\r\n\u{1}\u{2}"])
        guard case .header(let header, let rest) = four else {
            Issue.record("\(four)")
            return
        }
        #expect(header.source?.ip == "203.0.113.7" && header.source?.port == 51234)
        #expect(Array(rest.readableBytesView) == [1, 2])
        let six = Self.source(Self.feed(["PROXY TCP6 2001:db8::7 2001:db8::1 443 6970\r\n"]))
        #expect(six??.ip == "2001:db8::7" && six??.port == 443)
        // One spelling for one address, as the per-address limits count it.
        let shouted = Self.source(Self.feed(["PROXY TCP6 2001:DB8:0:0::7 2001:db8::1 443 6970\r\n"]))
        #expect(shouted??.ip == "2001:db8::7")
        let unknown = Self.feed(["PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n"])
        #expect(unknown == .header(ProxyHeader(source: nil), rest: ByteBuffer()))
        #expect(Self.feed(["PROXY UNKNOWN\r\n"]) == .header(ProxyHeader(source: nil), rest: ByteBuffer()))
    }

    @Test("split anywhere, one byte at a time: whole only at its CRLF")
    func split() {
        let line = "PROXY TCP4 198.51.100.22 10.0.0.1 65535 6969\r\nhello"
        var reader = ProxyHeader.Reader()
        var outcomes: [ProxyHeader.Outcome] = []
        for byte in line.utf8 {
            var buffer = ByteBuffer()
            buffer.writeInteger(byte)
            outcomes.append(reader.feed(buffer))
            if case .header = outcomes.last! { break }
        }
        #expect(outcomes.dropLast().allSatisfy { $0 == .incomplete })
        #expect(outcomes.count == line.utf8.count - "hello".utf8.count)
        #expect(Self.source(outcomes.last!)??.ip == "198.51.100.22")
    }

    @Test(
        "anything else is refused: a client's own bytes, version 2, no CRLF within 107 bytes, bad addresses and ports, wrong fields"
    )
    func invalid() {
        let refused = [
            "\u{0}\u{0}\u{0}\u{10}",  // a native frame's length
            "{\"type\":\"auth\"}\r\n",  // a compat header
            "\r\n\r\n\u{0}\r\nQUIT\n",  // version 2's signature
            "PROXY TCP4 203.0.113.7 192.0.2.1 51234 6970\n",  // LF alone
            "PROXY TCP4 " + String(repeating: "1", count: 100),  // no end within the bound
            "PROXY TCP4 203.0.113.7 192.0.2.1 51234 6970 extra\r\n",
            "PROXY TCP4 2001:db8::7 192.0.2.1 51234 6970\r\n",  // an IPv6 address said to be TCP4
            "PROXY TCP6 203.0.113.7 2001:db8::1 51234 6970\r\n",
            "PROXY TCP4 203.0.113.256 192.0.2.1 51234 6970\r\n",
            "PROXY TCP4 203.0.113.7 192.0.2.1 65536 6970\r\n",
            "PROXY TCP4 203.0.113.7 192.0.2.1 0443 6970\r\n",  // a leading zero
            "PROXY TCP4 203.0.113.7 192.0.2.1 +443 6970\r\n",
            "PROXY TCP4  203.0.113.7 192.0.2.1 443 6970\r\n",  // two spaces
            "PROXY UDP4 203.0.113.7 192.0.2.1 443 6970\r\n",
            "PROXY TCP4 ２０３.0.113.7 192.0.2.1 443 6970\r\n",  // full-width digits
            "proxy TCP4 203.0.113.7 192.0.2.1 443 6970\r\n",
            "PROXY TCP4 203.0.113.7\u{0}x 192.0.2.1 443 6970\r\n",
        ]
        for text in refused {
            let outcome = Self.feed([text])
            guard case .invalid = outcome else {
                Issue.record("\(text.debugDescription) gave \(outcome)")
                continue
            }
        }
        // 107 bytes is the bound, CRLF included: a longer line is refused even when it ends.
        let long = "PROXY UNKNOWN " + String(repeating: "x", count: 107 - 16) + "\r\n"
        #expect(long.utf8.count == 107)
        #expect(Self.feed([long]) == .header(ProxyHeader(source: nil), rest: ByteBuffer()))
        guard case .invalid = Self.feed(["PROXY UNKNOWN x" + long.dropFirst(14)]) else {
            Issue.record("108 bytes taken")
            return
        }
    }
}
