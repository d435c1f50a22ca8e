public import CourierStore
public import Foundation
public import NIOSSL
public import Tracing

/// Everything `courier serve` can be told, with the defaults it runs with.
public struct ServerConfiguration: Sendable {
    /// The address all three ports bind to.
    public var host: String = "127.0.0.1"
    /// The compat port: the source notes' JSON-header framing. 0 picks a free port.
    public var compatPort: Int = 6969
    /// The native port: Courier's binary framing with protobuf envelopes. 0 picks a free port.
    public var nativePort: Int = 6970
    /// The HTTP port: `/health` and `/metrics`. 0 picks a free port.
    public var httpPort: Int = 6980
    /// The data folder: the database, and `crashes/`.
    public var dataFolder: URL = URL(fileURLWithPath: "courier-data", isDirectory: true)
    /// TLS for all three ports, or nil (the default) for plain TCP. When set, every port speaks TLS only.
    /// ``tls(certificateChainFile:privateKeyFile:)`` makes one from PEM files.
    public var tls: TLSConfiguration? = nil

    /// The proxies in front (nginx), whose connections say whose they are: a PROXY protocol header on the native and
    /// compat ports, `X-Forwarded-For` on the HTTP port. None by default: every peer is a client.
    public var trustedProxies = TrustedProxies()

    /// Where message traces go (`courier serve --otlp-endpoint`: an OTLP exporter's tracer), or nil (the default):
    /// no trace is made (``TraceBook``).
    public var tracer: (any Tracer)? = nil

    /// The session limits, the same on both ports.
    public var limits: Limits = .init()
    /// The HTTP port's own limits.
    public var http: HTTP = .init()
    /// The compat port's framing options.
    public var compat: Compat = .init()
    /// Media: size limit, quota, upload clean-up, and the flow control of media streams.
    public var media: Media = .init()
    /// What the store applies, whatever its database (token lifetime, recall window, password cost): whoever opens
    /// the store gives it these.
    public var store: StoreSettings = .init()
    /// The group commit's settings.
    public var commit: CommitQueue.Configuration = .init()
    /// For a node sharing its database with others.
    public var cluster: Cluster = .init()
    /// Who may make an account, and how often; how often users may look others up.
    public var accounts: Accounts = .init()
    /// The WebSocket gateway at `/ws` on the HTTP port.
    public var webSocket: WebSocket = .init()
    /// The web chat at `/` on the HTTP port.
    public var web: Web = .init()
    /// Pushes to devices that are away (docs/PUSH.md).
    public var push: Push = .init()
    /// The HTTP API bots (and scripts with a device token) speak: `/api/v1`, docs/BOTS.md.
    public var api: API = .init()

    /// The HTTP API's limits, on top of the HTTP port's connections per address and the failed-token throttle.
    public struct API: Sendable {
        /// Requests per second one user may make, all its tokens together (a long poll counts once); past the
        /// burst the next is answered 429 with `Retry-After`.
        public var requestsPerSecond: Double = 30
        public var requestBurst: Double = 60
        /// The same for one address, all its users together.
        public var requestsPerSecondPerAddress: Double = 120
        public var requestBurstPerAddress: Double = 240
        /// The longest `timeout` of `GET /api/v1/updates` (Telegram's limit, 50 s).
        public var maxPollSeconds: Int = 50
        /// The most updates one answer carries (`limit` asks for fewer).
        public var maxUpdatesPerPoll: Int = 100
        /// Long polls one user may have open at once, all its tokens together; one more is answered 409.
        public var maxPollsPerUser: Int = 4
        /// The largest JSON body taken.
        public var maxBodyBytes: Int = 128 * 1024

