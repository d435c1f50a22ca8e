import CourierProtocol
import CourierStore

/// What an envelope of an authenticated client asks: a write for the group commit, a request with async work, or a
/// refusal; each checked against the limits before anything is done for it.
extension SessionStateMachine {
    /// Requests that read or notify but do not go through the group commit.
    enum Request: Equatable {
        case history(Conversation, beforeSeq: UInt64, limit: Int)
        case unread(offset: Int)
        case typing(Conversation, Bool)
        case manageGroup(Courier_V1_ManageGroup)
        case logout
        /// Start or resume an upload of media bytes on a stream.
        case upload(sha256: String, size: Int64, streamID: UInt32)
        /// Send media bytes on a stream.
        case fetch(sha256: String, offset: Int64, length: Int64, streamID: UInt32, window: Int)
        /// Find the message, then commit a new text for it.
        case edit(MessageName, text: String)
        /// Find the message, then commit a reaction on or off.
        case react(MessageName, key: String, on: Bool)
        /// A message's earlier versions.
        case versions(MessageName)
        /// A page of search results.
        case search(String, in: Conversation?, before: UInt64, limit: Int)
        /// The user's own account: its password, its devices, its deletion.
        case changePassword(old: String, new: String, keepDevices: Bool)
        case devices
        case revokeDevice(DeviceID)
        case deleteAccount(password: String)
        /// A user by exact name.
        case findUser(String)
        case setProfile(ProfileUpdate)
        case profiles([String])
        /// A group's members and their roles.
        case groupMembers(String)
        /// How a conversation alerts the user.
        case setNotify(Conversation, NotifyLevel)
        /// Leave every group one user put this one in.
        case leaveGroups(addedBy: String)
        /// Block or unblock a user; list the users blocked.
        case setBlock(String, blocked: Bool)
        case blocks
        /// Pin or unpin a message; a conversation's pinned messages; delete a message for this user.
        case pin(MessageName, off: Bool)
        case pins(Conversation)
        case hide(MessageName)
        /// Who gave a message's reactions.
        case reactors(MessageName)
        /// Send a copy of a message the user can see (``WriteRequest/Send`` once it is found).
        case forward(MessageName, to: Conversation, id: String, replyTo: WriteRequest.ReplyTarget?)
    }

    /// The most names one `profiles` request asks for.
    static let maxProfilesPerRequest = 100

