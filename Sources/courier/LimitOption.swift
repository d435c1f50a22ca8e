import ArgumentParser
import CourierServer
import CourierStore
import CourierWire

/// `--limit NAME=VALUE`: sets any of the server's limits by name (docs/PROTOCOL.md, "Limits").
enum LimitOption {
    /// Each limit's name on the command line, and how to set it.
    static let setters: [(name: String, apply: @Sendable (inout ServerConfiguration, String) throws -> Void)] = [
        ("max-connections", { $0.limits.maxConnections = try int($1) }),
        ("max-unauthenticated", { $0.limits.maxUnauthenticated = try int($1) }),
        ("max-closing-for-room", { $0.limits.maxClosingForRoom = try count($1) }),
        ("max-unauthenticated-per-address", { $0.limits.maxUnauthenticatedPerAddress = try int($1) }),
        ("max-connections-per-user", { $0.limits.maxConnectionsPerUser = try int($1) }),
        ("http-max-connections", { $0.http.maxConnections = try int($1) }),
        ("http-max-connections-per-address", { $0.http.maxConnectionsPerAddress = try int($1) }),
        ("http-idle-timeout", { $0.http.idleTimeout = try duration($1) }),
        ("websocket-max-message-bytes", { $0.webSocket.maxMessageBytes = try bytes($1) }),
        ("health-probe-interval", { $0.http.healthProbeInterval = try duration($1) }),
        ("health-probe-timeout", { $0.http.healthProbeTimeout = try duration($1) }),
        ("reserved-descriptors", { $0.reservedDescriptors = try int($1) }),
        ("max-unacked-sends", { $0.limits.maxUnackedSends = try int($1) }),
        ("sends-per-second", { $0.limits.sendsPerSecond = try double($1) }),
        ("send-burst", { $0.limits.sendBurst = try double($1) }),
        ("fanout-per-second", { $0.limits.fanoutPerSecond = try double($1) }),
        ("fanout-burst", { $0.limits.fanoutBurst = try double($1) }),
        ("max-text-bytes", { $0.limits.maxTextBytes = try bytes($1) }),
        ("idle-timeout", { $0.limits.idleTimeout = try duration($1) }),
        ("heartbeat-interval", { $0.limits.heartbeatInterval = try seconds($1) }),
        ("auth-timeout", { $0.limits.authTimeout = try duration($1) }),
        ("slow-consumer-timeout", { $0.limits.slowConsumerTimeout = try duration($1) }),
        ("deadline-resolution", { $0.limits.deadlineResolution = try duration($1) }),
        ("initial-read-bytes", { $0.limits.initialReadBytes = try bytes($1) }),
        ("outbound-buffer-bytes", { $0.limits.outboundBufferBytes = try bytes($1) }),
        ("events-per-page", { $0.limits.eventsPerPage = try int($1) }),
        ("max-handed-events", { $0.limits.maxHandedEvents = try count($1) }),
        ("max-handed-bytes", { $0.limits.maxHandedBytes = try bytes($1) }),
        ("encoded-events-cache-bytes", { $0.limits.encodedEventsCacheBytes = try bytes($1) }),
        ("max-events-bytes", { $0.limits.maxEventsBytes = try bytes($1) }),
        ("max-history-page", { $0.limits.maxHistoryPage = try int($1) }),
        ("max-answer-bytes", { $0.limits.maxAnswerBytes = try bytes($1) }),
        ("search-index-batch", { $0.limits.searchIndexBatch = try int($1) }),
        ("search-index-deferred", { $0.store.searchIndex.deferred = try flag($1) }),
        ("search-index-delay", { $0.store.searchIndex.delay = try duration($1) }),
        ("search-index-max-batch", { $0.store.searchIndex.maxBatch = try int($1) }),
        ("search-index-max-queued", { $0.store.searchIndex.maxQueued = try count($1) }),
        ("search-index-max-queued-bytes", { $0.store.searchIndex.maxQueuedBytes = try bytes($1) }),
        ("search-index-sweep-interval", { $0.store.searchIndex.sweepInterval = try duration($1) }),
        ("postgres-random-page-cost", { $0.store.postgresRandomPageCost = try pageCost($1) }),
        ("sqlite-max-carried-rows", { $0.store.sqliteMaxCarriedRows = try count($1) }),
        ("max-search-scan", { $0.store.limits.maxSearchScan = try int($1) }),
        ("max-search-page", { $0.store.limits.maxSearchPage = try int($1) }),
        ("max-failed-logins-per-user", { $0.limits.maxFailedLoginsPerUser = try int($1) }),
        ("max-failed-logins-per-address", { $0.limits.maxFailedLoginsPerAddress = try int($1) }),
        ("login-window", { $0.limits.loginWindow = try duration($1) }),
        ("max-sign-ups-per-address", { $0.accounts.maxSignUpsPerAddress = try int($1) }),
        ("max-sign-ups-in-all", { $0.accounts.maxSignUpsInAll = try int($1) }),
        ("sign-up-window", { $0.accounts.signUpWindow = try duration($1) }),
        ("max-lookups-per-user", { $0.accounts.maxLookupsPerUser = try int($1) }),
        ("max-lookups-per-address", { $0.accounts.maxLookupsPerAddress = try int($1) }),
        ("lookup-window", { $0.accounts.lookupWindow = try duration($1) }),
        ("max-profile-changes-per-user", { $0.accounts.maxProfileChangesPerUser = try int($1) }),
        ("max-profile-changes-per-address", { $0.accounts.maxProfileChangesPerAddress = try int($1) }),
        ("profile-change-window", { $0.accounts.profileChangeWindow = try duration($1) }),
        ("max-group-changes-per-user", { $0.accounts.maxGroupChangesPerUser = try int($1) }),
        ("max-group-changes-per-address", { $0.accounts.maxGroupChangesPerAddress = try int($1) }),
        ("group-change-window", { $0.accounts.groupChangeWindow = try duration($1) }),
        ("max-groups-per-maker", { $0.store.limits.maxGroupsPerMaker = try int($1) }),
        ("max-blocks-per-user", { $0.store.limits.maxBlocksPerUser = try int($1) }),
        ("max-pins-per-conversation", { $0.store.limits.maxPinsPerConversation = try int($1) }),
        ("max-reactors-listed", { $0.store.limits.maxReactorsListed = try int($1) }),
        ("max-display-name-characters", { $0.store.limits.maxDisplayNameCharacters = try int($1) }),
        ("max-display-name-bytes", { $0.store.limits.maxDisplayNameBytes = try int($1) }),
        ("max-avatar-bytes", { $0.store.limits.maxAvatarBytes = try bytes64($1) }),
        ("max-thumbnail-bytes", { $0.store.limits.maxThumbnailBytes = try bytes64($1) }),
        ("min-password-characters", { $0.store.limits.minPasswordCharacters = try int($1) }),
        ("max-password-bytes", { $0.store.limits.maxPasswordBytes = try int($1) }),
        ("password-threads", { $0.store.passwordThreads = try int($1, atMost: StoreSettings.maxPasswordThreads) }),
        ("max-queued-password-checks", { $0.store.maxQueuedPasswordChecks = try int($1) }),
        ("change-poll-interval", { $0.limits.changePollInterval = try duration($1) }),
        ("cluster-poll-interval", { $0.cluster.pollInterval = try duration($1) }),
        ("node-heartbeat-interval", { $0.cluster.nodeHeartbeatInterval = try duration($1) }),
        ("node-lifetime", { $0.cluster.nodeLifetime = try duration($1) }),
        ("max-opening-per-user", { $0.cluster.maxOpeningPerUser = try int($1) }),
        ("max-early-yields", { $0.cluster.maxEarlyYields = try count($1) }),
        ("forward-writes", { $0.cluster.forwardWrites = try flag($1) }),
        ("forward-port", { $0.cluster.forwardPort = try int($1, atMost: 65_535) }),
        ("routes-refresh-interval", { $0.cluster.routesRefreshInterval = try duration($1) }),
        ("forward-timeout", { $0.cluster.forwardTimeout = try duration($1) }),
        ("forward-hello-timeout", { $0.cluster.forwardHelloTimeout = try duration($1) }),
        ("max-forward-frame-bytes", { $0.cluster.maxForwardFrameBytes = try bytes($1) }),
        ("max-forwards-in-flight", { $0.cluster.maxForwardsInFlight = try int($1) }),
        ("max-forward-connections", { $0.cluster.maxForwardConnections = try int($1) }),
        ("token-lifetime", { $0.store.limits.tokenLifetime = try seconds($1) }),
        ("recall-window", { $0.store.limits.recallWindow = try seconds($1) }),
        ("max-receipt-marks", { $0.store.limits.maxReceiptMarks = try count($1) }),
        ("edit-window", { $0.store.limits.editWindow = try seconds($1) }),
        ("max-edits-per-message", { $0.store.limits.maxEditsPerMessage = try count($1) }),
        ("max-versions-per-read", { $0.store.limits.maxVersionsPerRead = try int($1) }),
        ("max-reaction-keys", { $0.store.limits.maxReactionKeysPerMessage = try count($1) }),
        ("max-reactions-per-user", { $0.store.limits.maxReactionsPerUser = try count($1) }),
        ("max-devices-per-user", { $0.store.limits.maxDevicesPerUser = try int($1) }),
        ("max-push-subscriptions-per-device", { $0.store.limits.maxPushSubscriptionsPerDevice = try int($1) }),
        ("max-push-subscriptions-per-user", { $0.store.limits.maxPushSubscriptionsPerUser = try int($1) }),
        ("max-push-endpoint-bytes", { $0.store.limits.maxPushEndpointBytes = try int($1, atMost: 2048) }),
        ("max-push-app-id-bytes", { $0.store.limits.maxPushAppIDBytes = try int($1, atMost: 256) }),
        ("max-push-key-bytes", { $0.store.limits.maxPushKeyBytes = try int($1, atMost: 4096) }),
        ("push-ttl", { $0.push.ttlSeconds = try int($1, atMost: 28 * 86_400) }),
        ("push-lease", { $0.push.lease = try duration($1) }),
        ("push-batch", { $0.push.batch = try int($1) }),
        ("max-concurrent-pushes", { $0.push.maxConcurrentPushes = try int($1) }),
        ("push-poll-interval", { $0.push.pollInterval = try duration($1) }),
        ("push-connect-timeout", { $0.push.connectTimeout = try duration($1) }),
        ("push-request-timeout", { $0.push.requestTimeout = try duration($1) }),
        ("max-push-response-bytes", { $0.push.maxResponseBytes = try bytes($1) }),
        ("push-retry-base", { $0.push.retryBase = try duration($1) }),
        ("push-retry-cap", { $0.push.retryCap = try duration($1) }),
        ("max-push-attempts", { $0.push.maxAttempts = try int($1) }),
        ("max-push-claims", { $0.push.maxClaims = try int($1) }),
        ("api-requests-per-second", { $0.api.requestsPerSecond = try double($1) }),
        ("api-request-burst", { $0.api.requestBurst = try double($1) }),
        ("api-requests-per-second-per-address", { $0.api.requestsPerSecondPerAddress = try double($1) }),
        ("api-request-burst-per-address", { $0.api.requestBurstPerAddress = try double($1) }),
        ("max-poll-seconds", { $0.api.maxPollSeconds = try int($1, atMost: 3600) }),
        ("max-updates-per-poll", { $0.api.maxUpdatesPerPoll = try int($1, atMost: 10_000) }),
        ("max-polls-per-user", { $0.api.maxPollsPerUser = try int($1) }),
        ("max-api-body-bytes", { $0.api.maxBodyBytes = try bytes($1) }),
        ("webhook-lease", { $0.api.webhookLease = try duration($1) }),
        ("webhook-poll-interval", { $0.api.webhookPollInterval = try duration($1) }),
        ("webhook-batch", { $0.api.webhookBatch = try int($1) }),
        ("max-concurrent-webhooks", { $0.api.maxConcurrentWebhooks = try int($1) }),
        ("webhook-retry-base", { $0.api.webhookRetryBase = try duration($1) }),
        ("webhook-retry-cap", { $0.api.webhookRetryCap = try duration($1) }),
        ("webhook-disable-after", { $0.api.webhookDisableAfter = try duration($1) }),
        ("hook-posts-per-second", { $0.api.hookPostsPerSecond = try double($1) }),
        ("hook-post-burst", { $0.api.hookPostBurst = try double($1) }),
        ("max-hook-body-bytes", { $0.api.maxHookBodyBytes = try bytes($1) }),
        ("max-batch-requests", { $0.commit.maxBatchRequests = try int($1) }),
        ("compat-max-header-bytes", { $0.compat.maxHeaderBytes = try bytes($1) }),
        ("max-media-bytes", { $0.media.maxMediaBytes = try bytes64($1) }),
        ("media-quota-bytes", { $0.media.quotaBytesPerUser = try bytes64($1) }),
        ("max-uploads-per-user", { $0.media.maxUploadsPerUser = try int($1) }),
        ("abandoned-upload-age", { $0.media.abandonedUploadAge = try seconds($1) }),
        ("upload-cleanup-interval", { $0.media.cleanupInterval = try duration($1) }),
        ("unreferenced-media-age", { $0.media.unreferencedMediaAge = try seconds($1) }),
        ("upload-window-bytes", { $0.media.uploadWindowBytes = try bytes($1) }),
        ("max-chunk-bytes", { $0.media.maxChunkBytes = try bytes($1) }),
        ("default-fetch-window-bytes", { $0.media.defaultFetchWindowBytes = try bytes($1) }),
        ("max-fetch-window-bytes", { $0.media.maxFetchWindowBytes = try bytes($1) }),
        ("max-streams-per-connection", { $0.media.maxStreamsPerConnection = try int($1) }),
        ("max-pending-upload-bytes", { $0.media.maxPendingUploadBytes = try bytes($1) }),
        ("media-ticket-lifetime", { $0.media.ticketLifetime = try duration($1) }),
    ]

