import CourierProtocol
import CourierStore
import CourierWire
import Foundation
import NIOCore
import Synchronization

/// The compat port: the source notes' packets (a JSON header, CRLF, `size` payload bytes), translated to and from
/// the session's envelopes. docs/PROTOCOL.md lists the packets.
///
/// One instance serves one connection: it remembers what the client asked for at `auth` (acknowledgements,
/// receipts and typing) and which packet each request id came from, to word the answers.
final class CompatTransport: SessionTransport {
    typealias Inbound = CompatInput
    typealias Outbound = CompatOutput

    /// The packet types whose payload is media, streamed into the blob store as it arrives, and the kind each is.
    static let mediaTypes: [String: Courier_V1_Media.Kind] = [
        "img": .image, "voice": .voice, "video": .video, "file": .file,
    ]

    private struct State {
        /// Whether the client sends `received` packets; otherwise each event counts as acknowledged once written.
        var acknowledges = false
        /// Whether the client asked for receipts, typing and presence.
        var ephemeral = false
        /// The authenticated user's name, from the welcome.
        var user = ""
        var nextRequestID: UInt64 = 1
        /// The packet type and message id behind each request still waiting for its answer.
        var pending: [UInt64: (type: String, id: String)] = [:]
        /// A media packet's payload is arriving: handed to the connection, or (when its header was refused) skipped.
        var inline: Inline?

        enum Inline {
            case receiving
            case skipping
        }
    }

    private let state = Mutex(State())

    var name: String { "compat" }
    var streamsMediaInline: Bool { true }
    var sendsRawBodies: Bool { false }

    func interpret(_ input: CompatInput) -> TransportInput<CompatOutput> {
        switch input {
        case .skipped(let skip):
            let message = "skipped \(skip.byteCount) bytes of a corrupt packet: \(skip.reason)"
            let inline = self.state.withLock { state in
                defer { state.inline = nil }
                return state.inline
            }
            if case .receiving? = inline { return .inlineAbandoned(code: ErrorCodes.packetSkipped, message: message) }
            return .refuse(code: ErrorCodes.packetSkipped, message: message, id: "")
        case .packet(let frame):
            if Self.mediaTypes[frame.header.type] != nil {
                // A media packet with no payload.
                return .refuse(code: ErrorCodes.emptyMessage, message: "a media packet with no bytes", id: "")
            }
            return self.interpretPacket(frame)
        case .head(let header):
            let accepted = self.interpretMedia(header)
            self.state.withLock { state in
                guard header.size > 0 else { return }
                if case .inlineMedia = accepted { state.inline = .receiving } else { state.inline = .skipping }
            }
            return accepted
        case .body(let bytes, let isLast):
            let inline = self.state.withLock { state in
                defer { if isLast { state.inline = nil } }
                return state.inline
            }
            guard case .receiving? = inline else { return .ignore }
            return .inlineBytes(bytes, isLast: isLast)
        }
    }

    /// The head of a media packet (`img`, `voice`, `video`, `file`): a send whose bytes follow.
    private func interpretMedia(_ header: CompatHeader) -> TransportInput<CompatOutput> {
        guard let kind = Self.mediaTypes[header.type] else {
            return .refuse(code: ErrorCodes.unsupported, message: "\"\(header.type)\" packets carry no payload", id: "")
        }
        guard header.size > 0 else {
            return .refuse(code: ErrorCodes.emptyMessage, message: "a media packet with no bytes", id: "")
        }
        var addressing = header
        addressing.size = 0
        var input = self.interpretPacket(CompatFrame(header: addressing, payload: ByteBuffer()))
        guard case .envelope(var envelope) = input else { return input }
        var media = Courier_V1_Media()
        media.kind = kind
        media.size = UInt64(header.size)
        if case .string(let mime)? = header["mime"] {
            // Refused before the bytes are taken (and counted against the quota), not after.
            guard mime.isEmpty || (mime.utf8.count <= SessionStateMachine.maxMimeBytes && MediaType(mime) != nil) else {
                return .refuse(
                    code: ErrorCodes.invalidRequest,
                    message: "mime is one media type (type/subtype and parameters, RFC 9110; no list), at most "
                        + "\(SessionStateMachine.maxMimeBytes) bytes",
                    id: envelope.send.id
                )
            }
            media.mime = mime
        }
        if case .string(let name)? = header["name"] { media.name = name }
        envelope.send.body.media = media
        input = .inlineMedia(envelope, size: Int64(header.size))
        return input
    }

