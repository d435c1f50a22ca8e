import CourierProtocol
import CourierStore
import CourierStoreSQLite
import CourierTesting
import CourierWire
import Logging
import NIOCore
import NIOEmbedded
import Testing

@testable import CourierServer

@Suite("The session's channel handler (an embedded channel, no sockets)")
struct SessionHandlerTests {
    /// Counts the flushes that pass it towards the socket.
    final class FlushCounter: ChannelOutboundHandler {
        typealias OutboundIn = NativeFrame
        var flushes = 0

        func flush(context: ChannelHandlerContext) {
            self.flushes += 1
            context.flush()
        }
    }

    /// A session context over a real store in a temporary folder (nothing runs its group commit: these tests send
    /// no writes).
    static func withContext(_ body: (SessionContext) throws -> Void) throws {
        let folder = try TemporaryDirectory(prefix: "courier-handler")
        defer { folder.remove() }
        let (context, store) = try Self.context(in: folder, configuration: ServerConfiguration(), clock: .continuous)
        defer { try? store.close() }
        try body(context)
    }

    /// A session context over a SQLite store in `folder`, with the sessions' clock given.
    static func context(
        in folder: TemporaryDirectory,
        configuration: ServerConfiguration,
        clock: SessionClock
    ) throws -> (SessionContext, SQLiteStore) {
        var configuration = configuration
        configuration.dataFolder = folder.url
        let logger = Logger(label: "courier.test-handler")
        let store = try SQLiteStore(
            folder: folder.url,
            configuration: .init(serving: configuration.store),
            logger: logger
        )
        let metrics = ServerMetrics()
        let hub = Hub()
        let context = SessionContext(
            configuration: configuration,
            store: store,
            commits: CommitQueue(store: store, clock: { 0 }),
            hub: hub,
            fanout: hub,
            activity: DeviceActivity(),
            metrics: metrics,
            media: try MediaService(
                folder: folder.url.appendingPathComponent("media"),
                store: store,
                configuration: configuration.media,
                metrics: metrics,
                logger: logger
            ),
            logins: LoginThrottle(configuration.limits),
            logger: logger,
            clock: clock
        )
        return (context, store)
    }

    static func connected(_ context: SessionContext) throws -> (EmbeddedChannel, FlushCounter) {
        let counter = FlushCounter()
        let handler = SessionHandler(
            requests: SessionRequests(
                context: context,
                transport: NativeTransport(),
                remoteAddress: "127.0.0.1:1",
                clientIP: "127.0.0.1"
            )
        )
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandlers([counter, handler])
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return (channel, counter)
    }

    @Test("a burst of frames read together is answered with one flush; each burst with its own")
    func oneFlushPerBurst() throws {
        try Self.withContext { context in
            let (channel, counter) = try Self.connected(context)
            let pipeline = channel.pipeline
            for number in 0..<20 { pipeline.fireChannelRead(NativeFrame.ping(UInt64(number))) }
            // Nothing is flushed while the burst is read; the end of the read flushes once.
            #expect(counter.flushes == 0)
            pipeline.fireChannelReadComplete()
            #expect(counter.flushes == 1)
            var pongs: [UInt64] = []
            while let frame = try channel.readOutbound(as: NativeFrame.self) {
                #expect(frame.kind == .pong)
                pongs.append(frame.pingData ?? .max)
            }
            #expect(pongs == Array(0..<20))

            for _ in 0..<3 {
                pipeline.fireChannelRead(NativeFrame.ping(7))
                pipeline.fireChannelReadComplete()
            }
            #expect(counter.flushes == 4)
            _ = try channel.finish(acceptAlreadyClosed: true)
        }
    }

    @Test("a closed connection's handler is freed: nothing it registered (wheel, registry) keeps it")
    func freedAfterClose() async throws {
        weak var freed: SessionHandler<NativeTransport>?
        try Self.withContext { context in
            let (channel, _) = try Self.connected(context)
            freed = try channel.pipeline.syncOperations.handler(type: SessionHandler<NativeTransport>.self)
            #expect(freed != nil)
            try channel.close().wait()
            channel.embeddedEventLoop.run()
        }
        // The end's bookkeeping runs in a task; then nothing refers to the handler any more.
        try await waitUntil("the handler is freed") { freed == nil }
    }
}
