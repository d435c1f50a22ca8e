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
/// Events are read by one task at a time (the command's, or the chat's event reader).
final class ClientSession: @unchecked Sendable {
    let options: ClientOptions
    let paths: ClientPaths
    let client: CourierClient
    /// Whether this session logs in with the password (`courier login`): a refusal then keeps the saved token.
    let freshLogin: Bool
    private var events: AsyncStream<ClientEvent>.AsyncIterator
    private let running: Task<Void, Never>
    /// How long to wait for the first connection (the SDK's connect timeout covers TCP; this also the login).
    static let connectTimeout: Duration = .seconds(20)
    /// How long to wait for the server to acknowledge what the outbox holds.
    static let outboxTimeout: Duration = .seconds(30)

    /// What came of connecting.
    enum Outcome {
        case connected
        /// The server could not be reached (the reason is the first failure's).
        case unreachable(String)
    }

    /// Runs `body` with a session, and closes it (stopping the client) however `body` ends.
    static func run<T>(
        _ options: ClientOptions,
        freshLogin: Bool = false,
        notices: Bool = false,
        _ body: (ClientSession) async throws -> T
    ) async throws -> T {
        let session = try ClientSession(options, freshLogin: freshLogin, notices: notices)
        do {
            let result = try await body(session)
            await session.close()
            return result
        } catch {
            await session.close()
            throw error
        }
    }

    /// Opens the user's store and starts connecting. `freshLogin` forgets any saved token and logs in with the
    /// password (a new device); `notices` asks the server for typing, presence and receipt notices.
    private init(_ options: ClientOptions, freshLogin: Bool, notices: Bool) throws {
        self.options = options
        self.paths = try options.paths()
        let saved = freshLogin ? nil : self.paths.savedToken()
        let credentials: CourierClient.Configuration.Credentials =
            if let saved { .token(saved) } else {
                .password(user: options.user, password: try options.resolvePassword())
            }
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
        configuration.ephemeral = notices
        configuration.tls = options.tlsConfiguration()
        var logger = Logger(label: "courier.client")
        logger.logLevel = .critical
        let client: CourierClient
        do {
            client = try CourierClient(configuration: configuration, logger: logger)
        } catch {
            throw CommandFailure(description: "cannot open \(self.paths.storeFile.path): \(error)")
        }
        // A fresh login forgets the device the client's store holds (it logs in with the password), but not the
        // saved token: a mistyped password must not cost a working token; a successful login replaces it.
        if freshLogin { try client.forgetDeviceToken() }
        self.freshLogin = freshLogin
        self.client = client
        self.events = client.events.makeAsyncIterator()
        self.running = Task { await client.run() }
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

    /// Waits for the first connection. A refused login is an error that says what to do.
    func connect() async throws -> Outcome {
        try await self.within(Self.connectTimeout, doing: "connecting") {
            while let event = await self.events.next() {
                switch event {
                case .connected:
                    try self.saveToken()
                    return .connected
                case .disconnected(let reason):
                    return .unreachable(reason)
                case .loginRefused(let code, let message):
                    throw self.refused(code: code, message: message)
                default:
                    continue
                }
            }
            return nil
        }
    }

    /// The client's next event; nil once it has stopped.
    func nextEvent() async -> ClientEvent? {
        await self.events.next()
    }

    /// Saves the device token the client holds, once connected, for the next command.
    func saveToken() throws {
        if let token = try self.client.deviceToken(), token != self.paths.savedToken() {
            try self.paths.save(token: token)
        }
    }

    /// The server refused the login, and says what to do: a refused password keeps the saved token (it may
    /// still work); a refused token is forgotten.
    func refused(code: String, message: String) -> CommandFailure {
        if self.freshLogin {
            let kept = self.paths.savedToken() != nil ? " (the saved token is kept)" : ""
            return CommandFailure(
                description: "login refused for \(self.options.user): \(code): \(message)\(kept)"
            )
        }
        let hadToken = self.paths.savedToken() != nil
        self.paths.removeToken()
        if code == "\(CourierStoreError.Code.tokenRevoked)", message == CourierStoreError.accountRemovedMessage {
            return CommandFailure(
                description: "the account \(self.options.user) was removed from the server: no login can work "
                    + "(its saved token is forgotten)"
            )
        }
        return CommandFailure(
            description: hadToken
                ? "the saved token for \(self.options.user) was refused (\(code)); log in again: "
                    + "courier login --as \(self.options.user)"
                : "login refused for \(self.options.user): \(code): \(message)"
        )
    }

    /// Waits until the server has acknowledged every message the outbox holds (or refused it for good), and the
    /// messages `ids` names: those may have been acknowledged already, their events not yet read (events are read
    /// from the start of the session, so none is missed).
    ///
    /// - Returns: The acknowledgements and refusals, by message id.
    @discardableResult
    func flushOutbox(including ids: [String] = []) async throws -> [String: ClientEvent] {
        var waiting = Set(try self.client.pendingMessageIDs()).union(ids)
        return try await self.within(Self.outboxTimeout, doing: "waiting for the server to acknowledge the outbox") {
            var outcomes: [String: ClientEvent] = [:]
            while !waiting.isEmpty {
                guard let event = await self.events.next() else { return nil }
                switch event {
                case .sent(let id, _, _, _), .sendFailed(let id, _, _):
                    outcomes[id] = event
                    waiting.remove(id)
                case .disconnected(let reason):
                    throw CommandFailure(
                        description: "the connection ended: \(reason); the outbox keeps what is unsent"
                    )
                default:
                    continue
                }
            }
            return outcomes
        }
    }

    /// Runs `body`, stopping the client if it takes longer than `timeout` (the events then end, and `body`
    /// returns nil, which becomes a failure naming what timed out).
    private func within<T>(
        _ timeout: Duration,
        doing what: String,
        _ body: () async throws -> T?
    ) async throws -> T {
        let client = self.client
        let watchdog = Task {
            try await Task.sleep(for: timeout)
            client.stop()
        }
        defer { watchdog.cancel() }
        guard let result = try await body() else {
            throw CommandFailure(description: "timed out after \(timeout) \(what)")
        }
        return result
    }

    /// Stops the client and waits for it.
    private func close() async {
        self.client.stop()
        await self.running.value
    }
}
