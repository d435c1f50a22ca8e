import CourierProtocol
public import Foundation

/// Forwarding a message, and who gave a message's reactions.
extension CourierClient {
    /// Who gave one reaction on a message: how many, and the first of them (the server lists at most its
    /// `max-reactors-listed`), the earliest first.
    public struct Reactors: Hashable, Sendable {
        public var key: String
        public var count: Int
        public var users: [String]
    }

    /// Who gave a message's reactions: each key once, the first given first.
    public func reactors(of message: MessageReference) async throws -> [Reactors] {
        var envelope = ClientEnvelope()
        envelope.reactors.message = Courier_V1_MessageRef(message)
        let answer = try await self.request(envelope)
        guard case .reactors(let reactors)? = answer.body else { throw Self.unexpected(answer) }
        return reactors.entries.map { Reactors(key: $0.key, count: Int($0.count), users: $0.users) }
    }

    /// Where a forwarded copy went: its id, conversation and seq.
    public struct Forwarded: Hashable, Sendable {
        public var id: String
        public var conversation: Conversation
        public var seq: UInt64
    }

    /// Sends a copy of a message this user can see to a conversation: the server copies its body as last edited
    /// (media without uploading it again) and marks it forwarded from its first sender. Answered once it is
    /// committed; a second call with the same `id` answers with the first copy and stores nothing.
    ///
    /// - Throws: `unknown-message` (no such message this user can see), `message-recalled`, or any refusal a send
    ///   gets.
    public func forward(
        _ message: MessageReference,
        to conversation: Conversation,
        id: String = UUID().uuidString
    ) async throws -> Forwarded {
        var envelope = ClientEnvelope()
        envelope.send.id = id
        envelope.send.to = Courier_V1_Conversation(conversation)
        envelope.send.forward = Courier_V1_MessageRef(message)
        let answer = try await self.request(envelope)
        guard case .sendAck(let ack)? = answer.body else { throw Self.unexpected(answer) }
        return Forwarded(id: ack.id, conversation: Conversation(received: ack.conversation), seq: ack.seq)
    }
}
