import CourierProtocol
public import CourierStore
import CourierWire
public import Foundation
public import Logging
import NIOCore
import NIOPosix
import NIOSSL
public import ServiceLifecycle
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The Courier server: the native and compat ports, the group commit, and the watcher that applies the admin
/// commands' changes. A `Service`: run it in a `ServiceGroup`, which shuts it down gracefully on SIGTERM/SIGINT.
///
/// Graceful shutdown stops accepting connections, lets every connection finish the writes it has in flight and
/// send their acknowledgements, closes the connections with `shutting-down`, commits what is left, and returns.
public final class CourierServer: Service, Sendable {
    /// The addresses the server listens on, once bound (ports chosen by the system when configured as 0).
    public struct Ports: Sendable, Hashable {
        public var native: Int
        public var compat: Int
        public var http: Int
    }

    public let configuration: ServerConfiguration
    public let store: any CourierDatabase
    /// The version `/health` reports.
    public let version: String
    let logger: Logger
    let hub: Hub
    /// The hub, or with a feed, the hub and the other nodes.
    let fanout: any Fanout
    /// Message traces, when the configuration has a tracer.
    let traces: TraceBook?
    /// The news between the nodes that share the store; nil for a store of this server's own.
    let feed: (any StoreFeed)?
    let commits: CommitQueue
    /// Where each conversation's writes are committed, on a node sharing its database with others
    /// (``ServerConfiguration/Cluster-swift.struct/forwardWrites``).
    let forwarder: Forwarder?
    let metrics: ServerMetrics
    /// Raised by a commit that wrote to the push outbox: the push sender has work.
    let pushWork = Wake()
    let media: MediaService
    let logins: LoginThrottle
    let cluster: ClusterLimits
    /// This server's hold on its data folder, from `init` until `run()` ends.
    private let folderLock: DataFolderLock
    /// The TLS context all ports share, when ``ServerConfiguration/tls`` is set.
    let tls: NIOSSLContext?
    private let bound = Mutex<(ports: Ports?, stopped: Bool, waiters: [CheckedContinuation<Ports?, Never>])>(
        (nil, false, [])
    )

    /// A server of its own on its data folder: `openStore` opens the folder's store once the folder is this server's
    /// (its lock held, so that two servers never open one store); the ports are bound by ``run()``. `courier serve`
    /// opens SQLite there.
    ///
    /// - Throws: ``DataFolderInUse`` if another server (in this process or another) runs on the data folder; what
    ///   `openStore` throws (``CourierStoreError`` with code `storage-failed` if the database cannot be opened);
    ///   `NIOSSLError` if the TLS configuration is unusable (for example a key that does not match the certificate).
    public convenience init(
        configuration: ServerConfiguration,
        version: String = "dev",
        logger: Logger,
        openStore: (URL) throws -> any CourierDatabase
    ) throws {
        let folderLock = try DataFolderLock(folder: configuration.dataFolder)
        let store: any CourierDatabase
        do {
            store = try openStore(configuration.dataFolder)
        } catch {
            folderLock.release()
            throw error
        }
        do {
            try self.init(
                configuration: configuration,
                store: store,
                feed: nil,
                folderLock: folderLock,
                version: version,
                logger: logger
            )
        } catch {
            try? store.close()
            throw error
        }
    }

    /// A server on a store opened elsewhere: a node on a database that others share, with the `feed` through
    /// which the nodes hint at what each committed (nil for a store of its own). The data folder keeps the lock and
    /// the crash reports, and the media when the store keeps none
    /// (``CourierDatabase/blobStorage(folder:configuration:logger:)``; PostgreSQL keeps it for every node). The server closes the store when ``run()`` ends; a store that runs as a
    /// service of its own (``CourierStorePostgres``'s pool) must run for as long as the server does.
    ///
    /// - Throws: ``DataFolderInUse``; `NIOSSLError`; ``CourierStoreError`` if the media storage cannot be opened.
    public convenience init(
        configuration: ServerConfiguration,
        store: any CourierDatabase,
        feed: (any StoreFeed)?,
        version: String = "dev",
        logger: Logger
    ) throws {
        try self.init(
            configuration: configuration,
            store: store,
            feed: feed,
            folderLock: try DataFolderLock(folder: configuration.dataFolder),
            version: version,
            logger: logger
        )
    }