    static var help: String {
        "Set a limit, NAME=VALUE, repeatable (docs/PROTOCOL.md, \"Limits\", says what each does). Names: "
            + "\(setters.map(\.name).joined(separator: ", ")). Sizes take K, M, G or T (64K, 2G); durations ms, s, m, "
            + "h or d (250ms, 30s, 2m, 12h, 7d; a bare number is seconds)."
    }

    static func apply(_ assignments: [String], to configuration: inout ServerConfiguration) throws {
        for assignment in assignments {
            let parts = assignment.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2, let setter = setters.first(where: { $0.name == parts[0] }) else {
                throw ValidationError("--limit \(assignment): expected NAME=VALUE with a NAME from --help")
            }
            do {
                try setter.apply(&configuration, parts[1])
            } catch {
                throw ValidationError("--limit \(assignment): \(error)")
            }
        }
        try Self.checkFit(configuration)
    }

    struct BadValue: Error, CustomStringConvertible {
        var description: String
    }

    /// The largest count any limit takes: far past what one server holds, and small enough that the server's
    /// arithmetic on a limit (a sum of two, four times one) never overflows.
    static let largestCount = 1_000_000_000
    /// The largest size any limit takes: 1 PiB.
    static let largestBytes: Int64 = 1 << 50

    static func int(_ text: String) throws -> Int {
        guard let value = Int(text), value > 0 else { throw BadValue(description: "\(text) is not a positive integer") }
        return try Self.bounded(value, text)
    }

