import CourierStore
import NIOCore

extension CourierServer {
    /// Binds the forward port, where the other nodes send this node the writes of the conversations it owns, and
    /// says in the database where it is (with a new secret for this run): nil when this node forwards nothing.
    func listenForForwards() async throws -> (any Channel)? {
        guard let forwarder = self.forwarder, let routes = self.store.clusterRoutes else { return nil }
        let cluster = self.configuration.cluster
        let secret = NodeProof.nonce().map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
        let channel: any Channel
        do {
            channel = try await ForwardListener.bind(
                host: cluster.forwardHost,
                port: cluster.forwardPort,
                node: routes.node,
                secret: secret,
                cluster: cluster,
                commits: self.commits,
                metrics: self.metrics,
                logger: self.logger
            )
        } catch {
            throw ListenFailed(port: .forward, number: cluster.forwardPort, host: cluster.forwardHost, error)
        }
        let port = channel.localAddress?.port ?? cluster.forwardPort
        let host = cluster.forwardAdvertisedHost ?? cluster.forwardHost
        let address = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        do {
            try await routes.advertise(ForwardEndpoint(address: address, secret: secret))
            forwarder.update(try await routes.livePeers(nowMs: SessionClock.systemWallMs()))
        } catch {
            try? await channel.close()
            throw error
        }
        self.logger.info("taking forwarded writes", metadata: ["forward": "\(address)"])
        return channel
    }

    /// Until cancelled: reads which nodes are alive and where their forward ports are.
    func followRoutes(_ routes: any ClusterRoutes, _ forwarder: Forwarder) async {
        while (try? await Task.sleep(for: self.configuration.cluster.routesRefreshInterval)) != nil {
            do {
                forwarder.update(try await routes.livePeers(nowMs: SessionClock.systemWallMs()))
            } catch {
                self.logger.warning("reading the nodes alive failed", metadata: ["error": "\(error)"])
            }
        }
    }
}
