import CourierProtocol
import NIOCore

/// Writing: everything written in one turn of the loop goes out with one flush, media the compat port sends inline
/// streams from the blob store with whatever is written meanwhile waiting behind it, and the close.
extension SessionHandler {
    /// Whether more may be written now: the client takes what was written (the channel's buffer is under its
    /// high-water mark), and no compat media packet is being streamed (what waits behind it is not piled up).
    var canWrite: Bool {
        guard let context = self.context else { return false }
        return !self.machine.isStreamingMedia && context.channel.isWritable
    }

    /// Writes an envelope.
    func emit(_ envelope: ServerEnvelope, promise: EventLoopPromise<Void>? = nil) {
        do {
            self.emit(try self.transport.frames(for: envelope), promise: promise)
        } catch {
            promise?.fail(error)
        }
    }

    /// Writes several envelopes (gathered notices).
    func emit(_ envelopes: [ServerEnvelope], promise: EventLoopPromise<Void>? = nil) {
        do {
            self.emit(try envelopes.flatMap { try self.transport.frames(for: $0) }, promise: promise)
        } catch {
            promise?.fail(error)
        }
    }

    /// Writes a transport's outputs in order; `promise` completes once they are written and the client is taking
    /// what it is sent (as `NIOAsyncChannel`'s writer does: not when the bytes reach the socket, which a client that
    /// stopped reading would never let happen). Media the compat port sends inline is streamed from the blob store,
    /// and whatever is written meanwhile waits behind it.
    func emit(_ outputs: [TransportOutput<Transport.Outbound>], promise: EventLoopPromise<Void>?) {
        guard !self.machine.isClosed else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        guard !self.machine.isStreamingMedia else {
            self.deferred.append((outputs, promise))
            return
        }
        for (index, output) in outputs.enumerated() {
            switch output {
            case .frame(let frame):
                self.write(frame, promise: nil)
            case .media(let sha256, let size, let wrap, let end):
                // The rest of this envelope goes right after the media, before anything else.
                self.deferred.prepend((Array(outputs[(index + 1)...]), promise))
                self.machine.mediaStreamStarted()
                self.streamMedia(sha256, size: size, wrap: wrap, end: end)
                return
            }
        }
        if let promise { self.whenWritable(promise) }
    }

    /// Completes `promise` now if the client takes what is written, else once it does (or fails it at the close).
    private func whenWritable(_ promise: EventLoopPromise<Void>) {
        if let context = self.context, context.channel.isWritable {
            promise.succeed()
        } else if self.machine.isClosed {
            promise.fail(ChannelError.ioOnClosedChannel)
        } else {
            self.writableWaiters.append(promise)
        }
    }

    private func streamMedia(
        _ sha256: String,
        size: Int64,
        wrap: @escaping @Sendable (ByteBuffer) -> Transport.Outbound,
        end: Transport.Outbound
    ) {
        let (media, writer, bound, loop) = (self.server.media, self.writer, self.bound, self.eventLoop!)
        self.work?.spawn {
            do {
                try await media.read(sha256, range: 0..<size) { bytes in try await writer.writeDirect(wrap(bytes)) }
                try await writer.writeDirect(end)
            } catch {
                // Part of a packet may be out: nothing else may follow it on this connection.
                writer.closeQuietly(reason: "a media packet could not be read: \(error)")
            }
            loop.execute { bound.value.mediaStreamed() }
        }
    }

    private func mediaStreamed() {
        self.machine.mediaStreamEnded()
        while !self.machine.isStreamingMedia, let (outputs, promise) = self.deferred.popFirst() {
            self.emit(outputs, promise: promise)
        }
        // What waited for the packet: the delivery, and reading.
        self.pump()
        self.drain()
    }

    /// Writes a frame; the flush comes at the end of the read burst, or of this turn of the loop. Only ``emit(_:promise:)``
    /// and the media stream it starts call this: everything else goes through `emit`, which keeps a compat media
    /// packet whole.
    func write(_ frame: Transport.Outbound, promise: EventLoopPromise<Void>?) {
        guard !self.machine.isClosed, let context = self.context else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        context.write(self.wrapOutboundOut(frame), promise: nil)
        if let promise { self.whenWritable(promise) }
        if self.inReadBurst {
            self.flushPending = true
        } else if !self.flushScheduled {
            self.flushScheduled = true
            let bound = self.bound
            self.eventLoop.execute {
                let handler = bound.value
                handler.flushScheduled = false
                handler.context?.flush()
            }
        }
    }

    @_specialize(where Transport == NativeTransport)
    @_specialize(where Transport == WebSocketTransport)
    @_specialize(where Transport == CompatTransport)
    func channelWritabilityChanged(context: ChannelHandlerContext) {
        self.machine.writabilityChanged(writable: context.channel.isWritable, now: self.now)
        if context.channel.isWritable {
            let waiters = self.writableWaiters
            self.writableWaiters = []
            for waiter in waiters { waiter.succeed() }
            self.pump()
            self.drain()
        } else {
            self.armDeadline()
        }
        context.fireChannelWritabilityChanged()
    }

    // MARK: Closing

    /// Writes the last frames (whatever was written before goes first) and closes once they are out, or after
    /// `slowConsumerTimeout` for a client that does not read them.
    func writeClosing(_ frames: [Transport.Outbound]) {
        guard let context = self.context else { return }
        // In the middle of a compat media packet, a frame would land inside its bytes: the connection just ends.
        guard let last = frames.last, !self.machine.isStreamingMedia else {
            context.flush()
            context.close(promise: nil)
            return
        }
        for frame in frames.dropLast() { context.write(self.wrapOutboundOut(frame), promise: nil) }
        let channel = context.channel
        context.writeAndFlush(self.wrapOutboundOut(last)).whenComplete { _ in channel.close(promise: nil) }
        // A client that reads nothing more does not hold the connection open: closed after the slow-reader time.
        let timeout = self.server.configuration.limits.slowConsumerTimeout
        let hardClose = context.eventLoop.scheduleTask(in: TimeAmount(timeout)) { channel.close(promise: nil) }
        channel.closeFuture.whenComplete { _ in hardClose.cancel() }
    }

}
