import NIOCore
import NIOEmbedded
import NIOHTTP1
import Testing

@testable import MediaCache

/// The idle timer itself is NIO's `IdleStateHandler` (it reads the real clock, so these tests fire its event by hand):
/// what is tested is what the proxy does when it fires.
@Suite("A player's connection closes when idle, not while its request waits for the origin")
struct CloseWhenIdleTests {
    static func channel() throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(CloseWhenIdle())
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return channel
    }

    static func idle(_ channel: EmbeddedChannel) {
        channel.pipeline.fireUserInboundEventTriggered(IdleStateHandler.IdleStateEvent.all)
    }

    static let request = HTTPServerRequestPart.head(
        HTTPRequestHead(version: .http1_1, method: .GET, uri: "/?url=http://origin/a.ts")
    )
    static let responseHead = HTTPServerResponsePart.head(HTTPResponseHead(version: .http1_1, status: .ok))

    @Test("idle between requests: closed")
    func betweenRequests() throws {
        let channel = try Self.channel()
        Self.idle(channel)
        #expect(!channel.isActive)
    }

    @Test("a request waiting for its response to begin stays however long; once the response stops moving, it closes")
    func waitingForTheOrigin() throws {
        let channel = try Self.channel()
        try channel.writeInbound(Self.request)
        try channel.writeInbound(HTTPServerRequestPart.end(nil))
        // The origin is slow: idle time after idle time passes with nothing written.
        for _ in 0..<3 { Self.idle(channel) }
        #expect(channel.isActive)
        // The response begins, then the player stops reading (nothing more moves).
        try channel.writeOutbound(Self.responseHead)
        Self.idle(channel)
        #expect(!channel.isActive)
    }

    @Test("two pipelined requests: idle counts again only once both responses have begun")
    func pipelined() throws {
        let channel = try Self.channel()
        try channel.writeInbound(Self.request)
        try channel.writeInbound(Self.request)
        try channel.writeOutbound(Self.responseHead)
        try channel.writeOutbound(HTTPServerResponsePart.end(nil))
        Self.idle(channel)
        #expect(channel.isActive, "the second request still waits")
        try channel.writeOutbound(Self.responseHead)
        try channel.writeOutbound(HTTPServerResponsePart.end(nil))
        Self.idle(channel)
        #expect(!channel.isActive)
    }

    @Test("other events pass on")
    func otherEvents() throws {
        let channel = try Self.channel()
        channel.pipeline.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        #expect(channel.isActive)
    }
}
