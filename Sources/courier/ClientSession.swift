import ArgumentParser
import CourierClient
import CourierStore
import Foundation
import Logging

/// One client command's connection: the user's SDK client on its local store, running until the command is done.
///
/// It logs in with the saved token when there is one, else with the password, and saves the token it gets. Once
/// connected it sends whatever the outbox holds (messages queued while the server was away) before the command's
/// own work.
///
/// Every command of a user on this machine opens the same local store, and they may run at once (a chat window, and
/// scripts sending beside it): each is a client of its own on the same device. SQLite serializes their writes; each
/// sends the messages written through it and takes over those of a command that is gone; the chat receives every
/// message, those the commands beside it sent included (the SDK's "Several clients may share one local store").
/// Events are read by one task at a time (the command's, or the chat's event reader).
final class ClientSession: @unchecked Sendable {
    let options: ClientOptions
    let paths: ClientPaths
    let client: CourierClient
    /// Whether this session logs in with the password (`courier login`): a refusal then keeps the saved token.
    let freshLogin: Bool
    /// Whether this session makes the account (`courier signup`).
    let signingUp: Bool
    /// Whether the client has connected (the chat's sign-outs are counted apart from wrong passwords at its start).
    var connectedOnce = false
    private var inputs: AsyncStream<Input>.AsyncIterator
    private let sink: AsyncStream<Input>.Continuation
    /// How long to wait for the first connection (the SDK's connect timeout covers TCP; this also the login, and
    /// waiting while the server is full).
    static let connectTimeout: Duration = .seconds(30)
    /// How long to wait for the server to acknowledge what the outbox holds; what is not acknowledged by then stays
    /// queued.
    static let outboxTimeout: Duration = .seconds(60)
    /// How often the session's clock ticks (the granularity of its deadlines).
    static let tick: Duration = .milliseconds(200)

    /// The client's events, and the session's clock.
    private enum Input: Sendable {
        case event(ClientEvent)
        case tick
    }

    /// What came of connecting.
    enum Outcome {
        case connected
        /// The server could not be reached (the reason is the first failure's, in plain words).
        case unreachable(String)
    }

    /// Runs `body` with a session, and closes it (stopping the client) however `body` ends.
    ///
    /// - Parameters:
    ///   - freshLogin: Logs in with the password even when a token is saved, renewing the device the store holds a
    ///     token of (a new token for the same device) or making one.
    ///   - notices: Asks the server for typing, presence and receipt notices.
    ///   - events: Receives the user's events (the chat); a command that only sends or asks does not.
    ///   - signUp: Makes the account (`courier signup`): its password and invitation.
    static func run<T: Sendable>(
        _ options: ClientOptions,
        freshLogin: Bool = false,
        notices: Bool = false,
        events: Bool = false,
        signUp: (password: String, invite: String?)? = nil,
        _ body: (ClientSession) async throws -> T
    ) async throws -> T {
        let session = try await ClientSession(
            options,
            freshLogin: freshLogin || signUp != nil,
            notices: notices,
            events: events,
            signUp: signUp
        )
        let client = session.client
        let sink = session.sink
        return try await withThrowingTaskGroup(of: Void.self, returning: T.self) { group in
            group.addTask { await client.run() }
            group.addTask {
                for await event in client.events { sink.yield(.event(event)) }
                sink.finish()
            }
            group.addTask {
                while (try? await Task.sleep(for: Self.tick)) != nil { sink.yield(.tick) }
            }
            defer {
                client.stop()
                group.cancelAll()
            }
            return try await body(session)
        }
    }