        /// Outgoing webhooks (`PUT /api/v1/webhook`), sent as Standard Webhooks says: from any node, one node at a
        /// time each (a lease it renews), in order, at least once. Their URLs are checked as push endpoints are
        /// (``Push/allowPrivateTargets``, connect and request deadlines, the response cap).
        public var webhookLease: Duration = .seconds(30)
        /// How often a node looks for webhooks set through other nodes or left by a node that died.
        public var webhookPollInterval: Duration = .seconds(2)
        /// Updates one delivery round sends a webhook before the next webhook's turn.
        public var webhookBatch: Int = 32
        /// Webhooks delivered to at once.
        public var maxConcurrentWebhooks: Int = 16
        /// The wait after a webhook's first failure, doubled with each failure after it, up to the cap.
        public var webhookRetryBase: Duration = .seconds(5)
        public var webhookRetryCap: Duration = .seconds(3600)
        /// A webhook failing this long without a success is turned off, and the bot's owner told.
        public var webhookDisableAfter: Duration = .seconds(86_400)
        /// Posts one incoming hook (`/hooks/<secret>`) may make a second, and at once above that.
        public var hookPostsPerSecond: Double = 1
        public var hookPostBurst: Double = 20
        /// The largest body an incoming hook reads.
        public var maxHookBodyBytes: Int = 64 * 1024

        public init() {}
    }

    /// Pushes to devices that are away: Web Push subscriptions and where pushes may go.
    public struct Push: Sendable {
        /// Whether push endpoints (and later webhook and gateway URLs) may be plain `http://` and reach loopback,
        /// private, link-local or metadata addresses: for tests and private deployments only
        /// (`courier serve --allow-private-targets`).
        public var allowPrivateTargets: Bool = false
        /// Who runs the server, for the push services (RFC 8292 §2.1: a `mailto:` or `https:` URL). Some services
        /// refuse `localhost`: set a real contact on a public server (`courier serve --push-contact`).
        public var subject: String = "mailto:postmaster@localhost"
        /// How long a push service keeps a push for a device that is away (the `TTL` header), in seconds; a push
        /// not sent by then is not retried.
        public var ttlSeconds: Int = 86_400
        /// How long a node holds the outbox rows it took: if it dies, another node sends them after this.
        public var lease: Duration = .seconds(60)
        /// The most outbox rows taken at once (each a message, whose pushes are one per subscription of its members:
        /// a few large groups' messages are thousands).
        public var batch: Int = 32
        /// The most pushes in flight at once, per node.
        public var maxConcurrentPushes: Int = 64
        /// On a database shared with other nodes: how often to look for rows a node that died left.
        public var pollInterval: Duration = .seconds(15)
        /// A push service's deadlines: to connect, and for the whole request.
        public var connectTimeout: Duration = .seconds(5)
        public var requestTimeout: Duration = .seconds(15)
        /// The most bytes of a push service's answer read.
        public var maxResponseBytes: Int = 16 << 10
        /// The wait before the first retry, doubled with each (with up to a fifth more at random), up to the cap.
        public var retryBase: Duration = .seconds(2)
        public var retryCap: Duration = .seconds(3600)
        /// The most attempts at one push.
        public var maxAttempts: Int = 10
        /// The most times an outbox row is taken without being done (its job failed, or its node died each time)
        /// before it is given up.
        public var maxClaims: Int = 10

        public init() {}
    }

    /// The web chat: a page at `/` on the HTTP port that chats over the gateway (``WebSocket``), which it needs.
    public struct Web: Sendable {
        /// Whether `/` and `/web/` serve the page (only while the gateway is on).
        public var enabled: Bool = true
        /// A folder to serve the page's files from, read once at start, instead of those built into the binary
        /// (Web/ in the repository): for working on the page.
        public var root: String?

        public init() {}
    }