    /// A positive count with a bound of its own (threads, say, which the server would start).
    static func int(_ text: String, atMost largest: Int) throws -> Int {
        let value = try Self.int(text)
        guard value <= largest else {
            throw BadValue(description: "\(text) is more than it takes (at most \(largest))")
        }
        return value
    }

    /// 1 for on, 0 for off.
    static func flag(_ text: String) throws -> Bool {
        switch text {
        case "1": return true
        case "0": return false
        default: throw BadValue(description: "\(text) is neither 1 (on) nor 0 (off)")
        }
    }

    /// A count that may be zero (to turn something off).
    static func count(_ text: String) throws -> Int {
        guard let value = Int(text), value >= 0 else { throw BadValue(description: "\(text) is not 0 or more") }
        return try Self.bounded(value, text)
    }

    private static func bounded(_ value: Int, _ text: String) throws -> Int {
        guard value <= Self.largestCount else {
            throw BadValue(description: "\(text) is more than any limit takes (at most \(Self.largestCount))")
        }
        return value
    }

    /// A size in bytes: digits, with K, M, G or T for binary multiples.
    static func bytes64(_ text: String) throws -> Int64 {
        guard let value = ByteSize.value(text) else {
            throw BadValue(description: "\(text) is not a size like 65536, 64K, 100M or 2G")
        }
        guard value <= Self.largestBytes else {
            throw BadValue(description: "\(text) is more than any size limit takes (at most 1024T)")
        }
        return value
    }