    private func interpretPacket(_ frame: CompatFrame) -> TransportInput<CompatOutput> {
        let header = frame.header
        var envelope = ClientEnvelope()
        let id: String
        switch header["id"] {
        case nil: id = ""
        case .string(let string)?: id = string
        case .integer(let number)?: id = String(number)
        default: return .refuse(code: ErrorCodes.invalidRequest, message: "\"id\" is a string", id: "")
        }
        func conversation() -> Courier_V1_Conversation? {
            var conversation = Courier_V1_Conversation()
            if case .string(let user)? = header["to"] {
                conversation.user = user
            } else if case .string(let group)? = header["group"] {
                conversation.group = group
            } else {
                return nil
            }
            return conversation
        }
        func integer(_ key: String) -> UInt64? {
            switch header[key] {
            case .integer(let value)? where value >= 0: UInt64(value)
            case .string(let text)?: UInt64(text)
            default: nil
            }
        }
        let missingPeer = TransportInput<CompatOutput>.refuse(
            code: ErrorCodes.invalidRequest,
            message: "a \"\(header.type)\" packet names \"to\" (a user) or \"group\"",
            id: id
        )
        switch header.type {
        case "auth":
            var hello = Courier_V1_Hello()
            if case .string(let token)? = header["token"] {
                hello.token = token
            } else if case .string(let user)? = header["user"], case .string(let password)? = header["password"] {
                hello.password.user = user
                hello.password.password = password
            }
            if case .string(let device)? = header["device"] { hello.deviceName = device }
            let acknowledges = header["ack"] == .bool(true)
            let ephemeral = header["ephemeral"] == .bool(true)
            hello.ephemeral = ephemeral
            hello.ackedOnWrite = !acknowledges
            if let cursor = integer("cursor") {
                hello.cursor = cursor
                hello.resume = true
            }
            self.state.withLock { state in
                state.acknowledges = acknowledges
                state.ephemeral = ephemeral
            }
            envelope.hello = hello
        case "img", "voice", "video", "file":
            guard let to = conversation() else { return missingPeer }
            envelope.send.id = id
            envelope.send.to = to
        case "txt":
            guard let to = conversation() else { return missingPeer }
            guard let text = String(validating: frame.payload.readableBytesView, as: UTF8.self) else {
                return .refuse(code: ErrorCodes.invalidRequest, message: "the text is not UTF-8", id: id)
            }
            envelope.send.id = id
            envelope.send.to = to
            envelope.send.body.text = text
            if let seq = integer("reply_seq") {
                envelope.send.replyTo.seq = seq
            } else if case .string(let replyID)? = header["reply_id"] {
                envelope.send.replyTo.id = replyID
                if case .string(let from)? = header["reply_from"] { envelope.send.replyTo.from = from }
            }
        case "edit":
            guard let text = String(validating: frame.payload.readableBytesView, as: UTF8.self) else {
                return .refuse(code: ErrorCodes.invalidRequest, message: "the text is not UTF-8", id: id)
            }
            // The user's own message, by its id, or by place.
            if let to = conversation() { envelope.edit.message.conversation = to }
            envelope.edit.message.seq = integer("seq") ?? 0
            envelope.edit.message.id = id
            envelope.edit.text = text
        case "react":
            if let to = conversation() { envelope.react.message.conversation = to }
            envelope.react.message.seq = integer("seq") ?? 0
            envelope.react.message.id = id
            if case .string(let from)? = header["from"] { envelope.react.message.from = from }
            guard case .string(let key)? = header["key"] else {
                return .refuse(code: ErrorCodes.invalidRequest, message: "a \"react\" packet names its \"key\"", id: id)
            }
            envelope.react.key = key
            envelope.react.off = header["off"] == .bool(true)
        case "received":
            guard let cursor = integer("cursor") else {
                return .refuse(code: ErrorCodes.invalidRequest, message: "\"received\" needs a \"cursor\"", id: "")
            }
            envelope.ack.cursor = cursor
            return .envelope(envelope)
        case "read":
            guard let to = conversation() else { return missingPeer }
            envelope.markRead.conversation = to
            envelope.markRead.upToSeq = integer("seq") ?? 0
        case "typing":
            guard let to = conversation() else { return missingPeer }
            envelope.typing.conversation = to
            envelope.typing.typing = header["typing"] != .bool(false)
        case "recall":
            guard let to = conversation() else { return missingPeer }
            envelope.recall.conversation = to
            envelope.recall.id = id
        case "ping":
            return .reply([.packet(CompatFrame(type: "pong", payload: ByteBuffer()))])
        default:
            // An envelope with no request: the session answers `unsupported`.
            break
        }
        envelope.requestID = self.state.withLock { state in
            defer { state.nextRequestID += 1 }
            state.pending[state.nextRequestID] = (header.type, id)
            return state.nextRequestID
        }
        return .envelope(envelope)
    }