    /// Opens the user's store and makes its client.
    private init(
        _ options: ClientOptions,
        freshLogin: Bool,
        notices: Bool,
        events: Bool,
        signUp: (password: String, invite: String?)?
    ) async throws {
        self.options = options
        self.paths = try options.paths()
        // The token file is the one place a device token is kept (never the client's store): without one, the
        // password is asked for and checked.
        let file = self.paths.savedToken()
        let saved = freshLogin ? nil : file
        let credentials: CourierClient.Configuration.Credentials =
            if let signUp {
                .signUp(user: options.user, password: signUp.password, invite: signUp.invite)
            } else if let saved { .token(saved) } else {
                .password(user: options.user, password: try options.resolvePassword())
            }
        self.signingUp = signUp != nil
        let (host, port) = try options.address()
        try FileManager.default.createDirectory(
            at: self.paths.storeFile.deletingLastPathComponent(),
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
        var configuration = CourierClient.Configuration(
            host: host,
            port: port,
            credentials: credentials,
            storePath: self.paths.storeFile.path
        )
        configuration.deviceName = Self.deviceName(user: options.user)
        configuration.passwordFirst = freshLogin
        configuration.storesToken = false
        // A password login renews the device of the token the file holds (an expired one too).
        configuration.renewing = file
        configuration.ephemeral = notices
        configuration.receivesEvents = events
        configuration.tls = options.tlsConfiguration()
        var logger = Logger(label: "courier.client")
        logger.logLevel = .critical
        let client: CourierClient
        do {
            client = try CourierClient(configuration: configuration, logger: logger)
        } catch {
            throw CommandFailure(description: "cannot open \(self.paths.storeFile.path): \(error)")
        }
        self.freshLogin = freshLogin
        self.client = client
        (self.inputs, self.sink) = {
            let (stream, sink) = AsyncStream.makeStream(of: Input.self)
            return (stream.makeAsyncIterator(), sink)
        }()
    }

    /// The name a password login gives its new device: the user, this machine and the command, such as
    /// `alice@laptop (chat)`, so that `courier user devices` tells the logins apart.
    static func deviceName(
        user: String,
        host: String = ClientSession.hostName(),
        command: String? = CommandLine.arguments.dropFirst().first
    ) -> String {
        let machine = host.split(separator: ".").first.map(String.init) ?? host
        let name = "\(user)@\(machine.isEmpty ? "unknown" : machine) (\(command ?? "courier"))"
        // No control characters (the server refuses them in device names).
        return String(
            String.UnicodeScalarView(name.unicodeScalars.filter { $0.properties.generalCategory != .control })
        )
    }

    /// This machine's name as the system knows it (`gethostname`: no name lookup).
    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Waits for the first connection. A refused login is an error that says what to do; a server that answers
    /// but is full (or stopping) is waited for, up to ``connectTimeout``.
    func connect() async throws -> Outcome {
        let deadline = ContinuousClock.now + Self.connectTimeout
        var refusal: String?
        while let event = await self.nextEvent(before: deadline) {
            switch event {
            case .connected:
                try await self.saveToken()
                return .connected
            case .disconnected(let disconnection):
                if case .refused = disconnection.cause {
                    refusal = disconnection.reason
                    continue
                }
                return .unreachable(disconnection.reason)
            case .loginRefused(let code, let message):
                throw self.refused(code: code, message: message)
            default:
                continue
            }
        }
        return .unreachable(
            refusal.map { "\($0) (tried for \(Self.connectTimeout))" }
                ?? "no connection within \(Self.connectTimeout)"
        )
    }

    /// Waits for the first connection, or fails saying why there is none.
    func connectOrFail() async throws {
        if case .unreachable(let reason) = try await self.connect() { throw CommandFailure(description: reason) }
    }

    /// The client's next event; nil once it has stopped.
    func nextEvent() async -> ClientEvent? {
        while let input = await self.inputs.next() {
            if case .event(let event) = input { return event }
        }
        return nil
    }

    /// The client's next event before a deadline; nil at the deadline, or once the client has stopped.
    private func nextEvent(before deadline: ContinuousClock.Instant) async -> ClientEvent? {
        while ContinuousClock.now < deadline, let input = await self.inputs.next() {
            if case .event(let event) = input { return event }
        }
        return nil
    }

    /// Saves the device token the client holds, once connected, for the next command.
    func saveToken() async throws {
        if let token = try await self.client.deviceToken(), token != self.paths.savedToken() {
            try self.paths.save(token: token)
        }
    }

    /// The server refused the login, and says what to do: a refused password keeps the saved token (it may
    /// still work); a refused token is forgotten.
    ///
    /// - Parameter asking: The chat asks for the password at once: the words say what happened, not what to run.
    func refused(code: String, message: String, asking: Bool = false) -> CommandFailure {
        if self.signingUp {
            return CommandFailure(description: "sign-up refused for \(self.options.user): \(code): \(message)")
        }
        if self.freshLogin {
            let kept = self.paths.savedToken() != nil ? " (the saved token is kept)" : ""
            return CommandFailure(
                description: "login refused for \(self.options.user): \(code): \(message)\(kept)"
            )
        }
        // Throttled (too many failed logins from this address, someone else's perhaps): the token is not at fault.
        if code == "\(CourierStoreError.Code.throttled)" {
            return CommandFailure(description: "login refused for now for \(self.options.user): \(message)")
        }
        let hadToken = self.paths.savedToken() != nil
        self.paths.removeToken()
        if code == "\(CourierStoreError.Code.tokenRevoked)", message == CourierStoreError.accountRemovedMessage {
            return CommandFailure(
                description: "the account \(self.options.user) was removed from the server: no login can work "
                    + "(its saved token is forgotten)"
            )
        }
        if asking {
            let why =
                switch code {
                case "\(CourierStoreError.Code.tokenRevoked)":
                    "signed out: this device was signed out on the server (revoked, or the password changed)"
                case "\(CourierStoreError.Code.tokenExpired)": "signed out: this device's login expired"
                default: hadToken ? "signed out: the server no longer knows this device" : "wrong user name or password"
                }
            return CommandFailure(description: "\(why); log in as \(self.options.user) again")
        }
        return CommandFailure(
            description: hadToken
                ? "the saved token for \(self.options.user) was refused (\(code)); log in again: "
                    + "courier login --as \(self.options.user)"
                : "login refused for \(self.options.user): \(code): \(message)"
        )
    }

    /// Waits until the server has acknowledged (or refused for good) the messages `ids` names and every other message
    /// this command's client sends (those it took over from commands that are gone: queued while the server was
    /// away), until ``outboxTimeout``: through reconnects, as the client makes them. Those may have been
    /// acknowledged already, their events not yet read (events are read from the start of the session, so none is
    /// missed).
    ///
    /// - Returns: The acknowledgements and refusals, by message id; the messages missing are still queued.
    /// A refusal of a message queued by an earlier command is said on standard error (that command said "queued").
    @discardableResult
    func flushOutbox(including ids: [String] = []) async throws -> [String: ClientEvent] {
        let deadline = ContinuousClock.now + Self.outboxTimeout
        var waiting = Set(ids).union(try await self.client.sendingMessageIDs())
        var outcomes: [String: ClientEvent] = [:]
        while !waiting.isEmpty, let event = await self.nextEvent(before: deadline) {
            let id: String
            switch event {
            case .sent(let sent, _, _, _), .sendFailed(let sent, _, _): id = sent
            // A message taken over from an earlier command comes back as a message of the user's.
            case .message(let message): id = message.id
            case .loginRefused(let code, let message): throw self.refused(code: code, message: message)
            default: continue
            }
            guard waiting.remove(id) != nil else { continue }
            outcomes[id] = event
            if case .sendFailed(_, let code, let message) = event, !ids.contains(id) {
                var standardError = StandardError()
                print("a message queued earlier (\(id)) was refused: \(code): \(message)", to: &standardError)
            }
        }
        return outcomes
    }
}