    /// The WebSocket gateway: the native session's envelopes as JSON, for browsers (docs/PROTOCOL.md, "The WebSocket
    /// gateway"). Its sessions are counted with the native and compat ports' (``Limits``), not as HTTP connections.
    public struct WebSocket: Sendable {
        /// Whether `GET /ws` upgrades to the gateway.
        public var enabled: Bool = true
        /// Origins whose pages may open `/ws` besides the server's own, as `scheme://host[:port]`. The server's own
        /// is taken by itself only when the request's `Host` is an address or `localhost` (the page's scheme the
        /// port's, its host and port that `Host`); a server reached by name lists its name here. A browser's request
        /// from any other origin is refused with 403; a client that sends no `Origin` (not a browser) is not asked.
        public var allowedOrigins: [String] = []
        /// The largest message, its fragments together, inflated: one envelope in JSON, or one media chunk (the
        /// native port's frame limit) with its frame header. A larger one closes the connection (1009).
        public var maxMessageBytes: Int = (1 << 20) + 64
        /// Whether permessage-deflate is accepted when a client offers it (without context takeover either way:
        /// no compression state outlives a message).
        public var compression: Bool = true

        public init() {}

        /// Whether `origin` is written as ``allowedOrigins`` takes it: `http://` or `https://`, a host, perhaps a
        /// port, no path.
        public static func isOrigin(_ origin: String) -> Bool {
            WebSocketOrigins.authority(ofOrigin: WebSocketOrigins.normalize(origin)) != nil
        }
    }

    /// Who may make an account (`SignUp` in a `hello`), and the limits on signing up and on finding users.
    public struct Accounts: Sendable {
        /// Who may sign up.
        public enum Registration: String, Sendable, CaseIterable {
            /// Nobody: accounts are made by the administrator (`courier user add`).
            case closed
            /// Whoever holds an invitation (`courier invite create`).
            case invite
            /// Anyone, within the limits below.
            case open
        }

        public var registration: Registration = .closed
        /// Sign-ups from one client address (an IPv4 address, or an IPv6 /64) within `signUpWindow`, those under
        /// way counted, before more are refused with `throttled` (before any password is hashed). Every sign-up
        /// counts, the ones that made an account too.
        public var maxSignUpsPerAddress: Int = 5
        /// Sign-ups from all addresses together within `signUpWindow`, on every node sharing the database.
        public var maxSignUpsInAll: Int = 200
        /// The window the sign-up counts cover.
        public var signUpWindow: Duration = .seconds(3600)
        /// Users one user may look up by name (`FindUser`) within `lookupWindow`; more are refused with
        /// `rate-limited`. Counted on each node.
        public var maxLookupsPerUser: Int = 30
        /// The same for one client address, whoever is logged in there.
        public var maxLookupsPerAddress: Int = 120
        /// The window the lookup counts cover.
        public var lookupWindow: Duration = .seconds(60)
        /// Profile changes and group-title changes of one user within `profileChangeWindow` (each reaches every
        /// user who sees it), refused or not; more are refused with `rate-limited`. Counted on each node.
        public var maxProfileChangesPerUser: Int = 20
        /// The same for one client address.
        public var maxProfileChangesPerAddress: Int = 100
        /// The window the profile-change counts cover.
        public var profileChangeWindow: Duration = .seconds(3600)
        /// Groups one user creates and additions of members it makes (a request each) within `groupChangeWindow`,
        /// refused or not: each puts others in a group they did not ask for. More are refused with `rate-limited`.
        /// Counted on each node. (How many groups one user may have made at once is the store's
        /// `maxGroupsPerMaker`.)
        public var maxGroupChangesPerUser: Int = 30
        /// The same for one client address.
        public var maxGroupChangesPerAddress: Int = 100
        /// The window the group-change counts cover.
        public var groupChangeWindow: Duration = .seconds(3600)

        public init() {}
    }

