import NIOCore
import NIOPosix

/// One HTTP/1.1 GET on a new connection, its body counted and dropped, timed: what a player starting playback does.
public enum HTTPTiming {
    public struct Result: Sendable {
        public var status: Int
        /// From sending the request to the first byte of the body.
        public var firstByteSeconds: Double
        /// From sending the request to the end of the body.
        public var seconds: Double
        public var bodyBytes: Int64
        /// The body itself, when asked for (``get(port:path:keepingBody:)``).
        public var body: [UInt8] = []
    }

    /// GETs `path` from 127.0.0.1:`port` with `Connection: close` and reads until the server closes.
    public static func get(port: Int, path: String, keepingBody: Bool = false) async throws -> Result {
        let started = NIODeadline.now()
        let promise = MultiThreadedEventLoopGroup.singleton.any().makePromise(of: Result.self)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        Counter(started: started, keepingBody: keepingBody, promise: promise)
                    )
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        let request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n"
        try await channel.writeAndFlush(ByteBuffer(string: request))
        return try await promise.futureResult.get()
    }

    /// Counts a response's bytes as they arrive, noting when the body starts; completes at the close.
    private final class Counter: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer

        let started: NIODeadline
        let keepingBody: Bool
        let promise: EventLoopPromise<Result>
        var kept: [UInt8] = []
        var head: [UInt8] = []
        var status = 0
        var body: Int64 = 0
        var firstByte: NIODeadline?
        var headDone = false

        init(started: NIODeadline, keepingBody: Bool, promise: EventLoopPromise<Result>) {
            self.started = started
            self.keepingBody = keepingBody
            self.promise = promise
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = Self.unwrapInboundIn(data)
            if self.headDone {
                self.body += Int64(buffer.readableBytes)
                if self.keepingBody { self.kept += buffer.readableBytesView }
                return
            }
            self.head += buffer.readableBytesView
            guard let end = Self.endOfHead(self.head) else { return }
            self.headDone = true
            let line = self.head.prefix { $0 != 13 }
            self.status = Int(String(decoding: line, as: UTF8.self).split(separator: " ").dropFirst().first ?? "") ?? 0
            self.body = Int64(self.head.count - end)
            if self.keepingBody { self.kept = Array(self.head[end...]) }
            self.head = []
            if self.body > 0 { self.firstByte = .now() }
        }

        func channelReadComplete(context: ChannelHandlerContext) {
            if self.headDone, self.body > 0, self.firstByte == nil { self.firstByte = .now() }
        }

        func channelInactive(context: ChannelHandlerContext) {
            let now = NIODeadline.now()
            self.promise.succeed(
                Result(
                    status: self.status,
                    firstByteSeconds: Double(((self.firstByte ?? now) - self.started).nanoseconds) / 1e9,
                    seconds: Double((now - self.started).nanoseconds) / 1e9,
                    bodyBytes: self.body,
                    body: self.kept
                )
            )
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            self.promise.fail(error)
            context.close(promise: nil)
        }

        private static func endOfHead(_ bytes: [UInt8]) -> Int? {
            guard bytes.count >= 4 else { return nil }
            for index in 3..<bytes.count
            where bytes[index - 3] == 13 && bytes[index - 2] == 10 && bytes[index - 1] == 13 && bytes[index] == 10 {
                return index + 1
            }
            return nil
        }
    }
}
