import NIOCore

extension ChannelHandlerContext {
    /// Passes a decoded message on, if there is one, and tells `ByteToMessageHandler` whether to call again.
    /// Always inlined, so that each decoder wraps its own concrete type in `NIOAny`.
    @inline(__always)
    func fireDecoded<Message>(_ message: Message?) -> DecodingState {
        guard let message else { return .needMoreData }
        self.fireChannelRead(NIOAny(message))
        return .continue
    }
}