    /// The settings of a node that shares its database with other nodes (``CourierServer/init(configuration:store:feed:version:logger:)``).
    public struct Cluster: Sendable {
        /// How often the node reads its online users' cursors from the store: a hint from another node that was
        /// lost (or never sent, with `--fanout poll`) is made up for within this.
        public var pollInterval: Duration = .milliseconds(250)
        /// The most users whose cursors one read asks for; more are read in several.
        public var maxUsersPerPoll: Int = 5_000
        /// The most users whose new events one read asks for when another node says their logs grew (each at most
        /// what its connections have room for, `limits.maxHandedEvents`); more are read in several. 0 reads none:
        /// each connection reads its own.
        public var maxUsersPerFeedRead: Int = 256
        /// The most events one such read asks for, all its users together; more are read in several.
        public var maxEventsPerFeedRead: Int = 1_024
        /// How often the node tells the database it is alive (``nodeLifetime`` more), so that the connections and
        /// password attempts it counts toward the limits that hold across nodes keep counting.
        public var nodeHeartbeatInterval: Duration = .seconds(5)
        /// How long what a node counted keeps counting after its last heartbeat: a node killed, or cut off from the
        /// database, holds its users' places this long at most. The nodes' clocks must agree to well within it.
        public var nodeLifetime: Duration = .seconds(20)
        /// How long a password attempt counts as in flight when its node never says how it ended.
        public var loginInFlightLifetime: Duration = .seconds(60)
        /// The most logins of one user that count their connection in the database at once, on this node; more are
        /// refused with `server-full` (retry) before they ask it: a user's own token sent from a thousand sockets
        /// holds neither the database's lock of that user nor the node's pool connections.
        public var maxOpeningPerUser: Int = 4
        /// The most leases kept that another node's login made yield before this node registered their connections
        /// (a lease whose login then failed stays until newer ones push it out).
        public var maxEarlyYields: Int = 1_024
        /// Whether each conversation's writes (its sends, read marks, recalls, edits and reactions) are committed by
        /// one node, its owner, chosen among the live nodes by rendezvous hashing (docs/LOG-DESIGN.md, "Step 4"): the node that
        /// takes a write from its client forwards it to the owner's forward port and answers with the owner's
        /// outcome. Ownership is a hint, never a lock: while the nodes disagree about an owner, a conversation is
        /// written from two nodes, slower, never wrong. False (the default, until the forward hop costs less than
        /// the turns it saves: docs/BENCHMARKS.md, "Step 11"): every node commits its own clients' writes.
        public var forwardWrites: Bool = false
        /// The address the forward port listens on.
        public var forwardHost: String = "127.0.0.1"
        /// The forward port; 0 takes a free one (the nodes find it in the database).
        public var forwardPort: Int = 0
        /// The host the other nodes dial the forward port at; nil: ``forwardHost``.
        public var forwardAdvertisedHost: String?
        /// How often the node reads which nodes are alive, and where their forward ports are.
        public var routesRefreshInterval: Duration = .seconds(1)
        /// How long a forwarded write may wait for its outcome; then the link to that node is closed and every
        /// write waiting on it fails with `storage-failed` (the client sends it again, under the same id).
        public var forwardTimeout: Duration = .seconds(30)
        /// How long a connection to the forward port has to prove it is a node of the cluster; then it is closed.
        public var forwardHelloTimeout: Duration = .seconds(5)
        /// The largest frame on a forward link, in bytes; a larger one closes the link.
        public var maxForwardFrameBytes: Int = 1 << 20
        /// Forwarded writes one link may have waiting for their commit on this node; past it, the link is not read
        /// until half of them are answered.
        public var maxForwardsInFlight: Int = 8_192
        /// Connections to the forward port at once; one more is closed at once.
        public var maxForwardConnections: Int = 64

        public init() {}
    }

    public init() {}