    func frames(for envelope: ServerEnvelope) throws -> [TransportOutput<CompatOutput>] {
        if case .events(let events) = envelope.body { return self.outputs(for: events) }
        return self.packets(for: envelope).map { .frame(.packet($0)) }
    }

    func frame(for output: StreamOutput) -> CompatOutput? { nil }

    /// Events as packets; a media message's bytes follow its header inline, streamed from the blob store.
    private func outputs(for events: Courier_V1_Events) -> [TransportOutput<CompatOutput>] {
        let (acknowledges, ephemeral, user) = self.state.withLock { ($0.acknowledges, $0.ephemeral, $0.user) }
        var outputs: [TransportOutput<CompatOutput>] = []
        for event in events.events {
            guard let packet = self.frame(for: event, receipts: ephemeral, user: user) else { continue }
            if case .message(let message) = event.kind, case .media(let media)? = message.body.content {
                var header = packet.header
                header.size = Int(media.size)
                outputs.append(.frame(.head(header)))
                outputs.append(.media(sha256: media.sha256, size: Int64(media.size), wrap: { .body($0) }, end: .end))
            } else {
                outputs.append(.frame(.packet(packet)))
            }
        }
        if events.caughtUp, acknowledges {
            outputs.append(
                .frame(
                    .packet(
                        CompatFrame(
                            type: "synced",
                            payload: ByteBuffer(),
                            fields: ["cursor": .integer(Int64(clamping: events.events.last?.cursor ?? 0))]
                        )
                    )
                )
            )
        }
        return outputs
    }

    private func packets(for envelope: ServerEnvelope) -> [CompatFrame] {
        let request = self.state.withLock { $0.pending.removeValue(forKey: envelope.requestID) }
        let empty = ByteBuffer()
        switch envelope.body {
        case .welcome(let welcome):
            self.state.withLock { $0.user = welcome.user }
            return [
                CompatFrame(
                    type: "welcome",
                    payload: empty,
                    fields: [
                        "user": .string(welcome.user),
                        "token": .string(welcome.token),
                        "expires": .string(Self.time(welcome.tokenExpiresMs)),
                        "cursor": .integer(Int64(clamping: welcome.cursor)),
                    ]
                )
            ]
        case .sendAck(let ack):
            var fields = Self.fields(ack.conversation)
            fields["id"] = .string(ack.id)
            fields["seq"] = .integer(Int64(clamping: ack.seq))
            fields["time"] = .string(Self.time(ack.timeMs))
            if ack.duplicate { fields["duplicate"] = .bool(true) }
            return [CompatFrame(type: "ack", payload: empty, fields: fields)]
        case .error(let error):
            var fields: [String: JSONValue] = ["code": .string(error.code), "message": .string(error.message)]
            let id = error.id.isEmpty ? (request?.id ?? "") : error.id
            if !id.isEmpty { fields["id"] = .string(id) }
            if let type = request?.type { fields["request"] = .string(type) }
            if error.retryAfterMs > 0 { fields["retry_after_ms"] = .integer(Int64(error.retryAfterMs)) }
            return [CompatFrame(type: "error", payload: empty, fields: fields)]
        case .typing(let notice):
            var fields = Self.fields(notice.conversation)
            fields["from"] = .string(notice.user)
            fields["typing"] = .bool(notice.typing)
            return [CompatFrame(type: "typing", payload: empty, fields: fields)]
        case .presence(let notice):
            var fields: [String: JSONValue] = ["user": .string(notice.user), "online": .bool(notice.online)]
            if notice.lastSeenMs > 0 { fields["last_seen"] = .string(Self.time(notice.lastSeenMs)) }
            return [CompatFrame(type: "presence", payload: empty, fields: fields)]
        case .done:
            guard let request, request.type != "typing" else { return [] }
            var fields: [String: JSONValue] = ["request": .string(request.type)]
            if !request.id.isEmpty { fields["id"] = .string(request.id) }
            return [CompatFrame(type: "done", payload: empty, fields: fields)]
        case .uploadReady, .uploadDone, .fetchReady, .events, .history, .unread, .versions, .search, .devices, .user,
            .profiles, .groupMembers, .groupsLeft, .blocks, .pins, .reactors, nil:
            return []
        }
    }

