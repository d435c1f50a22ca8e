import CourierWire
import NIOCore

/// The first handler of a trusted proxy's connection to the native or compat port: it reads the PROXY protocol
/// header, then puts the port's own handlers after it for the client the header names, passes them the bytes after
/// the header, and leaves. Until then the connection is nobody's: the handlers that count
/// and admit a client come after the header.
///
/// A connection that sends anything else first, or nothing whole within `timeout`, is closed.
final class ProxyHeaderHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    /// Adds the port's handlers for the client at this address (`ip`, `port`); nil for the proxy's own connection.
    typealias Install = (any Channel, (ip: String, port: Int)?) throws -> Void

    private var reader = ProxyHeader.Reader()
    private let timeout: TimeAmount
    private let install: Install
    private var deadline: Scheduled<Void>?
    private var started = false
    private var done = false

    init(timeout: TimeAmount, install: @escaping Install) {
        self.timeout = timeout
        self.install = install
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { self.start(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        // Held back: the port's handlers see the connection start once they exist.
        self.start(context: context)
    }

    private func start(context: ChannelHandlerContext) {
        guard !self.started else { return }
        self.started = true
        let channel = context.channel
        self.deadline = context.eventLoop.scheduleTask(in: self.timeout) { channel.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.done else { return }
        switch self.reader.feed(Self.unwrapInboundIn(data)) {
        case .incomplete:
            break
        case .invalid:
            self.done = true
            self.deadline?.cancel()
            context.close(promise: nil)
        case .header(let header, let rest):
            self.done = true
            self.deadline?.cancel()
            do {
                try self.install(context.channel, header.source)
            } catch {
                context.close(promise: nil)
                return
            }
            // The connection is active already: the port's handlers start in `handlerAdded`, as NIO's do when added to
            // an active channel (a second channelActive would, for one, send the native preface twice).
            if rest.readableBytes > 0 { context.fireChannelRead(Self.wrapInboundOut(rest)) }
            // Gone at once: the read's end, and all that follows, goes to the port's handlers.
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.deadline?.cancel()
        // Passed on always: the port's handlers may exist already (the bytes after the header, handed to them before
        // this handler left, can make them close the connection at once), and must hear of the close.
        context.fireChannelInactive()
    }
}
