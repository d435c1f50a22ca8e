import CourierProtocol
import CourierStore

/// The requests that are neither a login nor a write: history, unread counts, typing, groups, logout, and the start
/// of a media upload or fetch.
extension SessionRequests {
    func handle(
        _ request: SessionStateMachine.Request,
        requestID: UInt64,
        session deviceSession: DeviceSession,
        handle: ConnectionHandle?,
        work: SessionWork,
        writer: SessionWriter<Transport>
    ) async throws -> SessionStateMachine.WorkEnd {
        let user = deviceSession.user
        var reply = ServerEnvelope()
        reply.requestID = requestID
        do {
            switch request {
            case .history(let address, let beforeSeq, let limit):
                let page = try await self.context.store.history(
                    for: user.id,
                    in: address,
                    beforeSeq: beforeSeq,
                    limit: limit
                )
                // Newest first: a page cut to the answer limit keeps the newest, and `more` sends the client on
                // from the oldest it got.
                let messages = page.messages.map { Courier_V1_Message($0, rawBody: self.transport.sendsRawBodies) }
                let sizes = messages.map { (try? $0.serializedBytes() as [UInt8])?.count ?? 0 }
                let limit = self.context.configuration.limits.maxAnswerBytes
                let fitting = Self.fitting(sizes: sizes, within: limit)
                reply.history.messages = Array(messages.prefix(fitting))
                reply.history.more = page.more || fitting < messages.count
                // The marks in what room the messages left, the furthest read first; none when there is none.
                let marks = page.receipts.map(Courier_V1_ReceiptMark.init)
                let room = limit - sizes.prefix(fitting).reduce(0) { $0 + $1 + 6 }
                let kept = Self.fitting(
                    sizes: marks.map { (try? $0.serializedBytes() as [UInt8])?.count ?? 0 },
                    within: room,
                    atLeastOne: false
                )
                reply.history.receipts = Array(marks.prefix(kept))
            case .unread(let offset):
                let counts = try await self.context.store.unreadCounts(for: user.id)
                let entries = counts.dropFirst(offset).map { count in
                    var entry = Courier_V1_UnreadCounts.Entry()
                    entry.conversation = Courier_V1_Conversation(count.conversation)
                    entry.unread = count.unread
                    entry.lastSeq = count.lastSeq
                    entry.readSeq = count.readSeq
                    entry.peerDeliveredSeq = count.peerDeliveredSeq
                    entry.peerReadSeq = count.peerReadSeq
                    entry.mentions = count.mentions
                    entry.notify = Courier_V1_NotifyLevel(count.notify)
                    entry.title = count.title
                    return entry
                }
                let fitting = Self.fitting(
                    sizes: entries.map { (try? $0.serializedBytes() as [UInt8])?.count ?? 0 },
                    within: self.context.configuration.limits.maxAnswerBytes
                )
                reply.unread.entries = Array(entries.prefix(fitting))
                reply.unread.more = fitting < entries.count
                reply.unread.nextOffset = UInt32(clamping: min(counts.count, offset + fitting))
            case .typing(let address, let typing):
                let members = try await self.context.store.members(of: address, for: user.id)
                self.context.fanout.typing(
                    TypingHint(
                        user: user.id,
                        name: user.name,
                        conversation: address,
                        typing: typing,
                        fromConnection: handle?.id
                    ),
                    to: members
                )
                reply.done = Courier_V1_Done()
            case .manageGroup(let manage):
                let appended = try await self.manageGroup(manage, by: user)
                self.context.fanout.logsGrew(appended)
                reply.done = Courier_V1_Done()
            case .leaveGroups(let adder):
                let left = try await self.context.store.leaveGroups(
                    of: user.id,
                    addedBy: adder,
                    nowMs: self.context.clock.wallMs
                )
                self.context.fanout.logsGrew(left.appended)
                reply.groupsLeft.groups = left.groups
            case .pin(let name, let off):
                let appended = try await self.context.store.pin(
                    name,
                    by: user.id,
                    off: off,
                    nowMs: self.context.clock.wallMs
                )
                self.context.fanout.logsGrew(appended)
                reply.done = Courier_V1_Done()
            case .pins(let conversation):
                // At most max-pins-per-conversation messages: the server's answer limit cuts a page of history
                // that large too, so the oldest pins beyond it are left out.
                let messages = try await self.context.store.pins(in: conversation, for: user.id)
                    .map { Courier_V1_Message($0) }
                let fitting = Self.fitting(
                    sizes: messages.map { (try? $0.serializedBytes() as [UInt8])?.count ?? 0 },
                    within: self.context.configuration.limits.maxAnswerBytes
                )
                reply.pins.conversation = Courier_V1_Conversation(conversation)
                reply.pins.messages = Array(messages.prefix(fitting))
            case .reactors(let name):
                // At most max-reaction-keys-per-message keys of max-reactors-listed names: a page the answer limit
                // cuts only with limits raised far past their defaults, keeping the first keys.
                let entries = try await self.context.store.reactors(of: name, for: user.id).map { reactors in
                    Courier_V1_Reactors.Entry.with {
                        $0.key = reactors.key
                        $0.count = UInt32(clamping: reactors.count)
                        $0.users = reactors.users
                    }
                }
                let fitting = Self.fitting(
                    sizes: entries.map { (try? $0.serializedBytes() as [UInt8])?.count ?? 0 },
                    within: self.context.configuration.limits.maxAnswerBytes
                )
                reply.reactors.entries = Array(entries.prefix(fitting))
            case .forward(let name, let address, let id, let replyTo):
                reply = try await self.forward(
                    name,
                    to: address,
                    id: id,
                    replyTo: replyTo,
                    session: deviceSession,
                    requestID: requestID
                )
            case .hide(let name):
                let appended = try await self.context.store.hide(name, for: user.id, nowMs: self.context.clock.wallMs)
                self.context.fanout.logsGrew(appended)
                reply.done = Courier_V1_Done()
            case .setNotify(let conversation, let level):
                let appended = try await self.context.store.setNotify(
                    level,
                    in: conversation,
                    for: user.id,
                    nowMs: self.context.clock.wallMs
                )
                self.context.fanout.logsGrew(appended)
                reply.done = Courier_V1_Done()
            case .edit(let name, let text):
                reply = try await self.edit(name, text: text, session: deviceSession, requestID: requestID)
            case .react(let name, let key, let on):
                reply = try await self.react(name, key: key, on: on, user: user, requestID: requestID)
            case .versions(let name):
                let versions = try await self.context.store.versions(of: name, for: user.id)
                let entries = versions.map { version in
                    var entry = Courier_V1_Versions.Version()
                    entry.version = UInt32(clamping: version.version)
                    entry.body = (try? Courier_V1_Body(serializedBytes: version.body)) ?? Courier_V1_Body()
                    entry.replacedMs = version.replacedMs
                    return entry
                }
                // The oldest that fit the answer; a message edited more than fits has its latest versions left out.
                let fitting = Self.fitting(
                    sizes: entries.map { (try? $0.serializedBytes() as [UInt8])?.count ?? 0 },
                    within: self.context.configuration.limits.maxAnswerBytes
                )
                reply.versions.versions = Array(entries.prefix(fitting))
            case .search(let query, let conversation, let before, let limit):
                let page = try await self.context.store.search(
                    for: user.id,
                    query: query,
                    in: conversation,
                    before: before,
                    limit: limit
                )
                let hits = page.hits.map { hit in
                    var entry = Courier_V1_SearchResults.Hit()
                    entry.message = Courier_V1_Message(hit.message, rawBody: self.transport.sendsRawBodies)
                    entry.fragment = hit.fragment.text
                    entry.marks = hit.fragment.marks.map { mark in
                        var range = Courier_V1_SearchResults.Mark()
                        range.start = UInt32(clamping: mark.lowerBound)
                        range.length = UInt32(clamping: mark.count)
                        return range
                    }
                    return entry
                }
                let fitting = Self.fitting(
                    sizes: hits.map { (try? $0.serializedBytes() as [UInt8])?.count ?? 0 },
                    within: self.context.configuration.limits.maxAnswerBytes
                )
                reply.search.hits = Array(hits.prefix(fitting))
                if fitting < hits.count {
                    // Cut to the answer's size: the next page starts after the last hit sent.
                    reply.search.more = true
                    reply.search.next = UInt64(page.hits[fitting - 1].position)
                } else {
                    reply.search.more = page.more
                    reply.search.next = page.next
                }
            case .groupMembers(let group):
                let roster = try await self.context.store.groupRoster(of: group, for: user.id)
                reply.groupMembers.group = group
                reply.groupMembers.title = roster.title
                reply.groupMembers.members = roster.members.map { member in
                    var entry = Courier_V1_GroupMembers.Member()
                    entry.user = member.user
                    entry.role = Courier_V1_GroupRole(member.role)
                    entry.joinedSeq = member.joinedSeq
                    return entry
                }
            case .changePassword, .devices, .revokeDevice, .deleteAccount, .findUser, .setProfile, .profiles, .setBlock,
                .blocks:
                let (answer, end) = try await self.ownAccount(request, requestID: requestID, session: deviceSession)
                if let end {
                    try await writer.write(answer)
                    return end
                }
                reply = answer
            case .logout:
                try await self.context.store.revokeDevice(
                    deviceSession.device.id,
                    of: user.name,
                    nowMs: self.context.clock.wallMs
                )
                reply.done = Courier_V1_Done()
                try await writer.write(reply)
                return .close(code: ErrorCodes.tokenRevoked, message: "logged out")
            case .upload(let sha256, let size, let streamID):
                try await self.startUpload(
                    sha256: sha256,
                    size: size,
                    streamID: streamID,
                    requestID: requestID,
                    user: user.id,
                    session: work,
                    writer: writer
                )
                return .goOn
            case .fetch(let sha256, let offset, let length, let streamID, let window):
                try await self.startFetch(
                    sha256: sha256,
                    range: (offset, length),
                    streamID: streamID,
                    window: window,
                    requestID: requestID,
                    user: user.id,
                    session: work,
                    writer: writer
                )
                return .goOn
            }
        } catch let error as CourierStoreError {
            self.context.metrics.refusals.increment()
            reply = self.errorEnvelope(
                requestID,
                code: "\(error.code)",
                message: error.message,
                id: "",
                retryAfter: error.code == .uploadBusy ? .seconds(1) : nil
            )
        } catch let refusal as SessionRefusal {
            self.context.metrics.refusals.increment()
            reply = self.errorEnvelope(
                requestID,
                code: refusal.code,
                message: refusal.message,
                id: "",
                retryAfter: refusal.retryAfter
            )
        }
        try await writer.write(reply)
        return .goOn
    }