    /// Limits that protect the server and its other clients from one client.
    public struct Limits: Sendable {
        /// Open connections, the native and compat ports together; one more is closed at once with `server-full`.
        public var maxConnections: Int = 10_000
        /// Connections from one address (an IPv4 address, or an IPv6 /64) that have not logged in yet; one more is
        /// closed at once with `server-full`, so idle sockets from one address cannot take the others' places.
        public var maxUnauthenticatedPerAddress: Int = 128
        /// Connections not logged in yet, all addresses together. Past it, or past `maxConnections`, a new
        /// connection takes the place of the oldest one that has sent nothing yet (closed with `server-full`): sockets
        /// that only hold places cannot keep logins out. A connection whose login is under way is never closed for
        /// room.
        public var maxUnauthenticated: Int = 1_024
        /// Connections closed to make room (``maxUnauthenticated``, ``maxConnections``) that may still be closing at
        /// once; they count until they have ended, and past this a newcomer is refused instead.
        public var maxClosingForRoom: Int = 256
        /// Logged-in connections of one user, all its devices and ports together (and, on PostgreSQL, all the nodes
        /// together); one more token login is answered `server-full` and closed (a stolen token cannot take the
        /// server's connections, nor keep the owner out), while one more password login gets in and the user's
        /// oldest connections yield their places.
        public var maxConnectionsPerUser: Int = 64
        /// Sends a connection may have waiting for their commit; the server reads nothing more from the connection
        /// until one is acknowledged (backpressure, nothing refused).
        public var maxUnackedSends: Int = 256
        /// Sustained sends per second per connection; past it the server holds the next send (reading nothing more
        /// from the connection) until the rate allows it: backpressure that keeps the order, nothing refused.
        public var sendsPerSecond: Double = 2_000
        /// Sends a connection may make at once above the sustained rate.
        public var sendBurst: Double = 4_000
        /// Deliveries per second one user's messages may cause, all its connections together: a message costs one
        /// per member of its conversation (the sender included). Past it (after a burst of `fanoutBurst`) the
        /// server holds that user's next send, reading nothing more from the connection, until the rate has paid
        /// for what was sent: a flood to a large group slows its sender, not everyone else.
        public var fanoutPerSecond: Double = 10_000
        public var fanoutBurst: Double = 20_000
        /// The largest message text, in UTF-8 bytes; more is refused with `text-too-large`.
        public var maxTextBytes: Int = 64 * 1024
        /// A connection that sends nothing (not even a ping) for this long is closed with `idle-timeout`.
        public var idleTimeout: Duration = .seconds(60)
        /// How often clients are told to send a ping (in `Welcome.limits`); a third of the idle timeout.
        public var heartbeatInterval: Duration = .seconds(20)
        /// How long a connection may take to authenticate after connecting.
        public var authTimeout: Duration = .seconds(10)
        /// A write to a client that has stopped reading may wait this long; then the connection is closed with
        /// `slow-consumer`, and the device resyncs from its acknowledged cursor when it comes back.
        public var slowConsumerTimeout: Duration = .seconds(30)
        /// How precisely the deadlines above are kept: each event loop checks its sessions' timers (one wheel per
        /// loop, not a timer per session) this often, so a deadline fires at most this late. Taken between 1 ms and
        /// 10 s.
        public var deadlineResolution: Duration = .milliseconds(100)
        /// The first read buffer of a connection, in bytes: it grows while reads fill it (up to 64 KiB) and shrinks
        /// back, and an idle connection keeps one of about this size, so it is small by default. Taken between 64
        /// bytes and 64 KiB.
        public var initialReadBytes: Int = 256
        /// Bytes the server buffers for a connection before it waits for the client to read (the channel's write
        /// buffer high-water mark). Together with one events page this bounds a connection's memory.
        public var outboundBufferBytes: Int = 256 * 1024
        /// Events per `Events` envelope when syncing or delivering.
        public var eventsPerPage: Int = 64
        /// Fresh events a connection is handed as committed (instead of reading them back from the store), 16
        /// bytes each besides their texts (a group's message is one payload shared by every member); what comes
        /// past this many waiting is read from the store at the connection's own pace, and a connection that is
        /// behind reads the gap before what it holds. 0 reads everything from the store.
        public var maxHandedEvents: Int = 4096
        /// The most bytes those hold for one connection, counted as their texts (a message's body and quote, ids and
        /// names) and 256 bytes an event besides: a client that stops reading pins no more than this of the messages
        /// sent to it.
        public var maxHandedBytes: Int = 1024 * 1024
        /// The most bytes of group events each event loop keeps encoded for the native port, so that a message to
        /// a group is encoded once for the members whose connections share the loop (0: each is encoded for each).
        public var encodedEventsCacheBytes: Int = 4 * 1024 * 1024
        /// The most text bytes in one `Events` envelope; a page of large texts goes out in several. Keep it well
        /// under the native frame limit (1 MiB).
        public var maxEventsBytes: Int = 256 * 1024
        /// The most messages one history page returns.
        public var maxHistoryPage: Int = 200
        /// The most bytes of one answer that lists (a history page, unread counts): fewer entries are sent, with
        /// `more` set, so that no answer comes near the native frame limit (1 MiB). At least one entry always goes.
        public var maxAnswerBytes: Int = 512 * 1024
        /// Messages stored before the search index existed that one transaction indexes, while the server serves
        /// (``CourierDatabase/indexPending(limit:)``); the next batch waits for the writes queued meanwhile.
        public var searchIndexBatch: Int = 500
        /// What a client is told to wait (`retry_after_ms`) when a write or a login failed because the database
        /// could not be reached (`storage-failed`).
        public var storageRetryAfter: Duration = .seconds(2)
        /// Failed logins per user name within `loginWindow`, attempts still being checked counted as failures,
        /// before more are refused with `throttled` (before any password is hashed).
        public var maxFailedLoginsPerUser: Int = 5
        /// Failed logins (password or token) per client address (an IPv4 address, or an IPv6 /64) within
        /// `loginWindow`, attempts still being checked counted as failures, before more are refused with `throttled`
        /// (before any password is hashed).
        public var maxFailedLoginsPerAddress: Int = 20
        /// The window the failed-login counts cover.
        public var loginWindow: Duration = .seconds(60)
        /// How often the server looks for changes made by the admin commands (removed users, revoked devices,
        /// group changes).
        public var changePollInterval: Duration = .milliseconds(250)

