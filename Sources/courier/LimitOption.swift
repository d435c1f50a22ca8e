import ArgumentParser
import CourierServer

/// `--limit NAME=VALUE`: sets any of the server's limits by name (docs/PROTOCOL.md, "Limits").
enum LimitOption {
    /// Each limit's name on the command line, and how to set it.
    static let setters: [(name: String, apply: @Sendable (inout ServerConfiguration, String) throws -> Void)] = [
        ("max-connections", { $0.limits.maxConnections = try int($1) }),
        ("max-unauthenticated-per-address", { $0.limits.maxUnauthenticatedPerAddress = try int($1) }),
        ("max-connections-per-user", { $0.limits.maxConnectionsPerUser = try int($1) }),
        ("http-max-connections", { $0.http.maxConnections = try int($1) }),
        ("http-max-connections-per-address", { $0.http.maxConnectionsPerAddress = try int($1) }),
        ("http-idle-timeout", { $0.http.idleTimeout = try duration($1) }),
        ("reserved-descriptors", { $0.reservedDescriptors = try int($1) }),
        ("max-unacked-sends", { $0.limits.maxUnackedSends = try int($1) }),
        ("sends-per-second", { $0.limits.sendsPerSecond = try double($1) }),
        ("send-burst", { $0.limits.sendBurst = try double($1) }),
        ("fanout-per-second", { $0.limits.fanoutPerSecond = try double($1) }),
        ("fanout-burst", { $0.limits.fanoutBurst = try double($1) }),
        ("max-text-bytes", { $0.limits.maxTextBytes = try int($1) }),
        ("idle-timeout", { $0.limits.idleTimeout = try duration($1) }),
        ("heartbeat-interval", { $0.limits.heartbeatInterval = try duration($1) }),
        ("auth-timeout", { $0.limits.authTimeout = try duration($1) }),
        ("slow-consumer-timeout", { $0.limits.slowConsumerTimeout = try duration($1) }),
        ("outbound-buffer-bytes", { $0.limits.outboundBufferBytes = try int($1) }),
        ("events-per-page", { $0.limits.eventsPerPage = try int($1) }),
        ("max-events-bytes", { $0.limits.maxEventsBytes = try int($1) }),
        ("max-history-page", { $0.limits.maxHistoryPage = try int($1) }),
        ("max-answer-bytes", { $0.limits.maxAnswerBytes = try int($1) }),
        ("max-failed-logins-per-user", { $0.limits.maxFailedLoginsPerUser = try int($1) }),
        ("max-failed-logins-per-address", { $0.limits.maxFailedLoginsPerAddress = try int($1) }),
        ("login-window", { $0.limits.loginWindow = try duration($1) }),
        ("password-threads", { $0.store.passwordThreads = try int($1) }),
        ("max-queued-password-checks", { $0.store.maxQueuedPasswordChecks = try int($1) }),
        ("change-poll-interval", { $0.limits.changePollInterval = try duration($1) }),
        ("token-lifetime", { $0.store.tokenLifetime = try duration($1) }),
        ("recall-window", { $0.store.recallWindow = try duration($1) }),
        ("max-batch-requests", { $0.commit.maxBatchRequests = try int($1) }),
        ("max-uploads-per-user", { $0.media.maxUploadsPerUser = try int($1) }),
    ]

    static var help: String {
        "Set a limit, NAME=VALUE, repeatable. Names: \(setters.map(\.name).joined(separator: ", ")). "
            + "Durations take ms, s, m, h or d (250ms, 30s, 2m, 12h, 7d)."
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
    }

    struct BadValue: Error, CustomStringConvertible {
        var description: String
    }

    static func int(_ text: String) throws -> Int {
        guard let value = Int(text), value > 0 else { throw BadValue(description: "\(text) is not a positive integer") }
        return value
    }

    static func double(_ text: String) throws -> Double {
        guard let value = Double(text), value.isFinite, value > 0 else {
            throw BadValue(description: "\(text) is not a positive number")
        }
        return value
    }

    static func duration(_ text: String) throws -> Duration {
        let scales = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)]
        for (suffix, scale) in scales where text.hasSuffix(suffix) {
            guard let value = Int(text.dropLast(suffix.count)), value >= 0 else { continue }
            let (milliseconds, overflow) = value.multipliedReportingOverflow(by: scale)
            guard !overflow else { throw BadValue(description: "\(text) is too long a duration") }
            return .milliseconds(milliseconds)
        }
        throw BadValue(description: "\(text) is not a duration like 250ms, 30s, 2m, 12h or 7d")
    }
}