    static func bytes(_ text: String) throws -> Int {
        let value = try Self.bytes64(text)
        guard let fits = Int(exactly: value) else { throw BadValue(description: "\(text) is too large") }
        return fits
    }

    /// A page cost for PostgreSQL's planner: a positive number, or 0 for the database's own (nil).
    static func pageCost(_ text: String) throws -> Double? {
        if text == "0" { return nil }
        guard let value = Double(text), value.isFinite, value > 0, value <= 1_000 else {
            throw BadValue(description: "\(text) is not a page cost (a positive number up to 1000, or 0)")
        }
        return value
    }

    static func double(_ text: String) throws -> Double {
        guard let value = Double(text), value.isFinite, value > 0 else {
            throw BadValue(description: "\(text) is not a positive number")
        }
        guard value <= Double(Self.largestCount) else {
            throw BadValue(description: "\(text) is more than any rate takes (at most \(Self.largestCount))")
        }
        return value
    }

    /// The longest duration any flag takes: 100 years.
    static let longestDuration: Duration = .seconds(36_500 * 86_400)

    /// A duration as every flag writes it: a number (decimals allowed) with ms, s, m, h or d, or bare for seconds;
    /// longer than zero, at most ``longestDuration``, in whole milliseconds.
    static func duration(_ text: String) throws -> Duration {
        let scales: [(String, Double)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)]
        let (digits, scale) =
            scales.first { text.hasSuffix($0.0) }.map { (String(text.dropLast($0.0.count)), $0.1) } ?? (text, 1000)
        guard let value = Double(digits), value.isFinite, !digits.isEmpty,
            digits.allSatisfy({ $0.isNumber || $0 == "." })
        else {
            throw BadValue(description: "\(text) is not a duration like 250ms, 30s, 2m, 12h or 7d")
        }
        let milliseconds = value * scale
        guard milliseconds >= 1 else { throw BadValue(description: "\(text) is not longer than zero") }
        guard milliseconds <= Double(Self.longestDuration.components.seconds) * 1000 else {
            throw BadValue(description: "\(text) is too long a duration (at most 100 years)")
        }
        guard milliseconds == milliseconds.rounded() else {
            throw BadValue(description: "\(text) is not a whole number of milliseconds")
        }
        return .milliseconds(Int64(milliseconds))
    }

    /// A duration the server counts in whole seconds (token lifetimes, the recall window, …).
    static func seconds(_ text: String) throws -> Duration {
        let duration = try Self.duration(text)
        guard duration.components.attoseconds == 0 else {
            throw BadValue(description: "\(text) is not a whole number of seconds (this limit counts seconds)")
        }
        return duration
    }

    /// Limits that must fit the native frame (1 MiB of payload), checked once all are set.
    static func checkFit(_ configuration: ServerConfiguration) throws {
        let frame = NativeFraming.Configuration().maxFramePayloadBytes
        if configuration.media.maxChunkBytes > frame {
            throw ValidationError("--limit max-chunk-bytes must be at most \(frame) (a chunk travels in one frame)")
        }
        for (name, value) in [
            ("max-events-bytes", configuration.limits.maxEventsBytes),
            ("max-answer-bytes", configuration.limits.maxAnswerBytes),
        ] where value > frame * 3 / 4 {
            throw ValidationError(
                "--limit \(name) must be at most \(frame * 3 / 4) (an answer travels in one frame of \(frame) bytes)"
            )
        }
    }
}