        public init() {}
    }

    /// The HTTP port (`/health`, `/metrics`, `/media`): its connections are counted apart from the native and
    /// compat ports', so that one port cannot take the file descriptors the others need.
    public struct HTTP: Sendable {
        /// Open HTTP connections; past it the server accepts no more until one closes (they wait in the listen
        /// backlog, then are refused by the system).
        public var maxConnections: Int = 1_000
        /// Open HTTP connections from one address (an IPv4 address, or an IPv6 /64); one more is closed at once, so
        /// one client cannot take the port's places.
        public var maxConnectionsPerAddress: Int = 100
        /// A connection with no request in progress for this long is closed. The timer restarts only when a request
        /// head has arrived whole or a response has ended, so it is also the time a request head may take to
        /// arrive (a client sending one byte at a time cannot hold a connection longer).
        public var idleTimeout: Duration = .seconds(20)
        /// `/health` asks the database at most this often, however often it is asked (one question at a time).
        public var healthProbeInterval: Duration = .seconds(1)
        /// How long `/health` waits for the database's answer before it says the database cannot be reached.
        public var healthProbeTimeout: Duration = .seconds(2)

        public init() {}
    }

    /// Descriptors kept free of connections: the database, media files, logs. With the ports' connection limits,
    /// this must fit in the process's open-file limit; ``CourierServer`` lowers the connection limits at start
    /// (saying so in the log) when it does not.
    public var reservedDescriptors: Int = 512