    /// How many items of these encoded sizes, from the first, fit in `limit` bytes of an answer (with `atLeastOne`,
    /// at least one when there is one: an answer must carry something).
    static func fitting(sizes: [Int], within limit: Int, atLeastOne: Bool = true) -> Int {
        var bytes = 0
        for (index, size) in sizes.enumerated() {
            // The field's tag and length prefix: a few bytes more than the item.
            bytes += size + 6
            if bytes > limit { return atLeastOne ? max(1, index) : index }
        }
        return sizes.count
    }

    private func manageGroup(_ manage: Courier_V1_ManageGroup, by user: User) async throws -> [UserID: UInt64] {
        let store = self.context.store
        let now = self.context.clock.wallMs
        // Creating a group and adding members put others where they did not ask to be: counted per user and per
        // address, refused or not.
        switch manage.action {
        case .create?, .add?:
            switch self.context.groupChanges.admit(user: user.name, address: self.addressKey) {
            case .throttled(let wait):
                throw SessionRefusal(
                    ErrorCodes.rateLimited,
                    "too many groups created and members added; retry later",
                    retryAfter: wait
                )
            case .admitted(let ticket):
                self.context.groupChanges.finish(ticket, failed: true)
            }
        default:
            break
        }
        switch manage.action {
        case .create(let members)?:
            return try await store.createGroup(
                name: manage.group,
                owner: user.name,
                members: members.users,
                byOwner: true,
                nowMs: now
            )
        case .add(let members)?:
            return try await store.changeMembers(
                of: manage.group,
                actor: user.id,
                add: members.users,
                remove: [],
                nowMs: now
            )
        case .remove(let members)?:
            return try await store.changeMembers(
                of: manage.group,
                actor: user.id,
                add: [],
                remove: members.users,
                nowMs: now
            )
        case .leave?:
            return try await store.changeMembers(
                of: manage.group,
                actor: user.id,
                add: [],
                remove: [user.name],
                nowMs: now
            )
        case .promote(let members)?, .demote(let members)?:
            let role: GroupRole = if case .promote? = manage.action { .admin } else { .member }
            var appended: [UserID: UInt64] = [:]
            for member in members.users {
                let grown = try await store.setRole(in: manage.group, of: member, to: role, by: user.id, nowMs: now)
                appended.merge(grown) { max($0, $1) }
            }
            return appended
        case .transfer(let transfer)?:
            return try await store.transferOwnership(of: manage.group, to: transfer.user, by: user.id, nowMs: now)
        case .title(let title)?:
            // A title reaches every member, like a profile: it counts with the profile changes.
            switch self.context.profileChanges.admit(user: user.name, address: self.addressKey) {
            case .throttled(let wait):
                throw SessionRefusal(
                    ErrorCodes.rateLimited,
                    "too many title and profile changes; retry later",
                    retryAfter: wait
                )
            case .admitted(let ticket):
                defer { self.context.profileChanges.finish(ticket, failed: true) }
                return try await store.setGroupTitle(title.title, of: manage.group, by: user.id, nowMs: now)
            }
        case nil:
            throw SessionRefusal(ErrorCodes.invalidRequest, "manage_group needs an action")
        }
    }
}
