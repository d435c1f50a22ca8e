import NIOCore
import NIOHTTP1

/// Closes a player's connection whose request head has not arrived whole within a time: from the connection's start,
/// and again from each response's end. An idle timeout alone restarts with every byte read, so a client that sends
/// its request a byte at a time would hold its connection (and a place under `maxConnections`) for ever.
final class RequestHeadTimeout: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private let timeout: TimeAmount
    private var deadline: Scheduled<Void>?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { self.arm(context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.disarm()
    }

    func channelActive(context: ChannelHandlerContext) {
        self.arm(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.disarm()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = self.unwrapInboundIn(data) { self.disarm() }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = self.unwrapOutboundIn(data) { self.arm(context) }
        context.write(data, promise: promise)
    }

    private func arm(_ context: ChannelHandlerContext) {
        self.disarm()
        let channel = context.channel
        self.deadline = context.eventLoop.assumeIsolated().scheduleTask(in: self.timeout) {
            channel.close(promise: nil)
        }
    }

    private func disarm() {
        self.deadline?.cancel()
        self.deadline = nil
    }
}

@available(*, unavailable)
extension RequestHeadTimeout: Sendable {}
