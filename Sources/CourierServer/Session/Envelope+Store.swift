import CourierProtocol
import CourierStore

extension Courier_V1_Message {
    /// A stored message as the protocol carries it.
    init(_ message: StoredMessage) {
        self.init()
        self.id = message.id
        self.from = message.from
        self.conversation = Courier_V1_Conversation(message.conversation)
        self.seq = message.seq
        self.timeMs = message.timeMs
        self.recalled = message.recalled
        if !message.recalled {
            // The store keeps the body as the client's serialized `Body`; a body this server cannot parse is
            // delivered empty rather than dropped, so the sequence stays whole.
            self.body = (try? Courier_V1_Body(serializedBytes: message.body)) ?? Courier_V1_Body()
        }
    }
}

extension Courier_V1_Event {
    /// A stored log entry as the protocol carries it.
    init(_ event: StoredEvent) {
        self.init()
        self.cursor = event.cursor
        switch event.kind {
        case .message(let message):
            self.message = Courier_V1_Message(message)
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
        }
    }
}