    private init(
        configuration: ServerConfiguration,
        store: any CourierDatabase,
        feed: (any StoreFeed)?,
        folderLock: DataFolderLock,
        version: String,
        logger: Logger
    ) throws {
        self.folderLock = folderLock
        self.configuration = Self.fitted(configuration, openFiles: Self.openFileLimit(), logger: logger)
        self.logins = LoginThrottle(configuration.limits)
        self.version = version
        self.logger = logger
        self.store = store
        self.feed = feed
        let hub = Hub(maxEarlyYields: configuration.cluster.maxEarlyYields)
        self.hub = hub
        self.cluster = ClusterLimits(
            admission: store.clusterAdmission,
            limits: configuration.limits,
            accounts: configuration.accounts,
            cluster: configuration.cluster,
            hub: hub,
            logger: logger
        )
        // A send's trace reaches the other nodes with the news (its commit's context), for their deliveries.
        var publish: (@Sendable (TraceBook.Key, String) -> Void)?
        if let feed {
            publish = { key, parent in ClusterFanout.publish(trace: key, parent: parent, to: feed) }
        }
        let traces = configuration.tracer.map { tracer in
            TraceBook(
                tracer: tracer,
                node: store.clusterRoutes.map { "\($0.node)" } ?? ProcessInfo.processInfo.hostName,
                publish: publish
            )
        }
        self.traces = traces
        let fanout: any Fanout = feed.map { ClusterFanout(hub: hub, feed: $0, traces: traces) } ?? hub
        self.fanout = fanout
        let metrics = ServerMetrics()
        self.metrics = metrics
        do {
            self.tls = try configuration.tls.map { try NIOSSLContext(configuration: $0) }
            self.media = try MediaService(
                folder: configuration.dataFolder.appendingPathComponent("media", isDirectory: true),
                store: store,
                configuration: configuration.media,
                metrics: metrics,
                logger: logger
            )
        } catch {
            folderLock.release()
            throw error
        }
        let pushWork = self.pushWork
        let commits = CommitQueue(
            store: store,
            configuration: configuration.commit,
            clock: { SessionClock.systemWallMs() },
            // Fresh events only for users with a connection that can take them as they are.
            freshRoom: { hub.freshRoom(for: $0) },
            onCommit: { report in
                metrics.committed(report)
                fanout.logsGrew(report.appended, fresh: report.fresh)
                if !report.introductions.isEmpty { fanout.introduce(report.introductions) }
                if report.pushes > 0 { pushWork.raise() }
            }
        )
        self.commits = commits
        self.forwarder =
            if let routes = store.clusterRoutes, configuration.cluster.forwardWrites {
                Forwarder(
                    node: routes.node,
                    commits: commits,
                    cluster: configuration.cluster,
                    metrics: metrics,
                    logger: logger
                )
            } else {
                nil
            }
    }

    /// The configuration with its connection limits lowered, if need be, so that both ports' connections and the
    /// reserved descriptors fit in the open-file limit: a flood on one port then cannot take the descriptors the
    /// others, the database and media files need.
    static func fitted(_ configuration: ServerConfiguration, openFiles: Int?, logger: Logger) -> ServerConfiguration {
        guard let openFiles else { return configuration }
        var fitted = configuration
        // Checked arithmetic: a limit may be as large as an Int holds (set by a library user, or through --limit).
        let (left, short) = openFiles.subtractingReportingOverflow(max(0, configuration.reservedDescriptors))
        let available = short ? 2 : max(2, left)
        let (sum, overflow) = configuration.limits.maxConnections.addingReportingOverflow(
            configuration.http.maxConnections
        )
        let wanted = overflow ? Int.max : sum
        guard wanted > available else { return configuration }
        // Shared in proportion, at least one each (in floating point: the product may not fit an Int).
        let share = Double(available) * Double(configuration.http.maxConnections) / Double(wanted)
        let http = min(available - 1, max(1, Int(share.rounded(.down))))
        fitted.http.maxConnections = http
        fitted.limits.maxConnections = max(1, available - http)
        logger.warning(
            "connection limits lowered to fit the open-file limit",
            metadata: [
                "open-files": "\(openFiles)", "reserved": "\(configuration.reservedDescriptors)",
                "max-connections": "\(fitted.limits.maxConnections)", "http-max-connections": "\(http)",
            ]
        )
        return fitted
    }