    /// One event as a compat packet; nil for receipts when the client did not ask for them.
    private func frame(for event: Courier_V1_Event, receipts: Bool, user: String) -> CompatFrame? {
        let cursor = JSONValue.integer(Int64(clamping: event.cursor))
        switch event.kind {
        case .message(let message):
            var fields = Self.fields(message.conversation)
            fields["from"] = .string(message.from)
            // A direct message names its recipient in "to": this user, or the peer for its own messages.
            if case .user(let peer)? = message.conversation.peer {
                fields["to"] = .string(message.from == user ? peer : user)
            }
            fields["seq"] = .integer(Int64(clamping: message.seq))
            fields["time"] = .string(Self.time(message.timeMs))
            fields["id"] = .string(message.id)
            fields["cursor"] = cursor
            if message.recalled { fields["recalled"] = .bool(true) }
            if message.editedMs > 0 { fields["edited"] = .string(Self.time(message.editedMs)) }
            if !message.body.forwardedFrom.isEmpty { fields["forwarded_from"] = .string(message.body.forwardedFrom) }
            if message.hasReplyTo {
                let reply = message.replyTo
                var quoted: [String: JSONValue] = ["seq": .integer(Int64(clamping: reply.seq))]
                if reply.visible {
                    quoted["id"] = .string(reply.id)
                    quoted["from"] = .string(reply.from)
                    if reply.recalled { quoted["recalled"] = .bool(true) }
                }
                fields["reply_to"] = .object(quoted)
            }
            if case .media(let media)? = message.body.content {
                // The header of a media packet; the caller streams its bytes.
                let type = Self.mediaTypes.first { $0.value == media.kind }?.key ?? "file"
                fields["sha256"] = .string(media.sha256)
                fields["mime"] = .string(media.mime.isEmpty ? MediaAccess.defaultType : media.mime)
                if !media.name.isEmpty { fields["name"] = .string(media.name) }
                if media.durationMs > 0 { fields["duration_ms"] = .integer(Int64(media.durationMs)) }
                if media.width > 0 { fields["width"] = .integer(Int64(media.width)) }
                if media.height > 0 { fields["height"] = .integer(Int64(media.height)) }
                if !media.caption.isEmpty { fields["caption"] = .string(media.caption) }
                return CompatFrame(type: type, payload: ByteBuffer(), fields: fields)
            }
            return CompatFrame(type: "txt", payload: ByteBuffer(string: message.body.text), fields: fields)
        case .recall(let recall):
            var fields = Self.fields(recall.conversation)
            fields["seq"] = .integer(Int64(clamping: recall.seq))
            fields["id"] = .string(recall.id)
            fields["by"] = .string(recall.by)
            fields["cursor"] = cursor
            return CompatFrame(type: "recall", payload: ByteBuffer(), fields: fields)
        case .receipt(let receipt):
            guard receipts else { return nil }
            var fields = Self.fields(receipt.conversation)
            fields["user"] = .string(receipt.user)
            fields["kind"] = .string(receipt.kind == .read ? "read" : "delivered")
            fields["seq"] = .integer(Int64(clamping: receipt.upToSeq))
            fields["cursor"] = cursor
            return CompatFrame(type: "receipt", payload: ByteBuffer(), fields: fields)
        case .edit(let message):
            // The new text (a media message's caption) is the payload.
            var fields = Self.fields(message.conversation)
            fields["from"] = .string(message.from)
            fields["seq"] = .integer(Int64(clamping: message.seq))
            fields["id"] = .string(message.id)
            fields["time"] = .string(Self.time(message.timeMs))
            fields["cursor"] = cursor
            if message.recalled {
                fields["recalled"] = .bool(true)
            } else {
                fields["edited"] = .string(Self.time(message.editedMs))
            }
            let text: String
            if case .media(let media)? = message.body.content {
                fields["media"] = .bool(true)
                text = media.caption
            } else {
                text = message.body.text
            }
            return CompatFrame(type: "edit", payload: ByteBuffer(string: text), fields: fields)
        case .reaction(let reaction):
            var fields = Self.fields(reaction.message.conversation)
            fields["seq"] = .integer(Int64(clamping: reaction.message.seq))
            fields["id"] = .string(reaction.message.id)
            fields["from"] = .string(reaction.message.from)
            fields["user"] = .string(reaction.user)
            fields["key"] = .string(reaction.key)
            fields["on"] = .bool(reaction.on)
            fields["cursor"] = cursor
            return CompatFrame(type: "reaction", payload: ByteBuffer(), fields: fields)
        case .profile(let profile):
            var fields: [String: JSONValue] = ["user": .string(profile.user), "cursor": cursor]
            if !profile.displayName.isEmpty { fields["name"] = .string(profile.displayName) }
            if profile.hasAvatar {
                fields["avatar"] = .string(profile.avatar.sha256)
                fields["thumbnail"] = .string(profile.thumbnail.sha256)
            }
            return CompatFrame(type: "profile", payload: ByteBuffer(), fields: fields)
        case .role(let change):
            let role =
                switch change.role {
                case .owner: "owner"
                case .admin: "admin"
                default: "member"
                }
            return CompatFrame(
                type: "role",
                payload: ByteBuffer(),
                fields: [
                    "group": .string(change.group),
                    "user": .string(change.user),
                    "role": .string(role),
                    "seq": .integer(Int64(clamping: change.seq)),
                    "cursor": cursor,
                ]
            )
        case .title(let change):
            return CompatFrame(
                type: "title",
                payload: ByteBuffer(),
                fields: [
                    "group": .string(change.group),
                    "title": .string(change.title),
                    "by": .string(change.by),
                    "seq": .integer(Int64(clamping: change.seq)),
                    "cursor": cursor,
                ]
            )
        case .notify(let change):
            var fields = Self.fields(change.conversation)
            let level =
                switch change.level {
                case .mentions: "mentions"
                case .none: "none"
                default: "all"
                }
            fields["level"] = .string(level)
            fields["cursor"] = cursor
            return CompatFrame(type: "notify", payload: ByteBuffer(), fields: fields)
        case .pin(let change):
            var fields = Self.fields(change.message.conversation)
            fields["seq"] = .integer(Int64(clamping: change.message.seq))
            fields["id"] = .string(change.message.id)
            fields["from"] = .string(change.message.from)
            fields["by"] = .string(change.by)
            fields["pinned"] = .bool(change.pinned)
            fields["cursor"] = cursor
            return CompatFrame(type: "pin", payload: ByteBuffer(), fields: fields)
        case .hidden(let change):
            var fields = Self.fields(change.conversation)
            fields["seq"] = .integer(Int64(clamping: change.seq))
            fields["cursor"] = cursor
            return CompatFrame(type: "hidden", payload: ByteBuffer(), fields: fields)
        case .membership(let change):
            return CompatFrame(
                type: "member",
                payload: ByteBuffer(),
                fields: [
                    "group": .string(change.group),
                    "user": .string(change.user),
                    "change": .string(change.change == .left ? "left" : "joined"),
                    "seq": .integer(Int64(clamping: change.seq)),
                    "cursor": cursor,
                ]
            )
        case nil:
            return nil
        }
    }

    func closingFrames(framingError: any Error) -> [CompatOutput] {
        if (framingError as? CourierWireError)?.code == .truncated { return [] }
        return self.closingFrames(code: ErrorCodes.framingError, message: "\(framingError)")
    }

    func closingFrames(code: String, message: String) -> [CompatOutput] {
        [
            .packet(
                CompatFrame(
                    type: "error",
                    payload: ByteBuffer(),
                    fields: ["code": .string(code), "message": .string(message)]
                )
            )
        ]
    }

    /// The conversation as this user would address a packet to it: `"to"` (the other user) or `"group"`.
    private static func fields(_ conversation: Courier_V1_Conversation) -> [String: JSONValue] {
        switch conversation.peer {
        case .group(let group)?: ["group": .string(group)]
        case .user(let user)?: ["to": .string(user)]
        case nil: [:]
        }
    }

    /// RFC 3339 in UTC with milliseconds: `2026-11-22T14:59:39.123Z`.
    static func time(_ ms: Int64) -> String {
        Date(timeIntervalSince1970: Double(ms) / 1000).formatted(
            Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: TimeZone(identifier: "UTC")!)
        )
    }
}
