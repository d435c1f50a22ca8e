public import CourierWire
public import NIOCore
import NIOPosix
public import NIOSSL

/// A bare client of the compat port for tests: it writes packets exactly as given (pretty-printed headers, string
/// sizes, cut into pieces) and reads the server's packets with a deadline.
public actor CompatTestClient {
    public let channel: any Channel
    private let inbox: FrameInbox<CompatMessage>
    private var backlog: [CompatFrame] = []

    /// Connects to a compat port on 127.0.0.1, over TLS when `tls` is given; `endMarker` must match the server's.
    public static func connect(
        port: Int,
        endMarker: [UInt8]? = nil,
        tls: TLSConfiguration? = nil
    ) async throws -> CompatTestClient {
        let inbox = FrameInbox<CompatMessage>()
        let framing = CompatFraming.Configuration(endMarker: endMarker)
        let context = try tls.map { try NIOSSLContext(configuration: $0) }
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let context {
                        try channel.pipeline.syncOperations.addHandler(
                            NIOSSLClientHandler(context: context, serverHostname: nil)
                        )
                    }
                    try channel.pipeline.syncOperations.addHandler(
                        ByteToMessageHandler(CompatFrameDecoder(configuration: framing))
                    )
                    try channel.pipeline.syncOperations.addHandler(FrameCollector(inbox))
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        return CompatTestClient(channel: channel, inbox: inbox)
    }

    private init(channel: any Channel, inbox: FrameInbox<CompatMessage>) {
        self.channel = channel
        self.inbox = inbox
    }

    /// A packet as the source notes' client writes it: `NSJSONWritingPrettyPrinted` output (two-space indent,
    /// `" : "` between key and value), `size` as a string, CRLF, then the payload.
    public static func notesPacket(_ fields: [(String, String)], payload: [UInt8] = []) -> [UInt8] {
        let lines = (fields + [("size", String(payload.count))]).map { key, value in
            "  \"\(key)\" : \"\(value)\""
        }
        return Array("{\n\(lines.joined(separator: ",\n"))\n}\r\n".utf8) + payload
    }

    /// A compact packet with typed fields, as a modern client writes it.
    public static func packet(
        _ type: String,
        _ fields: [String: JSONValue] = [:],
        payload: [UInt8] = []
    ) throws
        -> [UInt8]
    {
        var buffer = ByteBuffer()
        try CompatFraming.write(
            CompatFrame(type: type, payload: ByteBuffer(bytes: payload), fields: fields),
            configuration: .init(),
            into: &buffer
        )
        return Array(buffer.readableBytesView)
    }

    /// Writes bytes in pieces of the given sizes (the rest in one piece), flushing each.
    public func write(_ bytes: [UInt8], cuts: [Int] = []) async throws {
        var start = 0
        for cut in cuts where start < bytes.count {
            let end = min(bytes.count, start + max(1, cut))
            try await self.channel.writeAndFlush(ByteBuffer(bytes: bytes[start..<end])).get()
            start = end
        }
        if start < bytes.count {
            try await self.channel.writeAndFlush(ByteBuffer(bytes: bytes[start...])).get()
        }
    }

    /// Reads until a packet of a type arrives, keeping the others for later reads.
    public func expect(_ type: String, timeout: Duration = Patience.reply) async throws -> CompatFrame {
        if let index = self.backlog.firstIndex(where: { $0.header.type == type }) {
            return self.backlog.remove(at: index)
        }
        let deadline = ContinuousClock.now + timeout
        while true {
            let left = deadline - .now
            guard left > .zero else {
                throw TestClientTimeout(description: "no \(type) packet within \(timeout); have \(self.backlog)")
            }
            let next: CompatMessage?
            do {
                next = try await self.inbox.next(timeout: left)
            } catch is TestClientTimeout {
                throw TestClientTimeout(description: "no \(type) packet within \(timeout); have \(self.backlog)")
            }
            switch next {
            case .frame(let frame)?:
                if frame.header.type == type { return frame }
                self.backlog.append(frame)
            case .skipped?:
                continue
            case nil:
                throw TestClientTimeout(description: "closed before a \(type) packet; have \(self.backlog)")
            }
        }
    }

    /// The next packet (one read before comes first), or nil when the server closed the connection.
    public func next(timeout: Duration = Patience.reply) async throws -> CompatFrame? {
        if !self.backlog.isEmpty { return self.backlog.removeFirst() }
        let deadline = ContinuousClock.now + timeout
        while true {
            let left = deadline - .now
            guard left > .zero else { throw TestClientTimeout(description: "no packet within \(timeout)") }
            switch try await self.inbox.next(timeout: left) {
            case .frame(let frame)?: return frame
            case .skipped?: continue
            case nil: return nil
            }
        }
    }

    /// Reads until the server closes the connection; returns every packet not read before.
    public func expectClose(timeout: Duration = Patience.reply) async throws -> [CompatFrame] {
        var frames = self.backlog
        self.backlog = []
        let deadline = ContinuousClock.now + timeout
        while true {
            let left = deadline - .now
            guard left > .zero else { throw TestClientTimeout(description: "still open after \(timeout)") }
            switch try await self.inbox.next(timeout: left) {
            case .frame(let frame)?: frames.append(frame)
            case .skipped?: continue
            case nil: return frames
            }
        }
    }

    public func close() async {
        try? await self.channel.close().get()
    }
}
