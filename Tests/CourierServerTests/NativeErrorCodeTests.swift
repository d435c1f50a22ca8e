import CourierProtocol
import CourierServerTesting
import CourierTesting
import CourierWire
import NIOCore
import Testing

/// What the native port sends before it closes a connection whose bytes break the framing, byte for byte as
/// docs/PROTOCOL.md says ("Preface", "Errors").
@Suite("Native port: the closing frames of each framing error", .serialized)
struct NativeErrorCodeTests {
    static let preface: [UInt8] = [0x89, 0x43, 0x52, 0x57, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x01]

    /// The frames after the server's preface: (kind, payload).
    static func frames(_ bytes: [UInt8]) throws -> [(kind: UInt8, payload: [UInt8])] {
        #expect(Array(bytes.prefix(10)) == Self.preface, "the server's preface comes first")
        var frames: [(UInt8, [UInt8])] = []
        var rest = bytes.dropFirst(10)
        while !rest.isEmpty {
            let header = Array(rest.prefix(10))
            try #require(header.count == 10, "a cut frame header: \(header)")
            let length = header[0..<4].reduce(0) { $0 << 8 | Int($1) }
            let payload = Array(rest.dropFirst(10).prefix(length))
            try #require(payload.count == length)
            frames.append((header[4], payload))
            rest = rest.dropFirst(10 + length)
        }
        return frames
    }

    /// The error code in a goaway's payload.
    static func goawayCode(_ payload: [UInt8]) -> UInt32 {
        payload[4..<8].reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// Writes bytes to the native port and returns the frames the server sent before closing.
    static func closing(after bytes: [UInt8]) async throws -> [(kind: UInt8, payload: [UInt8])] {
        try await ServerFixture.with { fixture in
            let connection = try await RawConnection.connect(port: fixture.ports.native)
            try await connection.write(bytes)
            return try Self.frames(try await connection.readUntilClosed())
        }
    }

    @Test("an HTTP request where the preface belongs: nothing after the server's own preface")
    func http() async throws {
        let frames = try await Self.closing(after: Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        #expect(frames.isEmpty, "\(frames)")
    }

    @Test("a preface of version 2: a goaway with unsupportedVersion (2) alone")
    func version() async throws {
        let frames = try await Self.closing(after: Array(Self.preface.prefix(8)) + [0x00, 0x02])
        #expect(frames.map(\.kind) == [0x08])
        #expect(frames.first.map { Self.goawayCode($0.payload) } == NativeErrorCode.unsupportedVersion.rawValue)
    }

    @Test("a frame over the limit: framing-error, then a goaway with frameTooLarge (3)")
    func frameTooLarge() async throws {
        let header: [UInt8] = [0x00, 0x20, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00]
        let frames = try await Self.closing(after: Self.preface + header)
        #expect(frames.map(\.kind) == [0x01, 0x08])
        let envelope = try ServerEnvelope(serializedBytes: frames[0].payload)
        #expect(envelope.error.code == ErrorCodes.framingError)
        #expect(Self.goawayCode(frames[1].payload) == NativeErrorCode.frameTooLarge.rawValue)
    }

    @Test("an invalid frame (a 7-byte ping): framing-error, then a goaway with protocolError (1)")
    func invalidFrame() async throws {
        let ping: [UInt8] =
            [0x00, 0x00, 0x00, 0x07, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00] + Array(repeating: 0, count: 7)
        let frames = try await Self.closing(after: Self.preface + ping)
        #expect(frames.map(\.kind) == [0x01, 0x08])
        #expect(try ServerEnvelope(serializedBytes: frames[0].payload).error.code == ErrorCodes.framingError)
        #expect(Self.goawayCode(frames[1].payload) == NativeErrorCode.protocolError.rawValue)
    }

    @Test("an unknown critical kind (0x7F): a goaway with protocolError (1)")
    func unknownCriticalKind() async throws {
        let frame: [UInt8] = [0x00, 0x00, 0x00, 0x01, 0x7F, 0x00, 0x00, 0x00, 0x00, 0x00, 0xAA]
        let frames = try await Self.closing(after: Self.preface + frame)
        #expect(frames.last?.kind == 0x08)
        #expect(frames.last.map { Self.goawayCode($0.payload) } == NativeErrorCode.protocolError.rawValue)
    }
}
