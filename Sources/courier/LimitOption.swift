import ArgumentParser
import CourierServer
import CourierStore
import CourierWire

/// `--limit NAME=VALUE`: sets any of the server's limits by name (docs/PROTOCOL.md, "Limits").
enum LimitOption {
    /// Each limit: its name on the command line, where it lives, and how to read (and show) its value.
    static let all: [Limit] = [
        Limit("max-connections", \.limits.maxConnections) { try int($0) },
        Limit("max-unauthenticated", \.limits.maxUnauthenticated) { try int($0) },
        Limit("max-closing-for-room", \.limits.maxClosingForRoom) { try count($0) },
        Limit("max-unauthenticated-per-address", \.limits.maxUnauthenticatedPerAddress) { try int($0) },
        Limit("max-connections-per-user", \.limits.maxConnectionsPerUser) { try int($0) },
        Limit("http-max-connections", \.http.maxConnections) { try int($0) },
        Limit("http-max-connections-per-address", \.http.maxConnectionsPerAddress) { try int($0) },
        Limit("http-idle-timeout", \.http.idleTimeout) { try duration($0) },
        Limit("websocket-max-message-bytes", \.webSocket.maxMessageBytes) { try bytes($0) },
        Limit("health-probe-interval", \.http.healthProbeInterval) { try duration($0) },
        Limit("health-probe-timeout", \.http.healthProbeTimeout) { try duration($0) },
        Limit("reserved-descriptors", \.reservedDescriptors) { try int($0) },
        Limit("max-unacked-sends", \.limits.maxUnackedSends) { try int($0) },
        Limit("sends-per-second", \.limits.sendsPerSecond) { try double($0) },
        Limit("send-burst", \.limits.sendBurst) { try double($0) },
        Limit("fanout-per-second", \.limits.fanoutPerSecond) { try double($0) },
        Limit("fanout-burst", \.limits.fanoutBurst) { try double($0) },
        Limit("max-text-bytes", \.limits.maxTextBytes) { try bytes($0) },
        Limit("idle-timeout", \.limits.idleTimeout) { try duration($0) },
        Limit("heartbeat-interval", \.limits.heartbeatInterval) { try seconds($0) },
        Limit("auth-timeout", \.limits.authTimeout) { try duration($0) },
        Limit("slow-consumer-timeout", \.limits.slowConsumerTimeout) { try duration($0) },
        Limit("deadline-resolution", \.limits.deadlineResolution) { try duration($0) },
        Limit("initial-read-bytes", \.limits.initialReadBytes) { try bytes($0) },
        Limit("outbound-buffer-bytes", \.limits.outboundBufferBytes) { try bytes($0) },
        Limit("events-per-page", \.limits.eventsPerPage) { try int($0) },
        Limit("max-handed-events", \.limits.maxHandedEvents) { try count($0) },
        Limit("max-handed-bytes", \.limits.maxHandedBytes) { try bytes($0) },
        Limit("encoded-events-cache-bytes", \.limits.encodedEventsCacheBytes) { try bytes($0) },
        Limit("max-events-bytes", \.limits.maxEventsBytes) { try bytes($0) },
        Limit("max-history-page", \.limits.maxHistoryPage) { try int($0) },
        Limit("max-answer-bytes", \.limits.maxAnswerBytes) { try bytes($0) },
        Limit("search-index-batch", \.limits.searchIndexBatch) { try int($0) },
        Limit("search-index-deferred", \.store.searchIndex.deferred) { $0 == "auto" ? nil : try flag($0) },
        Limit("search-index-delay", \.store.searchIndex.delay) { try duration($0) },
        Limit("search-index-max-batch", \.store.searchIndex.maxBatch) { try int($0) },
        Limit("search-index-max-queued", \.store.searchIndex.maxQueued) { try count($0) },
        Limit("search-index-max-queued-bytes", \.store.searchIndex.maxQueuedBytes) { try bytes($0) },
        Limit("search-index-sweep-interval", \.store.searchIndex.sweepInterval) { try duration($0) },
        Limit("postgres-random-page-cost", \.store.postgresRandomPageCost) { try pageCost($0) },
        Limit("sqlite-max-carried-rows", \.store.sqliteMaxCarriedRows) { try count($0) },
        Limit("max-search-scan", \.store.limits.maxSearchScan) { try int($0) },
        Limit("max-search-page", \.store.limits.maxSearchPage) { try int($0) },
        Limit("max-failed-logins-per-user", \.limits.maxFailedLoginsPerUser) { try int($0) },
        Limit("max-failed-logins-per-address", \.limits.maxFailedLoginsPerAddress) { try int($0) },
        Limit("login-window", \.limits.loginWindow) { try duration($0) },
        Limit("max-sign-ups-per-address", \.accounts.maxSignUpsPerAddress) { try int($0) },
        Limit("max-sign-ups-in-all", \.accounts.maxSignUpsInAll) { try int($0) },
        Limit("sign-up-window", \.accounts.signUpWindow) { try duration($0) },
        Limit("max-lookups-per-user", \.accounts.maxLookupsPerUser) { try int($0) },
        Limit("max-lookups-per-address", \.accounts.maxLookupsPerAddress) { try int($0) },
        Limit("lookup-window", \.accounts.lookupWindow) { try duration($0) },
        Limit("max-profile-changes-per-user", \.accounts.maxProfileChangesPerUser) { try int($0) },
        Limit("max-profile-changes-per-address", \.accounts.maxProfileChangesPerAddress) { try int($0) },
        Limit("profile-change-window", \.accounts.profileChangeWindow) { try duration($0) },
        Limit("max-group-changes-per-user", \.accounts.maxGroupChangesPerUser) { try int($0) },
        Limit("max-group-changes-per-address", \.accounts.maxGroupChangesPerAddress) { try int($0) },
        Limit("group-change-window", \.accounts.groupChangeWindow) { try duration($0) },
        Limit("max-groups-per-maker", \.store.limits.maxGroupsPerMaker) { try int($0) },
        Limit("max-blocks-per-user", \.store.limits.maxBlocksPerUser) { try int($0) },
        Limit("max-pins-per-conversation", \.store.limits.maxPinsPerConversation) { try int($0) },
        Limit("max-reactors-listed", \.store.limits.maxReactorsListed) { try int($0) },
        Limit("max-display-name-characters", \.store.limits.maxDisplayNameCharacters) { try int($0) },
        Limit("max-display-name-bytes", \.store.limits.maxDisplayNameBytes) { try int($0) },
        Limit("max-avatar-bytes", \.store.limits.maxAvatarBytes) { try bytes64($0) },
        Limit("max-thumbnail-bytes", \.store.limits.maxThumbnailBytes) { try bytes64($0) },
        Limit("min-password-characters", \.store.limits.minPasswordCharacters) { try int($0) },
        Limit("max-password-bytes", \.store.limits.maxPasswordBytes) { try int($0) },
        Limit("password-threads", \.store.passwordThreads) { try int($0, atMost: StoreSettings.maxPasswordThreads) },
        Limit("max-queued-password-checks", \.store.maxQueuedPasswordChecks) { try int($0) },
        Limit("change-poll-interval", \.limits.changePollInterval) { try duration($0) },
        Limit("cluster-poll-interval", \.cluster.pollInterval) { try duration($0) },
        Limit("node-heartbeat-interval", \.cluster.nodeHeartbeatInterval) { try duration($0) },
        Limit("node-lifetime", \.cluster.nodeLifetime) { try duration($0) },
        Limit("max-opening-per-user", \.cluster.maxOpeningPerUser) { try int($0) },
        Limit("max-early-yields", \.cluster.maxEarlyYields) { try count($0) },
        Limit("forward-writes", \.cluster.forwardWrites) { try flag($0) },
        Limit("forward-port", \.cluster.forwardPort) { try count($0, atMost: 65_535) },
        Limit("routes-refresh-interval", \.cluster.routesRefreshInterval) { try duration($0) },
        Limit("forward-timeout", \.cluster.forwardTimeout) { try duration($0) },
        Limit("forward-hello-timeout", \.cluster.forwardHelloTimeout) { try duration($0) },
        Limit("max-forward-frame-bytes", \.cluster.maxForwardFrameBytes) { try bytes($0) },
        Limit("max-forwards-in-flight", \.cluster.maxForwardsInFlight) { try int($0) },
        Limit("max-forward-connections", \.cluster.maxForwardConnections) { try int($0) },
        Limit("token-lifetime", \.store.limits.tokenLifetime) { try seconds($0) },
        Limit("recall-window", \.store.limits.recallWindow) { try seconds($0) },
        Limit("max-receipt-marks", \.store.limits.maxReceiptMarks) { try count($0) },
        Limit("edit-window", \.store.limits.editWindow) { try seconds($0) },
        Limit("max-edits-per-message", \.store.limits.maxEditsPerMessage) { try count($0) },
        Limit("max-versions-per-read", \.store.limits.maxVersionsPerRead) { try int($0) },
        Limit("max-reaction-keys", \.store.limits.maxReactionKeysPerMessage) { try count($0) },
        Limit("max-reactions-per-user", \.store.limits.maxReactionsPerUser) { try count($0) },
        Limit("max-devices-per-user", \.store.limits.maxDevicesPerUser) { try int($0) },
        Limit("max-push-subscriptions-per-device", \.store.limits.maxPushSubscriptionsPerDevice) { try int($0) },
        Limit("max-push-subscriptions-per-user", \.store.limits.maxPushSubscriptionsPerUser) { try int($0) },
        Limit("max-push-endpoint-bytes", \.store.limits.maxPushEndpointBytes) { try int($0, atMost: 2048) },
        Limit("max-push-app-id-bytes", \.store.limits.maxPushAppIDBytes) { try int($0, atMost: 256) },
        Limit("max-push-key-bytes", \.store.limits.maxPushKeyBytes) { try int($0, atMost: 4096) },
        Limit("push-ttl", \.push.ttlSeconds) { try int($0, atMost: 28 * 86_400) },
        Limit("push-lease", \.push.lease) { try duration($0) },
        Limit("push-batch", \.push.batch) { try int($0) },
        Limit("max-concurrent-pushes", \.push.maxConcurrentPushes) { try int($0) },
        Limit("push-poll-interval", \.push.pollInterval) { try duration($0) },
        Limit("push-connect-timeout", \.push.connectTimeout) { try duration($0) },
        Limit("push-request-timeout", \.push.requestTimeout) { try duration($0) },
        Limit("max-push-response-bytes", \.push.maxResponseBytes) { try bytes($0) },
        Limit("push-retry-base", \.push.retryBase) { try duration($0) },
        Limit("push-retry-cap", \.push.retryCap) { try duration($0) },
        Limit("max-push-attempts", \.push.maxAttempts) { try int($0) },
        Limit("max-push-claims", \.push.maxClaims) { try int($0) },
        Limit("api-requests-per-second", \.api.requestsPerSecond) { try double($0) },
        Limit("api-request-burst", \.api.requestBurst) { try double($0) },
        Limit("api-requests-per-second-per-address", \.api.requestsPerSecondPerAddress) { try double($0) },
        Limit("api-request-burst-per-address", \.api.requestBurstPerAddress) { try double($0) },
        Limit("max-poll-seconds", \.api.maxPollSeconds) { try int($0, atMost: 3600) },
        Limit("max-updates-per-poll", \.api.maxUpdatesPerPoll) { try int($0, atMost: 10_000) },
        Limit("max-polls-per-user", \.api.maxPollsPerUser) { try int($0) },
        Limit("max-api-body-bytes", \.api.maxBodyBytes) { try bytes($0) },
        Limit("webhook-lease", \.api.webhookLease) { try duration($0) },
        Limit("webhook-poll-interval", \.api.webhookPollInterval) { try duration($0) },
        Limit("webhook-batch", \.api.webhookBatch) { try int($0) },
        Limit("max-concurrent-webhooks", \.api.maxConcurrentWebhooks) { try int($0) },
        Limit("webhook-retry-base", \.api.webhookRetryBase) { try duration($0) },
        Limit("webhook-retry-cap", \.api.webhookRetryCap) { try duration($0) },
        Limit("webhook-disable-after", \.api.webhookDisableAfter) { try duration($0) },
        Limit("hook-posts-per-second", \.api.hookPostsPerSecond) { try double($0) },
        Limit("hook-post-burst", \.api.hookPostBurst) { try double($0) },
        Limit("max-hook-body-bytes", \.api.maxHookBodyBytes) { try bytes($0) },
        Limit("max-batch-requests", \.commit.maxBatchRequests) { try int($0) },
        Limit("compat-max-header-bytes", \.compat.maxHeaderBytes) { try bytes($0) },
        Limit("max-media-bytes", \.media.maxMediaBytes) { try bytes64($0) },
        Limit("media-quota-bytes", \.media.quotaBytesPerUser) { try bytes64($0) },
        Limit("max-uploads-per-user", \.media.maxUploadsPerUser) { try int($0) },
        Limit("abandoned-upload-age", \.media.abandonedUploadAge) { try seconds($0) },
        Limit("upload-cleanup-interval", \.media.cleanupInterval) { try duration($0) },
        Limit("unreferenced-media-age", \.media.unreferencedMediaAge) { try seconds($0) },
        Limit("upload-window-bytes", \.media.uploadWindowBytes) { try bytes($0) },
        Limit("max-chunk-bytes", \.media.maxChunkBytes) { try bytes($0) },
        Limit("default-fetch-window-bytes", \.media.defaultFetchWindowBytes) { try bytes($0) },
        Limit("max-fetch-window-bytes", \.media.maxFetchWindowBytes) { try bytes($0) },
        Limit("max-streams-per-connection", \.media.maxStreamsPerConnection) { try int($0) },
        Limit("max-pending-upload-bytes", \.media.maxPendingUploadBytes) { try bytes($0) },
        Limit("media-ticket-lifetime", \.media.ticketLifetime) { try duration($0) },
    ]

