public import NIOCore

extension ChannelPipeline.SynchronousOperations {
    /// Sets up a native connection's pipeline, client or server alike: the TLS handler when given (this module does
    /// not depend on NIOSSL: pass `NIOSSLClientHandler` or `NIOSSLServerHandler`), this side's preface, the decoder
    /// (its buffer bounded by one largest frame and a header), and the writer. Add the connection's own handler, or
    /// wrap the channel in an `NIOAsyncChannel<NativeFrame, NativeFrame>`, after it.
    ///
    /// - Parameters:
    ///   - tls: A handler that encrypts the connection, added first.
    ///   - configuration: The framing's limits, the same for reading and writing.
    public func addNativeHandlers(
        tls: (any ChannelHandler)? = nil,
        configuration: NativeFraming.Configuration = .init()
    ) throws {
        if let tls { try self.addHandler(tls) }
        try self.addHandler(NativePrefaceHandler())
        try self.addHandler(
            ByteToMessageHandler(
                NativeFrameDecoder(configuration: configuration),
                maximumBufferSize: configuration.maxFramePayloadBytes + 2 * NativeFraming.frameHeaderLength
            )
        )
        try self.addHandler(NativeFrameWriter(configuration: configuration))
    }
}
