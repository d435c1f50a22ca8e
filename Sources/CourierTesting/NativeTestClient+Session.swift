public import CourierProtocol
public import CourierWire
public import NIOSSL

/// The session protocol through a bare native client: logging in, sending texts, reading events.
extension NativeTestClient {
    /// Connects to a native port and logs in with a password (by default "pw-" + the user's name).
    public static func login(
        port: Int,
        _ user: String,
        password: String? = nil,
        device: String = "test",
        ephemeral: Bool = false,
        tls: TLSConfiguration? = nil
    ) async throws -> (NativeTestClient, Courier_V1_Welcome) {
        let client = try await NativeTestClient.connect(port: port, tls: tls)
        return (client, try await client.logIn(user, password: password, device: device, ephemeral: ephemeral))
    }

    /// Connects with a device token, resuming after `cursor` if given.
    public static func resume(
        port: Int,
        token: String,
        cursor: UInt64? = nil,
        tls: TLSConfiguration? = nil
    ) async throws -> (NativeTestClient, Courier_V1_Welcome) {
        let client = try await NativeTestClient.connect(port: port, tls: tls)
        var hello = ClientEnvelope()
        hello.hello.token = token
        if let cursor {
            hello.hello.cursor = cursor
            hello.hello.resume = true
        }
        try await client.send(hello)
        return (client, try await client.expect("a welcome") { $0.welcome })
    }

}

/// What the session tests need of a client, whichever way it reaches the server (``NativeTestClient``,
/// ``WebSocketTestClient``): sending an envelope, and reading until one matches.
public protocol EnvelopeTestClient: Actor {
    /// Sends an envelope, giving it the next request id unless it has one; returns the request id used.
    @discardableResult
    func send(_ envelope: ClientEnvelope) async throws -> UInt64

    /// Reads until an envelope matches, keeping the others for later reads.
    func expect<T: Sendable>(
        timeout: Duration,
        _ what: String,
        _ match: @Sendable (ServerEnvelope) -> T?
    ) async throws -> T

    /// Sends a media stream's frame (a chunk, a window update, a reset).
    func send(frame: NativeFrame) async throws

    /// Reads until a media stream's frame matches, keeping envelopes and other frames for later reads.
    func expectFrame(
        timeout: Duration,
        _ what: String,
        where match: @Sendable (NativeFrame) -> Bool
    ) async throws -> NativeFrame
}

extension NativeTestClient: EnvelopeTestClient {}
extension WebSocketTestClient: EnvelopeTestClient {}

extension EnvelopeTestClient {
    /// Sends a password `hello` (by default the password "pw-" + the user's name) and waits for the welcome.
    public func logIn(
        _ user: String,
        password: String? = nil,
        device: String,
        ephemeral: Bool = false
    ) async throws -> Courier_V1_Welcome {
        var hello = ClientEnvelope()
        hello.hello.password.user = user
        hello.hello.password.password = password ?? "pw-" + user
        hello.hello.deviceName = device
        hello.hello.ephemeral = ephemeral
        try await self.send(hello)
        return try await self.expect(timeout: Patience.reply, "a welcome") { $0.welcome }
    }

    /// Sends a request built by `build` and waits for its answer.
    public func request(_ build: (inout ClientEnvelope) -> Void) async throws -> ServerEnvelope {
        var envelope = ClientEnvelope()
        build(&envelope)
        let requestID = try await self.send(envelope)
        return try await self.expect(timeout: Patience.reply, "the answer to \(requestID)") {
            $0.requestID == requestID ? $0 : nil
        }
    }

    /// Sends a text and waits for its answer.
    public func sendText(
        _ text: String,
        to peer: Courier_V1_Conversation,
        id: String = ""
    ) async throws
        -> ServerEnvelope
    {
        var envelope = ClientEnvelope()
        envelope.send.id = id
        envelope.send.to = peer
        envelope.send.body.text = text
        let requestID = try await self.send(envelope)
        return try await self.expect(timeout: Patience.reply, "the answer to request \(requestID)") {
            $0.requestID == requestID ? $0 : nil
        }
    }

    /// Reads events until `count` messages have arrived, acknowledging each page.
    public func messages(_ count: Int, ack: Bool = true) async throws -> [Courier_V1_Message] {
        var messages: [Courier_V1_Message] = []
        while messages.count < count {
            let events = try await self.expect(timeout: Patience.reply, "events") { envelope -> [Courier_V1_Event]? in
                guard case .events(let events)? = envelope.body, !events.events.isEmpty else { return nil }
                return events.events
            }
            messages += events.compactMap {
                $0.kind.flatMap { if case .message(let message) = $0 { message } else { nil } }
            }
            if ack, let last = events.last {
                var envelope = ClientEnvelope()
                envelope.ack.cursor = last.cursor
                try await self.send(envelope)
            }
        }
        return messages
    }
}

extension Courier_V1_Conversation {
    /// A direct conversation, by the other user.
    public static func user(_ name: String) -> Self {
        var conversation = Self()
        conversation.user = name
        return conversation
    }

    /// A group's conversation.
    public static func group(_ name: String) -> Self {
        var conversation = Self()
        conversation.group = name
        return conversation
    }
}

extension ServerEnvelope {
    public var welcome: Courier_V1_Welcome? { if case .welcome(let welcome)? = self.body { welcome } else { nil } }
    public var ack: Courier_V1_SendAck? { if case .sendAck(let ack)? = self.body { ack } else { nil } }
    public var failure: Courier_V1_Error? { if case .error(let error)? = self.body { error } else { nil } }
}
