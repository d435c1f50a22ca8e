import CourierProtocol
import CourierWire
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle

// What the server sends: answers to sends, events (stored, acknowledged, reported), notices.
extension CourierClient {

    /// Reads frames until the connection ends.
    func read(
        _ iterator: inout NIOAsyncChannelInboundStream<NativeFrame>.AsyncIterator,
        link: Link,
        user: String
    ) async throws {
        while let frame = try await iterator.next() {
            switch frame.kind {
            case .ping:
                try await link.write(frame: .pong(frame.pingData ?? 0))
            case .goaway:
                return
            case .message:
                let envelope = try frame.envelope(as: ServerEnvelope.self)
                try await self.handle(envelope, link: link, user: user)
            case .mediaChunk:
                link.deliver(frame.payload, on: frame.streamID, end: frame.flags.contains(.endStream))
            case .windowUpdate where frame.streamID != 0:
                link.grant(frame.streamID, Int(frame.windowIncrement ?? 0))
            case .resetStream:
                link.closeStream(frame.streamID, reset: true)
            default:
                continue
            }
        }
    }

    func handle(_ envelope: ServerEnvelope, link: Link, user: String) async throws {
        switch link.route(envelope) {
        case .request?:
            return
        case .send(let id)?:
            try await self.handleSendAnswer(envelope, id: id, link: link, user: user)
            return
        case nil:
            break
        }
        switch envelope.body {
        case .events(let events):
            try await self.handle(events, link: link, user: user)
        case .typing(let notice):
            self.emit(
                .typing(
                    conversation: Conversation(received: notice.conversation),
                    user: notice.user,
                    typing: notice.typing
                )
            )
        case .presence(let notice):
            self.emit(
                .presence(
                    user: notice.user,
                    online: notice.online,
                    lastSeen: notice.lastSeenMs > 0
                        ? Date(timeIntervalSince1970: Double(notice.lastSeenMs) / 1000) : nil
                )
            )
        case .error(let error):
            self.logger.notice(
                "the server reported an error",
                metadata: ["code": "\(error.code)", "reason": "\(error.message)"]
            )
        default:
            break
        }
    }

    /// Codes after which resending the same message later can succeed.
    static let retryableCodes: Set<String> = [ErrorCodes.storageFailed, ErrorCodes.internalError]

    func handleSendAnswer(_ envelope: ServerEnvelope, id: String, link: Link, user: String) async throws {
        switch envelope.body {
        case .sendAck(let ack):
            // Recorded in batches by recordAcknowledgements(), which then emits `.sent`.
            self.state.withLock { _ = $0.recording.insert(id) }
            self.acknowledgements.append(
                .init(
                    id: id,
                    conversation: Conversation(received: ack.conversation),
                    seq: ack.seq,
                    time: Date(timeIntervalSince1970: Double(ack.timeMs) / 1000),
                    from: user
                )
            )
        case .error(let error) where Self.retryableCodes.contains(error.code):
            // Sent again by the outbox loop when the server said (at least 100 ms on).
            let delay = Duration.milliseconds(Int64(max(error.retryAfterMs, 100)))
            self.state.withLock { $0.retries[id] = .now + delay }
            self.outboxChanged()
        case .error(let error):
            try await self.store.remove(id: id)
            self.state.withLock { _ = $0.takenOver.removeValue(forKey: id) }
            self.emit(.sendFailed(id: id, code: error.code, message: error.message))
        default:
            break
        }
    }

    /// Stores a page of events, then acknowledges it, and reports each.
    func handle(_ events: Courier_V1_Events, link: Link, user: String) async throws {
        if let last = events.events.last {
            var messages: [ChatMessage] = []
            var recalls: [(Conversation, UInt64)] = []
            var edits: [ChatMessage] = []
            var reactions: [(change: ReactionChange, cursor: UInt64)] = []
            var hides: [(Conversation, UInt64)] = []
            var others: [ClientEvent] = []
            for event in events.events {
                switch event.kind {
                case .message(let message)?:
                    messages.append(ChatMessage(message))
                case .recall(let recall)?:
                    let conversation = Conversation(received: recall.conversation)
                    recalls.append((conversation, recall.seq))
                    others.append(.recalled(conversation: conversation, seq: recall.seq, id: recall.id, by: recall.by))
                case .receipt(let receipt)?:
                    others.append(
                        .receipt(
                            conversation: Conversation(received: receipt.conversation),
                            user: receipt.user,
                            read: receipt.kind == .read,
                            upToSeq: receipt.upToSeq
                        )
                    )
                case .membership(let change)?:
                    others.append(.membership(group: change.group, user: change.user, joined: change.change == .joined))
                case .edit(let message)?:
                    let edited = ChatMessage(message)
                    edits.append(edited)
                    others.append(.edited(edited))
                case .reaction(let reaction)?:
                    let change = ReactionChange(
                        conversation: Conversation(received: reaction.message.conversation),
                        seq: reaction.message.seq,
                        id: reaction.message.id,
                        from: reaction.message.from,
                        user: reaction.user,
                        key: reaction.key,
                        on: reaction.on
                    )
                    reactions.append((change, event.cursor))
                    others.append(.reaction(change))
                case .profile(let profile)?:
                    others.append(.profile(ProfileInfo(profile)))
                case .role(let change)?:
                    others.append(.role(group: change.group, user: change.user, role: GroupRoleInfo(change.role)))
                case .title(let change)?:
                    others.append(.groupTitle(group: change.group, title: change.title, by: change.by))
                case .notify(let change)?:
                    // A level this client does not know is one it cannot follow.
                    if let level = NotifyLevel(change.level) {
                        others.append(.notify(conversation: Conversation(received: change.conversation), level: level))
                    }
                case .pin(let change)?:
                    others.append(
                        .pinned(
                            conversation: Conversation(received: change.message.conversation),
                            seq: change.message.seq,
                            id: change.message.id,
                            by: change.by,
                            pinned: change.pinned
                        )
                    )
                case .hidden(let change)?:
                    let conversation = Conversation(received: change.conversation)
                    hides.append((conversation, change.seq))
                    others.append(.hidden(conversation: conversation, seq: change.seq))
                case nil:
                    break
                }
            }
            // Durably stored first, then acknowledged: an event is never acked before it is on this disk.
            try await self.store.store(
                messages,
                recalls: recalls,
                edits: edits,
                reactions: reactions,
                hides: hides,
                user: user,
                cursor: last.cursor
            )
            self.state.withLock { $0.cursor = max($0.cursor ?? 0, last.cursor) }
            // Every message is new to this client (the page follows its own cursor), even where another client of
            // the store stored it first; one this client sent, which the server passes back when it has lost track
            // of it (a later connection, a resend), is reported by `.sent` instead.
            let own = self.state.withLock { state in
                Set(
                    messages.filter {
                        $0.from.lowercased() == user.lowercased() && state.sentByThisClient.contains($0.id)
                    }
                    .map(\.id)
                )
            }
            for message in messages where !own.contains(message.id) {
                self.emit(.message(message))
            }
            for event in others { self.emit(event) }
            var ack = ClientEnvelope()
            ack.ack.cursor = last.cursor
            try await link.write(ack)
        }
        if events.caughtUp { self.emit(.caughtUp) }
    }
}