    static var help: String {
        "Set a limit, NAME=VALUE, repeatable (docs/PROTOCOL.md, \"Limits\", says what each does). Names: "
            + "\(all.map(\.name).joined(separator: ", ")). Sizes take K, M, G or T (64K, 2G); durations ms, s, m, "
            + "h or d (250ms, 30s, 2m, 12h, 7d; a bare number is seconds)."
    }

    static func apply(
        _ assignments: [String],
        to configuration: inout ServerConfiguration,
        from source: String = "--limit"
    ) throws {
        for assignment in assignments {
            let parts = assignment.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2, let limit = all.first(where: { $0.name == parts[0] }) else {
                throw ValidationError("\(source) \(assignment): expected NAME=VALUE with a NAME from --help")
            }
            do {
                try limit.apply(&configuration, parts[1])
            } catch {
                throw ValidationError("\(source) \(assignment): \(error)")
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

    /// A count that may be zero, with a bound of its own (a port: 0 takes a free one).
    static func count(_ text: String, atMost largest: Int) throws -> Int {
        let value = try Self.count(text)
        guard value <= largest else {
            throw BadValue(description: "\(text) is more than it takes (at most \(largest))")
        }
        return value
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

/// One `--limit`: its name, where it lives in the configuration, and how its text is read. What
/// `serve --print-config` shows is written as the limit takes it: the same text set again gives the same value.
struct Limit: Sendable {
    let name: String
    let apply: @Sendable (inout ServerConfiguration, String) throws -> Void
    let show: @Sendable (ServerConfiguration) -> String
    /// Whether it is a switch (on or off), which a configuration file may give as true or false.
    let isSwitch: Bool

    init<Value: LimitValue>(
        _ name: String,
        _ path: any WritableKeyPath<ServerConfiguration, Value> & Sendable,
        _ parse: @escaping @Sendable (String) throws -> Value
    ) {
        self.name = name
        self.apply = { $0[keyPath: path] = try parse($1) }
        self.show = { $0[keyPath: path].limitText }
        self.isSwitch = Value.self == Bool.self || Value.self == Bool?.self
    }
}

/// A limit's value as `--limit` writes it.
protocol LimitValue: SendableMetatype {
    var limitText: String { get }
    /// How an optional limit of this type that is not set is written (the store's or the database's own choice).
    static var noneText: String { get }
}

extension LimitValue {
    static var noneText: String { "auto" }
}

extension Int: LimitValue {
    var limitText: String { String(self) }
}

extension Int64: LimitValue {
    var limitText: String { String(self) }
}

extension Double: LimitValue {
    var limitText: String { "\(self)" }
    /// A page cost: 0 for the database's own.
    static var noneText: String { "0" }
}

extension Bool: LimitValue {
    var limitText: String { self ? "1" : "0" }
}

extension Optional: LimitValue where Wrapped: LimitValue {
    var limitText: String { self.map(\.limitText) ?? Wrapped.noneText }
    static var noneText: String { Wrapped.noneText }
}

extension Duration: LimitValue {
    /// Whole seconds as seconds, anything else in milliseconds (every duration a limit takes is whole milliseconds).
    var limitText: String {
        let (seconds, attoseconds) = self.components
        if attoseconds == 0 { return "\(seconds)s" }
        return "\(seconds * 1000 + attoseconds / 1_000_000_000_000_000)ms"
    }
}