    /// What an envelope of the active session asks (a send may take from the rate bucket).
    func activeRequest(
        _ envelope: ClientEnvelope,
        requestID: UInt64,
        active: inout Active,
        now: ContinuousClock.Instant
    ) -> Action {
        let user = active.session.user.id
        switch envelope.body {
        case .hello:
            return .refuse(
                requestID: requestID,
                code: ErrorCodes.alreadyAuthenticated,
                message: "this connection is authenticated",
                id: "",
                retryAfter: nil
            )
        case .send(let send):
            return self.send(send, requestID: requestID, active: &active, now: now)
        case .ack(let ack):
            return .write(
                .ack(user: user, device: active.session.device.id, cursor: ack.cursor),
                requestID: requestID,
                answers: false
            )
        case .markRead(let mark):
            guard let address = Conversation(mark.conversation) else { return self.missingConversation(requestID) }
            return .write(
                .markRead(user: user, conversation: address, upToSeq: mark.upToSeq),
                requestID: requestID,
                answers: true
            )
        case .recall(let recall):
            guard let address = Conversation(recall.conversation) else { return self.missingConversation(requestID) }
            return .write(
                .recall(user: user, conversation: address, id: recall.id),
                requestID: requestID,
                answers: true
            )
        case .edit(let edit):
            guard var name = Self.messageName(edit.message) else { return self.unnamedMessage(requestID) }
            // Only the sender edits: by id, the message is the user's own.
            if name.seq == 0 { name.from = active.session.user.name }
            // (An empty text is refused for a text message once it is found: a media message's caption may go.)
            if edit.text.utf8.count > self.configuration.maxTextBytes {
                return .refuse(
                    requestID: requestID,
                    code: ErrorCodes.textTooLarge,
                    message: "\(edit.text.utf8.count) bytes of text; the limit is \(self.configuration.maxTextBytes)",
                    id: "",
                    retryAfter: nil
                )
            }
            // An edit reaches every member, as a send does: it takes from the same bucket.
            if let wait = active.bucket.take(now: now) { return .pause(wait) }
            return .request(.edit(name, text: edit.text), requestID: requestID)
        case .react(let react):
            guard let name = Self.messageName(react.message) else { return self.unnamedMessage(requestID) }
            if let wait = active.bucket.take(now: now) { return .pause(wait) }
            return .request(.react(name, key: react.key, on: !react.off), requestID: requestID)
        case .versions(let versions):
            guard let name = Self.messageName(versions.message) else { return self.unnamedMessage(requestID) }
            if let wait = active.bucket.take(now: now) { return .pause(wait) }
            return .request(.versions(name), requestID: requestID)
        case .search(let search):
            var conversation: Conversation?
            if search.hasConversation {
                guard let address = Conversation(search.conversation) else {
                    return self.missingConversation(requestID)
                }
                conversation = address
            }
            // A search costs more than a send: it takes from the same bucket, so that a flood of them is paced.
            if let wait = active.bucket.take(now: now) { return .pause(wait) }
            let limit = search.limit == 0 ? 20 : Int(search.limit)
            return .request(
                .search(search.query, in: conversation, before: search.before, limit: limit),
                requestID: requestID
            )
        case .history(let history):
            guard let address = Conversation(history.conversation) else { return self.missingConversation(requestID) }
            let limit = history.limit == 0 ? 50 : Int(history.limit)
            return .request(
                .history(address, beforeSeq: history.beforeSeq, limit: min(limit, self.configuration.maxHistoryPage)),
                requestID: requestID
            )
        case .unread(let unread):
            return .request(.unread(offset: Int(unread.offset)), requestID: requestID)
        case .typing(let typing):
            guard let address = Conversation(typing.conversation) else { return self.missingConversation(requestID) }
            return .request(.typing(address, typing.typing), requestID: requestID)
        case .manageGroup(let manage):
            guard manage.action != nil, !manage.group.isEmpty else {
                return .refuse(
                    requestID: requestID,
                    code: ErrorCodes.invalidRequest,
                    message: "manage_group needs a group and an action",
                    id: "",
                    retryAfter: nil
                )
            }
            // A change reaches every member, like a message: it takes from the bucket the sends take from.
            if let wait = active.bucket.take(now: now) { return .pause(wait) }
            return .request(.manageGroup(manage), requestID: requestID)
        case .logout:
            return .request(.logout, requestID: requestID)
        case .changePassword(let change):
            return .request(
                .changePassword(old: change.oldPassword, new: change.newPassword, keepDevices: change.keepDevices),
                requestID: requestID
            )
        case .devices:
            return .request(.devices, requestID: requestID)
        case .revokeDevice(let revoke):
            guard let id = Int64(exactly: revoke.id), id > 0 else {
                return .refuse(
                    requestID: requestID,
                    code: ErrorCodes.invalidRequest,
                    message: "revoke_device names a device by its id",
                    id: "",
                    retryAfter: nil
                )
            }
            return .request(.revokeDevice(DeviceID(rawValue: id)), requestID: requestID)
        case .deleteAccount(let delete):
            return .request(.deleteAccount(password: delete.password), requestID: requestID)
        case .findUser(let find):
            return .request(.findUser(find.name), requestID: requestID)
        case .setProfile(let set):
            var update = ProfileUpdate()
            if set.hasDisplayName { update.displayName = set.displayName }
            if set.hasPushPreviews {
                update.pushPreviews = set.pushPreviews
                // A write of the user's row: it takes from the bucket the sends take from.
                if let wait = active.bucket.take(now: now) { return .pause(wait) }
            }
            switch (set.hasAvatar, set.hasThumbnail, set.removeAvatar) {
            case (false, false, false): break
            case (false, false, true): update.avatar = .remove
            case (true, true, false):
                update.avatar = .set(avatar: ProfileImage(set.avatar), thumbnail: ProfileImage(set.thumbnail))
            default:
                return .refuse(
                    requestID: requestID,
                    code: ErrorCodes.invalidRequest,
                    message: "set_profile sets an avatar with its thumbnail, or removes it",
                    id: "",
                    retryAfter: nil
                )
            }
            return .request(.setProfile(update), requestID: requestID)
        case .groupMembers(let asked):
            return .request(.groupMembers(asked.group), requestID: requestID)
        case .block(let block):
            guard Names.isValid(block.user) else {
                return .refuse(
                    requestID: requestID,
                    code: ErrorCodes.unknownUser,
                    message: "no user named \(block.user.debugDescription)",
                    id: "",
                    retryAfter: nil
                )
            }
            // A write of the user's rows: it takes from the bucket the sends take from.
            if let wait = active.bucket.take(now: now) { return .pause(wait) }
            return .request(.setBlock(block.user, blocked: block.blocked), requestID: requestID)
        case .blocks:
            return .request(.blocks, requestID: requestID)
        case .pin(let pin):
            guard let name = Self.messageName(pin.message) else { return self.unnamedMessage(requestID) }
            // A change every member's log gets, like a message: it takes from the bucket the sends take from.
            if let wait = active.bucket.take(now: now) { return .pause(wait) }
            return .request(.pin(name, off: pin.off), requestID: requestID)
        case .pins(let asked):
            guard let conversation = Conversation(asked.conversation) else {
                return self.missingConversation(requestID)
            }
            return .request(.pins(conversation), requestID: requestID)
        case .hide(let hide):
            guard let name = Self.messageName(hide.message) else { return self.unnamedMessage(requestID) }
            if let wait = active.bucket.take(now: now) { return .pause(wait) }
            return .request(.hide(name), requestID: requestID)
        case .reactors(let asked):
            guard let name = Self.messageName(asked.message) else { return self.unnamedMessage(requestID) }
            // A read as a history page is, but of one message: it takes from the bucket as `versions` does.
            if let wait = active.bucket.take(now: now) { return .pause(wait) }
            return .request(.reactors(name), requestID: requestID)
        case .leaveGroups(let leave):
            guard Names.isValid(leave.addedBy) else {
                return .refuse(
                    requestID: requestID,
                    code: ErrorCodes.unknownUser,
                    message: "no user named \(leave.addedBy.debugDescription)",
                    id: "",
                    retryAfter: nil
                )
            }
            // A change reaching every member of every group left: it takes from the sends' bucket too.
            if let wait = active.bucket.take(now: now) { return .pause(wait) }
            return .request(.leaveGroups(addedBy: leave.addedBy), requestID: requestID)
        case .setNotify(let set):
            guard let address = Conversation(set.conversation) else { return self.missingConversation(requestID) }
            guard let level = NotifyLevel(set.level) else {
                return .refuse(
                    requestID: requestID,
                    code: ErrorCodes.invalidRequest,
                    message: "set_notify takes all, mentions or none",
                    id: "",
                    retryAfter: nil
                )
            }
            // A write to the store and the user's log: it takes from the bucket the sends take from.
            if let wait = active.bucket.take(now: now) { return .pause(wait) }
            return .request(.setNotify(address, level), requestID: requestID)
        case .profiles(let asked):
            guard asked.users.count <= Self.maxProfilesPerRequest else {
                return .refuse(
                    requestID: requestID,
                    code: ErrorCodes.invalidRequest,
                    message: "at most \(Self.maxProfilesPerRequest) profiles a request",
                    id: "",
                    retryAfter: nil
                )
            }
            // One read of many names (of users the asker shares a conversation with: no one else is answered): it
            // takes from the bucket the sends take from.
            if let wait = active.bucket.take(now: now) { return .pause(wait) }
            return .request(.profiles(asked.users), requestID: requestID)
        case .upload(let upload):
            if let refusal = Self.validate(digest: upload.sha256, stream: upload.streamID, requestID: requestID) {
                return refusal
            }
            guard upload.size <= UInt64(self.configuration.maxMediaBytes) else {
                return .refuse(
                    requestID: requestID,
                    code: ErrorCodes.mediaTooLarge,
                    message:
                        "\(upload.size) bytes is over the media limit of \(self.configuration.maxMediaBytes) bytes",
                    id: "",
                    retryAfter: nil
                )
            }
            return .request(
                .upload(sha256: upload.sha256, size: Int64(upload.size), streamID: upload.streamID),
                requestID: requestID
            )
        case .fetch(let fetch):
            if let refusal = Self.validate(digest: fetch.sha256, stream: fetch.streamID, requestID: requestID) {
                return refusal
            }
            guard fetch.offset <= Int64.max, fetch.length <= Int64.max else {
                return .refuse(
                    requestID: requestID,
                    code: ErrorCodes.invalidRequest,
                    message: "a range beyond any file",
                    id: "",
                    retryAfter: nil
                )
            }
            return .request(
                .fetch(
                    sha256: fetch.sha256,
                    offset: Int64(fetch.offset),
                    length: Int64(fetch.length),
                    streamID: fetch.streamID,
                    window: Int(fetch.windowBytes)
                ),
                requestID: requestID
            )
        case nil:
            return .refuse(
                requestID: requestID,
                code: ErrorCodes.unsupported,
                message: "a request this server does not know",
                id: "",
                retryAfter: nil
            )
        }
    }