    /// Media messages: their bytes live in the data folder's `media/` blob store.
    public struct Media: Sendable {
        /// The largest media file, in bytes; a larger one is refused with `media-too-large` before any byte is taken.
        public var maxMediaBytes: Int64 = 2 * 1024 * 1024 * 1024
        /// The most bytes of media one user may have stored (each file counted once, however often sent); an upload
        /// past it is refused with `quota-exceeded`.
        public var quotaBytesPerUser: Int64 = 20 * 1024 * 1024 * 1024
        /// Uploads one user may have in progress (started, not finished, not yet removed as abandoned); one more is
        /// refused with `quota-exceeded`.
        public var maxUploadsPerUser: Int = 32
        /// An upload that has not grown for this long is abandoned and deleted (a client may resume before then).
        public var abandonedUploadAge: Duration = .seconds(24 * 3600)
        /// How often abandoned uploads are looked for, and stored files nothing names any more collected.
        public var cleanupInterval: Duration = .seconds(3600)
        /// A stored file nothing names (no message carries it, no profile shows it, no upload of it is in progress)
        /// is deleted once it and every upload record of it are this old: an upload finished and not sent (or
        /// refused at its record), a recalled message's file, a removed user's unsent files, a profile picture
        /// replaced. Younger, it waits for the send that may follow its upload.
        public var unreferencedMediaAge: Duration = .seconds(24 * 3600)
        /// The bytes a client may send on an upload stream before the server grants more (`windowUpdate`): the most
        /// upload bytes that can sit ahead of a text on the way in.
        public var uploadWindowBytes: Int = 1024 * 1024
        /// The largest `mediaChunk` payload, both ways; also the server's read size when it streams media out.
        public var maxChunkBytes: Int = 256 * 1024
        /// The window a fetch stream starts with when the client names none.
        public var defaultFetchWindowBytes: Int = 1024 * 1024
        /// The largest window a client may grant a fetch stream (at its start or by `windowUpdate`s): bounds the
        /// media bytes the server queues for one connection.
        public var maxFetchWindowBytes: Int = 16 * 1024 * 1024
        /// Upload and fetch streams one connection may have open at once; one more is refused with `invalid-request`.
        public var maxStreamsPerConnection: Int = 16
        /// The most upload bytes the server holds in memory, all uploads together, while it gathers them into the
        /// larger pieces shared storage prefers (PostgreSQL's 4 MiB), and while such a piece is written; past it,
        /// what an upload gathered is stored at once, in a smaller piece. Uploads that stop part way cannot hold
        /// memory beyond it.
        public var maxPendingUploadBytes: Int = 64 * 1024 * 1024
        /// How long a ticket from `POST /media/<sha256>/ticket` opens its file (`GET /media/<sha256>?ticket=`): what
        /// a player's or a download's URL carries instead of a device token. A player that seeks past it asks for
        /// another.
        public var ticketLifetime: Duration = .seconds(600)

        public init() {}
    }

    /// The compat port's framing.
    public struct Compat: Sendable {
        /// The end marker after each packet, or nil (the default) for none, as the notes' demo client sends.
        public var endMarker: [UInt8]? = nil
        /// The largest header, in bytes.
        public var maxHeaderBytes: Int = 16 * 1024

        public init() {}
    }
}

extension ServerConfiguration {
    /// A server TLS configuration (TLS 1.2 or later) from PEM files: the certificate chain (leaf first) and its
    /// private key.
    ///
    /// - Throws: ``TLSFileError`` naming the file that cannot be read or parsed.
    public static func tls(certificateChainFile: String, privateKeyFile: String) throws -> TLSConfiguration {
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificateChainFile)
        } catch {
            throw TLSFileError(path: certificateChainFile, what: "certificate chain", underlying: "\(error)")
        }
        guard !chain.isEmpty else {
            throw TLSFileError(path: certificateChainFile, what: "certificate chain", underlying: "no certificate")
        }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: privateKeyFile, format: .pem)
        } catch {
            throw TLSFileError(path: privateKeyFile, what: "private key", underlying: "\(error)")
        }
        return .makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
    }

    /// A TLS certificate or key file that cannot be used.
    public struct TLSFileError: Error, CustomStringConvertible {
        public var path: String
        public var what: String
        public var underlying: String

        public var description: String { "cannot use \(self.path) as the TLS \(self.what): \(self.underlying)" }
    }
}
