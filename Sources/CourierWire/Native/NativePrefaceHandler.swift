public import NIOCore

/// Sends this side's native preface as soon as the connection is active. Put it first in the pipeline of every
/// native connection, client and server alike: each side sends its preface and checks the other's
/// (``NativeFrameDecoder`` with `expectsPreface`).
public final class NativePrefaceHandler: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    public typealias InboundIn = ByteBuffer
    public typealias InboundOut = ByteBuffer

    public init() {}

    public func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { self.writePreface(context: context) }
    }

    public func channelActive(context: ChannelHandlerContext) {
        self.writePreface(context: context)
        context.fireChannelActive()
    }

    private func writePreface(context: ChannelHandlerContext) {
        var preface = context.channel.allocator.buffer(capacity: NativeFraming.prefaceLength)
        NativeFraming.writePreface(into: &preface)
        context.writeAndFlush(NIOAny(preface), promise: nil)
    }
}