    /// A media digest must be 64 lowercase hex digits, and a stream a client opens an odd id.
    private static func validate(digest: String, stream: UInt32, requestID: UInt64) -> Action? {
        guard SHA256Hex.isValid(digest) else {
            return .refuse(
                requestID: requestID,
                code: ErrorCodes.invalidRequest,
                message: "sha256 is 64 lowercase hex digits",
                id: "",
                retryAfter: nil
            )
        }
        guard stream % 2 == 1 else {
            return .refuse(
                requestID: requestID,
                code: ErrorCodes.invalidRequest,
                message: "a stream a client opens has an odd id",
                id: "",
                retryAfter: nil
            )
        }
        return nil
    }

    /// A message as a request names it: by conversation and seq, or by id (with its sender or conversation); nil
    /// when it names neither way.
    static func messageName(_ reference: Courier_V1_MessageRef) -> MessageName? {
        let conversation = reference.hasConversation ? Conversation(reference.conversation) : nil
        if reference.seq > 0, let conversation {
            return MessageName(conversation: conversation, seq: reference.seq)
        }
        guard !reference.id.isEmpty else { return nil }
        return MessageName(id: reference.id, from: reference.from.isEmpty ? nil : reference.from, in: conversation)
    }

    func unnamedMessage(_ requestID: UInt64) -> Action {
        .refuse(
            requestID: requestID,
            code: ErrorCodes.invalidRequest,
            message: "name the message by its conversation and seq, or by its id",
            id: "",
            retryAfter: nil
        )
    }

    private func missingConversation(_ requestID: UInt64) -> Action {
        .refuse(
            requestID: requestID,
            code: ErrorCodes.invalidRequest,
            message: "the request names no conversation",
            id: "",
            retryAfter: nil
        )
    }

}
