import CourierProtocol
import CourierWire
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle

// One connection: the channel, TLS, the login (a stored token, else the credentials) and the session on it.
extension CourierClient {

    func session(onWelcome: () -> Void) async throws {
        let tls = self.tls
        let serverName = self.tlsServerName
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.nanoseconds(Int64(self.configuration.connectTimeout.components.seconds) * 1_000_000_000))
            .connect(host: self.configuration.host, port: self.configuration.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addNativeHandlers(
                        tls: try tls.map { try NIOSSLClientHandler(context: $0, serverHostname: serverName) }
                    )
                    return try NIOAsyncChannel<NativeFrame, NativeFrame>(wrappingChannelSynchronously: channel)
                }
            }
        try await channel.executeThenClose { inbound, outbound in
            var iterator = inbound.makeAsyncIterator()
            let welcome = try await self.authenticate(&iterator, outbound: outbound)
            onWelcome()
            let link = Link(
                outbound: outbound,
                channel: channel.channel,
                maxInFlight: Int(welcome.limits.maxUnackedSends == 0 ? 64 : welcome.limits.maxUnackedSends),
                maxChunkBytes: Int(welcome.limits.maxChunkBytes == 0 ? 256 * 1024 : welcome.limits.maxChunkBytes)
            )
            let stopped = self.state.withLock { state -> Bool in
                state.link = link
                state.user = welcome.user
                state.outboxDirty = true
                return state.stopped
            }
            defer {
                self.state.withLock { $0.link = nil }
                link.failAll()
            }
            if stopped { return }
            self.wakeLinkWaiters(link)
            if self.configuration.receivesEvents {
                // Where this client's events start, when it knew of none (a new device: the present).
                let first = self.state.withLock { state -> Bool in
                    defer { state.cursor = state.cursor ?? welcome.cursor }
                    return state.cursor == nil
                }
                if first { try await self.store.setCursorIfAbsent(welcome.cursor) }
            }
            // Before `.connected`: from then on, `sendingMessageIDs()` includes what was taken over.
            let taken = try await self.takeOverOutboxes()
            self.emit(.connected(user: welcome.user))
            let heartbeat = Duration.milliseconds(Int64(max(1000, welcome.limits.heartbeatIntervalMs)))
            try await withThrowingTaskGroup(of: Void.self) { group in
                // Either failing ends the session (closing the link ends the reader below).
                group.addTask {
                    do {
                        while true {
                            try await Task.sleep(for: heartbeat)
                            try await link.write(frame: .ping(UInt64.random(in: 0...UInt64.max)))
                        }
                    } catch {
                        link.close()
                        throw error
                    }
                }
                group.addTask {
                    do {
                        try await self.sendOutbox(on: link, takenOver: taken)
                    } catch {
                        if !(error is CancellationError) {
                            self.logger.warning("sending the outbox failed", metadata: ["error": "\(error)"])
                        }
                        link.close()
                        throw error
                    }
                }
                defer {
                    // Wake a send waiting for a slot on this dead link before waiting for the tasks.
                    link.failAll()
                    group.cancelAll()
                }
                try await self.read(&iterator, link: link, user: welcome.user)
            }
        }
    }

    /// The name to verify and send as SNI: none for an IP address (the certificate must then list the address).
    private var tlsServerName: String? {
        if let name = self.configuration.tlsServerName { return name }
        let host = self.configuration.host
        return (try? SocketAddress(ipAddress: host, port: 0)) == nil ? host : nil
    }

    /// Sends hello with the stored token (or the configured credentials) and waits for the welcome.
    func authenticate(
        _ iterator: inout NIOAsyncChannelInboundStream<NativeFrame>.AsyncIterator,
        outbound: NIOAsyncChannelOutboundWriter<NativeFrame>
    ) async throws -> Courier_V1_Welcome {
        var hello = ClientEnvelope()
        hello.requestID = 1
        hello.hello.deviceName = self.configuration.deviceName
        hello.hello.ephemeral = self.configuration.ephemeral
        hello.hello.noEvents = !self.configuration.receivesEvents
        let stored = try await self.heldToken()
        // The password first (until a password login succeeds) when configured so: it renews the stored token's
        // device rather than making a new one.
        var passwordFirst = self.configuration.passwordFirst && !self.state.withLock { $0.passwordLoginDone }
        // A store is one user's: a token it holds is this user's, and a client that signed up before goes on with
        // it (a sign-up again would be refused).
        if case .token = self.configuration.credentials { passwordFirst = false }
        let storedToken = passwordFirst ? nil : stored
        if let storedToken {
            hello.hello.token = storedToken
        } else {
            switch self.configuration.credentials {
            case .password(let user, _):
                // The password once, until a login with it succeeds; then it is gone.
                guard let (_, password) = self.state.withLock({ $0.password }) else {
                    let code = self.state.withLock { $0.signedOut } ?? ErrorCodes.authFailed
                    throw LoginRefused(
                        code: code,
                        message: "signed out (\(code)): log in as \(user) with the password again"
                    )
                }
                hello.hello.password.user = user
                hello.hello.password.password = password
                // The device this store holds a token of (an expired one too) is renewed, not replaced.
                if let renewing = stored ?? self.state.withLock({ $0.expiredToken }) ?? self.configuration.renewing {
                    hello.hello.renewToken = renewing
                }
            case .token(let token):
                hello.hello.token = token
            case .signUp(let user, _, _):
                guard let (_, password) = self.state.withLock({ $0.password }) else {
                    let code = self.state.withLock { $0.signedOut } ?? ErrorCodes.authFailed
                    throw LoginRefused(
                        code: code,
                        message: "signed out (\(code)): log in as \(user) with the password"
                    )
                }
                let (asLogin, invite) = self.state.withLock { state in
                    state.signUpsSent += 1
                    return (state.signUpAsLogin, state.invite)
                }
                if asLogin {
                    // An earlier sign-up may have made the account without its answer arriving: logging in finds
                    // out.
                    hello.hello.password.user = user
                    hello.hello.password.password = password
                } else {
                    hello.hello.signUp.user = user
                    hello.hello.signUp.password = password
                    hello.hello.signUp.invite = invite ?? ""
                }
            }
        }
        // From where this client stands (where the store stood when it was made, then its own); knowing neither, the
        // server starts where the device acknowledged (a new device: at the present).
        if self.configuration.receivesEvents, let cursor = self.state.withLock({ $0.cursor }) {
            hello.hello.cursor = cursor
            hello.hello.resume = true
        }
        do {
            try await outbound.write(try NativeFrame(envelope: hello))
        } catch {
            // A failed TLS handshake closes the channel; its reason is in the inbound stream, and it says more
            // than "I/O on closed channel".
            _ = try await iterator.next()
            throw error
        }
        while let frame = try await iterator.next() {
            guard frame.kind == .message else { continue }
            let answer = try frame.envelope(as: ServerEnvelope.self)
            switch answer.body {
            case .welcome(let welcome):
                self.state.withLock { state in
                    switch hello.hello.credentials {
                    case .password?, .signUp?: state.passwordLoginDone = true
                    default: break
                    }
                    state.invite = nil
                    // The login it was given for is done (by it or by the stored token): no password stays, even
                    // if the token cannot be stored (a password login again would make another device).
                    state.password = nil
                }
                if !welcome.token.isEmpty { try await self.keep(token: welcome.token) }
                return welcome
            case .error(let error):
                var refused = [
                    ErrorCodes.tokenExpired, ErrorCodes.tokenRevoked, ErrorCodes.authFailed, ErrorCodes.throttled,
                ]
                if case .signUp? = hello.hello.credentials, error.code == ErrorCodes.nameTaken,
                    self.state.withLock({ $0.signUpsSent > 1 && !$0.signUpAsLogin })
                {
                    // Not the first sign-up sent: the name may be taken by an earlier one whose answer never
                    // came (its connection lost, its login refused after the account was made). Try the password.
                    self.state.withLock { $0.signUpAsLogin = true }
                    throw CourierClientError(code: error.code, message: error.message)
                }
                if case .password? = hello.hello.credentials, error.code == ErrorCodes.authFailed,
                    case .signUp(let user, _, _) = self.configuration.credentials
                {
                    // The name was taken, and not by an earlier sign-up of this client's.
                    throw LoginRefused(code: ErrorCodes.nameTaken, message: "a user named \(user) exists or existed")
                }
                if case .signUp? = hello.hello.credentials {
                    refused += [
                        ErrorCodes.registrationClosed, ErrorCodes.inviteInvalid, ErrorCodes.inviteExpired,
                        ErrorCodes.inviteUsedUp, ErrorCodes.weakPassword, ErrorCodes.invalidName, ErrorCodes.nameTaken,
                    ]
                }
                guard refused.contains(error.code) else {
                    throw CourierClientError(code: error.code, message: error.message)
                }
                // A stored token that stopped working: forget it, so the next attempt logs in with the configured
                // credentials. The configured credentials refused: give up.
                if let storedToken, error.code != ErrorCodes.throttled {
                    // Unless another client of the store has put a new one there meanwhile (a login renewing the
                    // device): then the next attempt uses that.
                    try await self.forget(token: storedToken)
                    self.state.withLock { state in
                        if error.code == ErrorCodes.tokenExpired {
                            state.expiredToken = storedToken
                        } else {
                            // Revoked, or unknown: the device stays out. A password still held (its first login
                            // not done yet) is not used to come back as a new device.
                            state.password = nil
                        }
                        state.signedOut = error.code
                    }
                    self.logger.notice(
                        "the stored token was refused; logging in again",
                        metadata: ["code": "\(error.code)"]
                    )
                    throw StoredTokenRefused()
                }
                // A throttled login says when it may be tried again (the server's retry_after_ms).
                var message = error.message
                if error.code == ErrorCodes.throttled, error.retryAfterMs > 0 {
                    message += "; try again in \((error.retryAfterMs + 999) / 1000) s"
                }
                throw LoginRefused(code: error.code, message: message)
            default:
                continue
            }
        }
        throw CourierClientError(code: "not-connected", message: "the server closed the connection before welcoming")
    }

    /// The most outbox rows read at a time.
    static let outboxBatch = 256
}
