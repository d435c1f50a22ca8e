import NIOCore
import NIOPosix

/// A TCP port on 127.0.0.1 that was free a moment ago, for tests that restart a server on the same port.
public enum FreePort {
    public static func pick() async throws -> Int {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: "127.0.0.1", port: 0).get()
        let port = channel.localAddress?.port ?? 0
        try await channel.close().get()
        return port
    }
}
