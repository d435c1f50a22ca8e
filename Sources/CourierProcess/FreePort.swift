import NIOCore
import NIOPosix

/// A TCP port on 127.0.0.1 that was free a moment ago, for tests that restart a server on the same port.
public enum FreePort {
    public static func pick() async throws -> Int {
        let held = try await Self.hold()
        let port = held.port
        await held.close()
        return port
    }

    /// A port on 127.0.0.1 held by a listening socket until ``HeldPort/close()``: a port in use, for tests of what
    /// a server says when it cannot listen.
    public static func hold() async throws -> HeldPort {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: "127.0.0.1", port: 0).get()
        return HeldPort(channel: channel)
    }
}

/// A listening socket on 127.0.0.1 (see ``FreePort/hold()``).
public struct HeldPort: Sendable {
    let channel: any Channel
    public let port: Int

    init(channel: any Channel) {
        self.channel = channel
        self.port = channel.localAddress?.port ?? 0
    }

    public func close() async {
        try? await self.channel.close().get()
    }
}
