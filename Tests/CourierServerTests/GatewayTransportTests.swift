import CourierProtocol
import CourierWire
import Foundation
import NIOCore
import SwiftProtobuf
import Testing

@testable import CourierServer

/// The gateway's JSON transport without a socket: every envelope kind both ways, the documented examples, and
/// what it refuses.
@Suite("The WebSocket gateway's JSON")
struct GatewayTransportTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The JSON names of a message's `oneof body` members, read from the .proto (so that a kind added there is
    /// tested here without a word more).
    static func bodyMembers(of message: String) throws -> [String] {
        let proto = try String(
            contentsOf: Self.root.appendingPathComponent("Protos/courier/v1/courier.proto"),
            encoding: .utf8
        )
        let start = try #require(proto.range(of: "message \(message) {"))
        let oneof = try #require(proto.range(of: "oneof body {", range: start.upperBound..<proto.endIndex))
        let end = try #require(proto.range(of: "}", range: oneof.upperBound..<proto.endIndex))
        return proto[oneof.upperBound..<end.lowerBound].split(separator: "\n").compactMap { line in
            let words = line.split(separator: " ")
            guard words.count >= 4, words[2] == "=" else { return nil }
            // snake_case to protobuf's JSON name (lowerCamelCase).
            let parts = words[1].split(separator: "_")
            return ([String(parts[0])] + parts.dropFirst().map { $0.prefix(1).uppercased() + $0.dropFirst() })
                .joined()
        }
    }

    static let transport = WebSocketTransport(maxFramePayloadBytes: 1 << 20, maxMessageBytes: 1 << 20)

    @Test("every client envelope kind in JSON becomes that request, with its id")
    func everyClientKind() throws {
        let members = try Self.bodyMembers(of: "ClientEnvelope")
        #expect(members.count >= 25 && members.contains("hello") && members.contains("setNotify"))
        for (index, member) in members.enumerated() {
            let json = #"{"requestId":"\#(index + 1)","\#(member)":{}}"#
            guard case .envelope(let envelope) = Self.transport.interpret(.text(json)) else {
                Issue.record("\(member) was not taken")
                continue
            }
            #expect(envelope.requestID == UInt64(index + 1))
            #expect(envelope.body != nil, "\(member)")
            // Written back, it is the same kind.
            #expect(try envelope.jsonString().contains("\"\(member)\""), "\(member)")
        }
    }

    @Test("every server envelope kind goes out as JSON that reads back the same")
    func everyServerKind() throws {
        let members = try Self.bodyMembers(of: "ServerEnvelope")
        #expect(members.count >= 18 && members.contains("welcome") && members.contains("groupMembers"))
        for member in members {
            let envelope = try ServerEnvelope(jsonString: #"{"requestId":"9","\#(member)":{}}"#)
            let outputs = try Self.transport.frames(for: envelope)
            guard outputs.count == 1, case .frame(.text(let bytes)) = outputs[0] else {
                Issue.record("\(member): \(outputs.count) outputs")
                continue
            }
            let text = String(buffer: bytes)
            #expect(text.contains("\"\(member)\"") && text.contains("\"requestId\":\"9\""), "\(text)")
            #expect(try ServerEnvelope(jsonString: text) == envelope)
        }
    }

    @Test("text in every script, and markup, go through as the characters they are")
    func scripts() throws {
        let texts = [
            "你好，世界", "こんにちは、カタカナ", "مرحبا بالعالم", "שלום", "👨‍👩‍👧‍👦 🇨🇳", "<img src=x onerror=alert(1)>",
            "\"quotes\" \\ back\nslash\ttab \u{0}nul",
        ]
        for text in texts {
            var send = ClientEnvelope()
            send.requestID = 3
            send.send.to.user = "bob"
            send.send.body.text = text
            guard case .envelope(let envelope) = Self.transport.interpret(.text(try send.jsonString())) else {
                Issue.record("\(text) was not taken")
                continue
            }
            #expect(envelope.send.body.text == text)
        }
    }

    @Test("what the transport refuses: not JSON, not an object, a binary message that is not one stream frame")
    func refusals() throws {
        let inputs: [WebSocketMessage] = [
            .text("{"), .text("[]"), .text("\"hello\""), .text(#"{"requestId":"x"}"#), .text(#"{"send":5}"#),
            .binary(ByteBuffer(bytes: [0, 0])),
            .binary(NativeFrame.ping(1).bytes),
            .binary(
                ByteBuffer(
                    bytes: Array(NativeFrame.windowUpdate(streamID: 1, increment: 5).bytes.readableBytesView) + [0]
                )
            ),
        ]
        for input in inputs {
            guard case .violation(let code, _) = Self.transport.interpret(input) else {
                Issue.record("\(input) was taken")
                continue
            }
            #expect(code == ErrorCodes.envelopeInvalid)
        }
        // Stream frames are taken; `{}` is the keep-alive; a close is a goodbye.
        let window = Self.transport.interpret(.binary(NativeFrame.windowUpdate(streamID: 3, increment: 500).bytes))
        guard case .streamWindow(3, 500) = window else {
            Issue.record("\(window)")
            return
        }
        guard case .reply(let answer) = Self.transport.interpret(.text("{}")) else {
            Issue.record("no keep-alive answer")
            return
        }
        #expect(answer == [.text("{}")])
        guard case .goodbye = Self.transport.interpret(.close(code: 1000, reason: "")) else {
            Issue.record("a close is not a goodbye")
            return
        }
    }

    @Test("the examples in docs/PROTOCOL.md read as the envelopes they say")
    func documentExamples() throws {
        let document = try String(contentsOf: Self.root.appendingPathComponent("docs/PROTOCOL.md"), encoding: .utf8)
        func example(_ name: String) throws -> String {
            let marker = "<!-- example: \(name) -->"
            let start = try #require(document.range(of: marker), "no example \(name) in PROTOCOL.md")
            let open = try #require(document.range(of: "```json\n", range: start.upperBound..<document.endIndex))
            let close = try #require(document.range(of: "```", range: open.upperBound..<document.endIndex))
            return String(document[open.upperBound..<close.lowerBound])
        }
        let hello = try ClientEnvelope(jsonString: try example("ws-hello"))
        #expect(hello.requestID == 1 && hello.hello.password.user == "alice" && hello.hello.deviceName == "Firefox")
        let welcome = try ServerEnvelope(jsonString: try example("ws-welcome"))
        #expect(welcome.requestID == 1 && welcome.welcome.user == "alice" && welcome.welcome.cursor == 0)
        let send = try ClientEnvelope(jsonString: try example("ws-send"))
        #expect(send.send.to.group == "bookclub" && send.send.body.text == "明天见 👋" && send.send.id == "c-7f3a")
        let ack = try ServerEnvelope(jsonString: try example("ws-ack"))
        #expect(ack.sendAck.seq == 42 && ack.sendAck.id == "c-7f3a" && ack.sendAck.timeMs == 1_764_241_200_000)
        let events = try ServerEnvelope(jsonString: try example("ws-events"))
        let message = try #require(events.events.events.first?.message)
        #expect(message.from == "bob" && message.body.text == "好的" && events.events.events.first?.cursor == 57)
        let error = try ServerEnvelope(jsonString: try example("ws-error"))
        #expect(error.error.code == ErrorCodes.envelopeInvalid)
    }

    @Test("origins: the server's own by address and scheme, configured ones by name; never another's, nor a name")
    func origins() {
        func check(_ origin: String?, host: String?, secure: Bool = false, allowed: [String] = []) -> Bool {
            WebSocketOrigins.check(origin: origin, host: host, secure: secure, allowed: allowed) == .allowed
        }
        // Not a browser: not asked.
        #expect(check(nil, host: "anything"))
        // The server's own, by address (IPv4, IPv6, localhost), its default port left off or not.
        #expect(check("http://127.0.0.1:6980", host: "127.0.0.1:6980"))
        #expect(check("http://[::1]:6980", host: "[::1]:6980"))
        #expect(check("http://localhost:6980", host: "localhost:6980"))
        #expect(check("https://10.0.0.5", host: "10.0.0.5:443", secure: true))
        #expect(check("HTTP://127.0.0.1:6980/", host: "127.0.0.1:6980"))
        // Another port, another scheme than the port's, another host, null, garbage.
        #expect(!check("http://127.0.0.1:6981", host: "127.0.0.1:6980"))
        #expect(!check("http://127.0.0.1", host: "127.0.0.1", secure: true))
        #expect(!check("https://127.0.0.1", host: "127.0.0.1"))
        #expect(!check("http://127.0.0.2:6980", host: "127.0.0.1:6980"))
        #expect(!check("null", host: "127.0.0.1:6980"))
        #expect(!check("http://127.0.0.1:6980.evil.example", host: "127.0.0.1:6980"))
        #expect(!check("http://127.0.0.1:6980", host: nil))
        // A name is the server's own only when configured: a page whose name was pointed at this address (DNS
        // rebinding) has its Host and Origin agree.
        #expect(!check("http://rebound.evil.example:6980", host: "rebound.evil.example:6980"))
        #expect(!check("https://chat.example.com", host: "chat.example.com", secure: true))
        #expect(
            check(
                "https://chat.example.com",
                host: "chat.example.com",
                secure: true,
                allowed: ["https://chat.example.com"]
            )
        )
        #expect(check("https://Chat.Example.com", host: "x", allowed: ["https://chat.example.com:443/"]))
        #expect(!check("http://chat.example.com", host: "x", allowed: ["https://chat.example.com"]))
        #expect(
            !WebSocketOrigins.isAddress("256.1.1.1") && !WebSocketOrigins.isAddress("1.2.3")
                && WebSocketOrigins.isAddress("1.2.3.4")
        )
    }
}
