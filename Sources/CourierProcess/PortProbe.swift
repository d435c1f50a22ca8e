import NIOCore
import NIOPosix

/// Whether something listens on a local port: a TCP connection is opened, then closed at once.
public enum PortProbe {
    public static func accepts(port: Int, host: String = "127.0.0.1") async -> Bool {
        do {
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(.seconds(2))
                .connect(host: host, port: port).get()
            try? await channel.close().get()
            return true
        } catch {
            return false
        }
    }
}
