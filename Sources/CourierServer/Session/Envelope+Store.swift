import CourierProtocol
import CourierStore
import SwiftProtobuf

extension Courier_V1_Message {
    /// A stored message as the protocol carries it.
    ///
    /// - Parameter rawBody: Whether the body goes out as the bytes the store holds, unparsed (see
    ///   ``rawBodyField(_:)``), for a transport that only serializes the message; else it is decoded, for one that
    ///   reads it (the compat port).
    init(_ message: StoredMessage, rawBody: Bool = false) {
        self.init()
        self.id = message.id
        self.from = message.from
        self.conversation = Courier_V1_Conversation(message.conversation)
        self.seq = message.seq
        self.timeMs = message.timeMs
        self.recalled = message.recalled
        self.pinned = message.pinned
        if let reply = message.replyTo {
            self.replyTo.seq = reply.seq
            self.replyTo.visible = reply.visible
            self.replyTo.id = reply.id
            self.replyTo.from = reply.from
            self.replyTo.recalled = reply.recalled
            if !reply.body.isEmpty {
                self.replyTo.body = (try? Courier_V1_Body(serializedBytes: reply.body)) ?? Courier_V1_Body()
            }
        }
        guard !message.recalled else { return }
        self.editedMs = message.editedMs ?? 0
        self.reactions = message.reactions.map { reaction in
            var count = Courier_V1_ReactionCount()
            count.key = reaction.key
            count.count = UInt32(clamping: reaction.count)
            count.mine = reaction.mine
            return count
        }
        // The store keeps the body as this server's serialization of the `Body` it parsed from the client's send, so
        // its bytes can go out as they are. Decoded, a body this server cannot parse is delivered empty rather than
        // dropped, so the sequence stays whole.
        if rawBody, let field = Self.rawBodyField(message.body) {
            self.unknownFields = field
        } else {
            self.body = (try? Courier_V1_Body(serializedBytes: message.body)) ?? Courier_V1_Body()
        }
    }

    /// The `body` field (6) holding `bytes` as they are: parsed into a message without that field, they stay raw in
    /// its unknown fields (copied, not decoded), and a `Message` carrying them serializes them verbatim.
    static func rawBodyField(_ bytes: [UInt8]) -> SwiftProtobuf.UnknownStorage? {
        var field: [UInt8] = [6 << 3 | 2]
        field.reserveCapacity(bytes.count + 11)
        var length = UInt64(bytes.count)
        while length >= 0x80 {
            field.append(UInt8(truncatingIfNeeded: length) | 0x80)
            length >>= 7
        }
        field.append(UInt8(length))
        field.append(contentsOf: bytes)
        return try? Courier_V1_RawBodyCarrier(serializedBytes: field).unknownFields
    }
}

extension Courier_V1_Event {
    /// A stored log entry as the protocol carries it; `rawBody` as for ``Courier_V1_Message/init(_:rawBody:)``.
    init(_ event: StoredEvent, rawBody: Bool = false) {
        self.init()
        self.cursor = event.cursor
        switch event.kind {
        case .message(let message):
            self.message = Courier_V1_Message(message, rawBody: rawBody)
        case .recall(let conversation, let seq, let id, let by):
            self.recall.conversation = Courier_V1_Conversation(conversation)
            self.recall.seq = seq
            self.recall.id = id
            self.recall.by = by
        case .receipt(let conversation, let user, let kind, let upToSeq):
            self.receipt.conversation = Courier_V1_Conversation(conversation)
            self.receipt.user = user
            self.receipt.kind = kind == .read ? .read : .delivered
            self.receipt.upToSeq = upToSeq
        case .membership(let group, let user, let change, let seq):
            self.membership.group = group
            self.membership.user = user
            self.membership.change = change == .joined ? .joined : .left
            self.membership.seq = seq
        case .edit(let message):
            self.edit = Courier_V1_Message(message, rawBody: rawBody)
        case .reaction(let reaction):
            self.reaction.message.conversation = Courier_V1_Conversation(reaction.conversation)
            self.reaction.message.seq = reaction.seq
            self.reaction.message.id = reaction.id
            self.reaction.message.from = reaction.from
            self.reaction.user = reaction.user
            self.reaction.key = reaction.key
            self.reaction.on = reaction.on
        case .profile(let profile):
            self.profile = Courier_V1_Profile(profile)
        case .role(let group, let user, let role, let seq):
            self.role.group = group
            self.role.user = user
            self.role.role = Courier_V1_GroupRole(role)
            self.role.seq = seq
        case .title(let group, let title, let by, let seq):
            self.title.group = group
            self.title.title = title
            self.title.by = by
            self.title.seq = seq
        case .notify(let conversation, let level):
            self.notify.conversation = Courier_V1_Conversation(conversation)
            self.notify.level = Courier_V1_NotifyLevel(level)
        case .pin(let conversation, let seq, let id, let from, let by, let pinned):
            self.pin.message.conversation = Courier_V1_Conversation(conversation)
            self.pin.message.seq = seq
            self.pin.message.id = id
            self.pin.message.from = from
            self.pin.by = by
            self.pin.pinned = pinned
        case .hidden(let conversation, let seq):
            self.hidden.conversation = Courier_V1_Conversation(conversation)
            self.hidden.seq = seq
        }
    }
}

extension Courier_V1_GroupRole {
    init(_ role: GroupRole) {
        switch role {
        case .member: self = .member
        case .admin: self = .admin
        case .owner: self = .owner
        }
    }
}

extension Courier_V1_Profile {
    /// A user's profile as the protocol carries it.
    init(_ profile: UserProfile) {
        self.init()
        self.user = profile.user
        self.displayName = profile.displayName ?? ""
        if let avatar = profile.avatar { self.avatar = Courier_V1_Media(picture: avatar) }
        if let thumbnail = profile.thumbnail { self.thumbnail = Courier_V1_Media(picture: thumbnail) }
        self.updatedMs = profile.updatedMs
        self.bot = profile.bot
    }
}

extension Courier_V1_Media {
    /// A profile's picture as media.
    init(picture: ProfileImage) {
        self.init()
        self.kind = .image
        self.sha256 = picture.sha256
        self.size = UInt64(max(0, picture.size))
        self.mime = picture.mime
        self.width = UInt32(clamping: picture.width)
        self.height = UInt32(clamping: picture.height)
    }
}

extension ProfileImage {
    /// A picture a client names as media (its kind aside).
    init(_ media: Courier_V1_Media) {
        self.init(
            sha256: media.sha256,
            size: Int64(clamping: media.size),
            mime: media.mime,
            width: Int(media.width),
            height: Int(media.height)
        )
    }
}

extension Courier_V1_ReceiptMark {
    /// How far a member received and read a conversation, as a history page carries it.
    init(_ mark: ReceiptMark) {
        self.init()
        self.user = mark.user
        self.deliveredSeq = mark.deliveredSeq
        self.readSeq = mark.readSeq
        self.joinedSeq = mark.joinedSeq
    }
}