    /// Whether a server runs on a data folder now (holds its lock): what the store says of connected devices is
    /// true only then.
    public static func isRunning(on folder: URL) -> Bool {
        DataFolderLock.isHeld(folder)
    }

    /// The process's soft limit on open files (each connection takes one), or nil if it cannot be read or is
    /// unlimited.
    static func openFileLimit() -> Int? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < rlim_t(Int.max) else {
            return nil
        }
        return Int(clamping: limit.rlim_cur)
    }

    /// The bound ports, waiting until the server has bound them; nil if ``run()`` ended without listening (a port
    /// in use, say: `run()` throws why).
    public func ports() async -> Ports? {
        await withCheckedContinuation { continuation in
            let ready = self.bound.withLock { state -> Ports?? in
                if let ports = state.ports { return .some(ports) }
                if state.stopped { return .some(nil) }
                state.waiters.append(continuation)
                return .none
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Serves until shutdown; the data folder is free for another server once it returns.
    public func run() async throws {
        defer {
            self.folderLock.release()
            let waiters = self.bound.withLock { state in
                state.stopped = true
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume(returning: nil) }
        }
        // This server holds the data folder (its lock): no device is connected yet, whatever one that was killed left.
        try await self.store.clearConnectedDevices()
        // Nor does it hold any of the connections the nodes count together.
        try await self.cluster.start()
        let activity = DeviceActivity()
        let context = SessionContext(
            configuration: self.configuration,
            store: self.store,
            commits: self.commits,
            forwarder: self.forwarder,
            hub: self.hub,
            fanout: self.fanout,
            activity: activity,
            metrics: self.metrics,
            media: self.media,
            logins: self.logins,
            cluster: self.cluster,
            traces: self.traces,
            logger: self.logger
        )
        let vapid = try await self.vapidKey()
        let pushes = PushSender(
            store: self.store,
            key: vapid,
            configuration: self.configuration.push,
            shared: self.feed != nil,
            wake: self.pushWork,
            metrics: self.metrics,
            logger: self.logger
        )
        let store = self.store
        let webhooks = WebhookSender(
            store: self.store,
            configuration: self.configuration,
            hub: self.hub,
            metrics: self.metrics,
            logger: self.logger
        ) {
            bot,
            id,
            text in
            // From the bot to its owner, once (the id is the webhook's): through the group commit like any message.
            guard let owner = try? await store.botOwner(of: bot), let name = try? await store.userName(of: bot) else {
                return
            }
            var body = Courier_V1_Body()
            body.text = text
            guard let bytes = try? body.serializedBytes() as [UInt8] else { return }
            var send = WriteRequest.Send(sender: bot, id: id, to: .user(owner), body: bytes)
            send.prepareSearch(body: body)
            _ = try? await context.submit(.send(send), origin: nil, userName: name).outcome()
        }
        let (httpPorts, httpRunning) = AsyncStream.makeStream(of: Int.self)
        let http = try HTTPEndpoints.application(
            configuration: self.configuration,
            vapidPublicKey: vapid.publicKey,
            metrics: self.metrics,
            media: self.media,
            mediaTickets: MediaTickets(
                key: try await self.mediaTicketKey(),
                lifetime: self.configuration.media.ticketLifetime
            ),
            logins: self.logins,
            sessions: self.configuration.webSocket.enabled ? context : nil,
            api: context,
            webhooks: webhooks,
            version: self.version,
            database: HTTPEndpoints.DatabaseHealth(
                store: self.store,
                feed: self.feed,
                probeInterval: self.configuration.http.healthProbeInterval,
                probeTimeout: self.configuration.http.healthProbeTimeout
            ),
            logger: self.logger
        ) { port in httpRunning.yield(port) }
        let native: any Channel
        do {
            native = try await self.bindNative(context: context)
        } catch {
            throw ListenFailed(
                port: .native,
                number: self.configuration.nativePort,
                host: self.configuration.host,
                error
            )
        }
        let forwardPort: (any Channel)?
        do {
            forwardPort = try await self.listenForForwards()
        } catch {
            try? await native.close()
            throw error
        }
        let compat: any Channel
        do {
            compat = try await self.bindCompat(context: context)
        } catch {
            try? await forwardPort?.close()
            try? await native.close()
            throw ListenFailed(
                port: .compat,
                number: self.configuration.compatPort,
                host: self.configuration.host,
                error
            )
        }
        // Written until every connection has gone (their last edges included), then it ends.
        async let activityWritten: Void = activity.run(hub: self.hub, store: self.store)
        defer { activity.finish() }
        // New messages' search tokens, written beside the group commit until its last batch is in.
        async let searchIndexed: Void = self.store.followSearchIndex(logger: self.logger)
        defer { self.store.searchIndexer.finish() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await self.commits.run() }
            group.addTask { await self.watchChanges() }
            group.addTask { await self.cluster.run() }
            if let forwarder = self.forwarder, let routes = self.store.clusterRoutes {
                group.addTask { await self.followRoutes(routes, forwarder) }
            }
            if let feed = self.feed {
                group.addTask { await self.followFeed(feed) }
                group.addTask { await self.pollOnlineUsers() }
            }
            group.addTask { await self.maintainStore() }
            group.addTask { await self.indexForSearch() }
            group.addTask { await self.media.removeAbandonedUploads() }
            group.addTask { await pushes.run() }
            group.addTask { await webhooks.run() }
            group.addTask {
                defer { httpRunning.finish() }
                do {
                    try await http.run()
                } catch {
                    // Before it listened, a failure is the port's.
                    guard self.bound.withLock({ $0.ports }) == nil else { throw error }
                    throw ListenFailed(
                        port: .http,
                        number: self.configuration.httpPort,
                        host: self.configuration.host,
                        error
                    )
                }
            }
            var running = httpPorts.makeAsyncIterator()
            guard let httpPort = await running.next() else {
                // The HTTP server failed to start: its error ends the group (the other tasks stop).
                native.close(promise: nil)
                compat.close(promise: nil)
                self.cluster.stopping()
                self.hub.shutDown()
                context.shutDownSessions()
                await context.sessionsEnded()
                await self.cluster.forget()
                self.forwarder?.stop()
                forwardPort?.close(promise: nil)
                self.commits.finish()
                group.cancelAll()
                try await group.waitForAll()
                return
            }
            self.publish(
                Ports(
                    native: native.localAddress?.port ?? 0,
                    compat: compat.localAddress?.port ?? 0,
                    http: httpPort
                )
            )
            // The listeners run until shutdown closes them; the sessions live in their channels' pipelines.
            let stop: @Sendable () -> Void = {
                self.logger.info("shutting down: no new connections; finishing the ones open")
                native.close(promise: nil)
                compat.close(promise: nil)
                self.cluster.stopping()
                self.hub.shutDown()
                webhooks.stop()
                context.shutDownSessions()
            }
            await withTaskCancellationHandler {
                await withGracefulShutdownHandler {
                    try? await native.closeFuture.get()
                    try? await compat.closeFuture.get()
                } onGracefulShutdown: {
                    stop()
                }
            } onCancel: {
                stop()
            }
            await context.sessionsEnded()
            await self.cluster.forget()
            self.forwarder?.stop()
            forwardPort?.close(promise: nil)
            self.commits.finish()
            group.cancelAll()
            try await group.waitForAll()
        }
        activity.finish()
        await activityWritten
        self.store.searchIndexer.finish()
        await searchIndexed
        try? self.store.close()
        self.logger.info("stopped")
    }

    private func publish(_ ports: Ports) {
        let waiters = self.bound.withLock { state in
            state.ports = ports
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: ports) }
        self.logger.info(
            "listening",
            metadata: [
                "host": "\(self.configuration.host)", "native": "\(ports.native)", "compat": "\(ports.compat)",
                "http": "\(ports.http)",
            ]
        )
    }
}