/// Sizes on the command line: digits, with K, M, G or T for binary multiples (`512K`, `100M`, `2G`).
enum ByteSize {
    /// The size, or nil when the text is not a positive size that fits 64 bits.
    static func value(_ text: String) -> Int64? {
        let units: [Character: Int64] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40]
        var digits = text.uppercased()
        var scale: Int64 = 1
        if let last = digits.last, let unit = units[last] {
            scale = unit
            digits.removeLast()
        }
        guard let value = Int64(digits), value > 0, value <= Int64.max / scale else { return nil }
        return value * scale
    }

    /// The size an option gives, or a validation error naming the option.
    static func parse(_ text: String, option: String) throws -> Int64 {
        guard let value = Self.value(text) else {
            throw ValidationError("\(option) \(text): expected a positive size such as 1048576, 512K, 100M or 2G")
        }
        return value
    }
}

/// A duration on the command line, written as everywhere in Courier (``LimitOption/duration(_:)``): `250ms`, `30s`,
/// `2m`, `12h`, `7d`, `1.5s`; a bare number is seconds.
struct DurationValue: ExpressibleByArgument, CustomStringConvertible {
    var duration: Duration

    init(_ duration: Duration) {
        self.duration = duration
    }

    init?(argument: String) {
        guard let duration = try? LimitOption.duration(argument) else { return nil }
        self.duration = duration
    }

    var seconds: Double {
        Double(self.duration.components.seconds) + Double(self.duration.components.attoseconds) / 1e18
    }

    /// As it would be written: `60s`, `250ms`, `5m`.
    var description: String {
        let milliseconds = self.duration.wholeMilliseconds
        for (suffix, scale) in [("d", Int64(86_400_000)), ("h", 3_600_000), ("m", 60_000), ("s", 1000)]
        where milliseconds >= scale && milliseconds % scale == 0 {
            return "\(milliseconds / scale)\(suffix)"
        }
        return "\(milliseconds)ms"
    }

    var defaultValueDescription: String { self.description }
}
