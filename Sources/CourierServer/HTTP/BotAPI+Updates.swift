import CourierProtocol
import CourierStore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import Synchronization

/// The long poll, `GET /api/v1/updates`, and the updates it and the webhooks send.
extension BotAPI {
    // MARK: Updates

    func updates(_ request: Request, _ context: CourierRequestContext) async throws -> Response {
        let session = try await self.authorize(request, context)
        let query = request.uri.queryParameters
        func number(_ name: String) throws -> Int64? {
            guard let text = query[name[...]] else { return nil }
            guard let value = Int64(text), value >= 0 else {
                throw APIRefusal(.badRequest, "invalid-request", "\(name) is a whole number, 0 or more")
            }
            return value
        }
        let offset = try number("offset") ?? 0
        let timeout = min(try number("timeout") ?? 0, Int64(max(0, self.configuration.maxPollSeconds)))
        let limit = Int(min(try number("limit") ?? Int64.max, Int64(max(1, self.configuration.maxUpdatesPerPoll))))
        let store = self.context.store
        let user = session.user
        let webhook = try await APIRefusal.mapping { try await store.webhook(of: user.id) }
        if let webhook, webhook.disabledMs == nil {
            throw APIRefusal(
                .conflict,
                "conflict",
                "a webhook is set: updates go to it (DELETE /api/v1/webhook to poll again)"
            )
        }

        // The offset acknowledges what is below it, for this device: never sent again. What a webhook turned off
        // had delivered is not sent again either.
        var after = try await APIRefusal.mapping { try await store.ackedCursor(of: session.device.id) }
        after = max(after, webhook?.cursor ?? 0)
        if offset > 0, UInt64(offset) - 1 > after {
            let latest = try await APIRefusal.mapping { try await store.logCursor(of: user.id) }
            let acknowledged = min(UInt64(offset) - 1, latest)
            if acknowledged > after {
                try await self.commit(.ack(user: user.id, device: session.device.id, cursor: acknowledged), user)
                after = acknowledged
            }
        }
        guard timeout > 0 else {
            var skippedTo = after
            for _ in 0..<Self.maxScansPerPoll {
                let (found, readTo, more) = try await self.read(after: skippedTo, limit: limit, session)
                if !found.isEmpty { return APIRefusal.json(.ok, ["updates": found]) }
                skippedTo = max(skippedTo, readTo)
                if !more { break }
            }
            return try await self.noUpdates(read: skippedTo, after: after, session)
        }
        // A place among the user's connections while it waits: woken by any commit that grows the log.
        let registration = self.context.hub.register(
            user: user.id,
            device: session.device.id,
            ephemeral: false,
            maxPerUser: self.context.configuration.limits.maxConnectionsPerUser
        )
        guard case .registered(let handle, _, _) = registration else {
            throw APIRefusal(.serviceUnavailable, "server-full", "no room for another wait of this user: try again")
        }
        defer { _ = self.context.hub.unregister(handle) }
        guard self.limiter.startPoll(of: user.id) else {
            throw APIRefusal(.conflict, "conflict", "this user has as many long polls open as it may")
        }
        defer { self.limiter.endPoll(of: user.id) }
        self.context.metrics.polling(1)
        defer { self.context.metrics.polling(-1) }
        let deadline = ContinuousClock.now + .seconds(timeout)
        var skippedTo = after
        var scans = 0
        poll: while true {
            let (found, readTo, more) = try await self.read(after: skippedTo, limit: limit, session)
            if !found.isEmpty { return APIRefusal.json(.ok, ["updates": found]) }
            skippedTo = max(skippedTo, readTo)
            handle.delivered(upTo: skippedTo)
            scans += 1
            // A backlog of entries that are no updates (receipts, reactions, the bot's own messages): read on, a
            // bounded number of pages a request.
            if more {
                if scans < Self.maxScansPerPoll { continue }
                break
            }
            // Taken until there is nothing (which arms the wake-up again): the log may have grown meanwhile.
            switch handle.take() {
            case .terminate(let code, _)?:
                guard code != ErrorCodes.tokenRevoked else {
                    throw APIRefusal(.unauthorized, "token-revoked", "the token was revoked")
                }
                // The server is stopping: answered now, with none; the client asks again (another node, or later).
                break poll
            case .events?, .notices?:
                continue
            case nil:
                break
            }
            guard ContinuousClock.now < deadline, await Self.wait(on: handle, until: deadline) else { break }
        }
        return try await self.noUpdates(read: skippedTo, after: after, session)
    }

    /// The most pages of entries one poll reads past that are no updates (each of up to `limit`, read 8 at a time).
    static let maxScansPerPoll = 16

    /// An answer with no updates. What was read is no update (receipts, reactions, the bot's own messages):
    /// acknowledged, so that the next poll does not read it again.
    private func noUpdates(read skippedTo: UInt64, after: UInt64, _ session: DeviceSession) async throws -> Response {
        if skippedTo > after {
            try? await self.commit(
                .ack(user: session.user.id, device: session.device.id, cursor: skippedTo),
                session.user
            )
        }
        return APIRefusal.json(.ok, ["updates": [APIUpdate]()])
    }

    /// Waits until the handle has something, or the deadline (or the request's task is cancelled); false then.
    private static func wait(on handle: ConnectionHandle, until deadline: ContinuousClock.Instant) async -> Bool {
        let waiter = PollWaiter()
        let timer = Task {
            try? await Task.sleep(until: deadline)
            waiter.resume(false)
        }
        defer {
            timer.cancel()
            handle.clearWaker()
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                waiter.set(continuation)
                handle.setWaker { waiter.resume(true) }
            }
        } onCancel: {
            waiter.resume(false)
        }
    }

    private func read(
        after cursor: UInt64,
        limit: Int,
        _ session: DeviceSession
    ) async throws -> ([APIUpdate], UInt64, Bool) {
        try await APIRefusal.mapping {
            try await Self.updates(of: session.user, after: cursor, limit: limit, store: self.context.store)
        }
    }

    /// A user's updates after a cursor of its log, up to `limit`, reading on past entries that are none (a few pages
    /// at most): what the long poll answers and a webhook is sent.
    ///
    /// - Returns: The updates; the cursor read to (past the last update only when there is none: then every
    ///   entry read up to it was none); and, when there is none, whether entries remain after it (the pages ran out).
    static func updates(
        of user: User,
        after cursor: UInt64,
        limit: Int,
        store: any CourierDatabase
    ) async throws -> ([APIUpdate], UInt64, Bool) {
        var after = cursor
        var found: [APIUpdate] = []
        for _ in 0..<8 {
            let events = try await store.events(for: user.id, after: after, limit: limit)
            guard !events.isEmpty else { break }
            for event in events {
                switch event.kind {
                case .message(let message) where message.from != user.name:
                    found.append(APIUpdate(update_id: event.cursor, message: APIMessage(message, reader: user.name)))
                case .edit(let message) where message.from != user.name:
                    found.append(
                        APIUpdate(update_id: event.cursor, edited_message: APIMessage(message, reader: user.name))
                    )
                default:
                    break
                }
                after = event.cursor
                if found.count >= limit { break }
            }
            if !found.isEmpty { break }
        }
        // None found in the pages read: more entries may follow (a backlog of entries that are no updates).
        let more = found.isEmpty ? after < (try await store.logCursor(of: user.id)) : false
        return (found, after, more)
    }
}
