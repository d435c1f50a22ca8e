import CourierProtocol
import CourierWire
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle

extension CourierClient {
    /// Connects, syncs, sends the outbox and delivers events; reconnects with a jittered exponential backoff after
    /// any failure, until ``stop()``, a graceful shutdown of the service group running it, or the cancellation of
    /// its task. Then it finishes ``events`` and returns, and the client's outbox messages not yet acknowledged go
    /// to the next client of the store that connects.
    public func run() async {
        await withGracefulShutdownHandler {
            await self.connectUntilStopped()
        } onGracefulShutdown: {
            self.stop()
        }
        await self.instance.releaseInBackground()
        self.emit(.disconnected(Disconnection(.stopped, "stopped")))
        self.finishEvents()
    }

    func connectUntilStopped() async {
        await withDiscardingTaskGroup { group in
            group.addTask { await self.recordAcknowledgements() }
            var failures = 0
            // Until stopped, or until the task running it is cancelled.
            while !self.state.withLock({ $0.stopped }), !Task.isCancelled {
                var welcomed = false
                do {
                    try await self.session {
                        welcomed = true
                        failures = 0
                    }
                    if !self.state.withLock({ $0.stopped }) {
                        self.emit(.disconnected(Disconnection(.closed, "the server closed the connection")))
                    }
                } catch let refusal as LoginRefused {
                    self.emit(.loginRefused(code: refusal.code, message: refusal.message))
                    self.state.withLock { $0.stopped = true }
                    self.wakeLinkWaiters(nil)
                    break
                } catch is StoredTokenRefused {
                    // Forgotten: log in again at once, with a password still held (else run() ends signed out).
                    continue
                } catch {
                    self.logger.debug("connection ended", metadata: ["error": "\(error)"])
                    if !self.state.withLock({ $0.stopped }) {
                        self.emit(.disconnected(self.disconnection(for: error, welcomed: welcomed)))
                    }
                }
                if self.state.withLock({ $0.stopped }) || Task.isCancelled { break }
                failures += 1
                let delay = self.backoff(after: failures)
                self.emit(.reconnecting(after: delay))
                await self.pause(delay)
            }
            self.acknowledgements.finish()
        }
    }

    /// What ended a connection (or kept it from starting), in plain words.
    func disconnection(for error: any Error, welcomed: Bool) -> Disconnection {
        let server = "\(self.configuration.host):\(self.configuration.port)"
        if let error = error as? CourierClientError {
            switch error.code {
            case ErrorCodes.serverFull, ErrorCodes.shuttingDown, ErrorCodes.authTimeout, ErrorCodes.storageFailed:
                return Disconnection(.refused(code: error.code), "the server at \(server) refused: \(error.message)")
            case CourierClientError.notConnected.code:
                return Disconnection(welcomed ? .closed : .unreachable, "the connection to \(server) broke")
            default:
                return Disconnection(
                    welcomed ? .closed : .unreachable,
                    "the server at \(server) ended the connection: \(error.code): \(error.message)"
                )
            }
        }
        if welcomed {
            return Disconnection(.closed, "the connection to \(server) broke (\(Self.plainWords(error)))")
        }
        return Disconnection(.unreachable, "cannot reach the server at \(server): \(Self.plainWords(error))")
    }

    /// A connection error as people say it.
    static func plainWords(_ error: any Error) -> String {
        if let error = error as? ChannelError, case .connectTimeout = error { return "no answer (timed out)" }
        if let error = error as? NIOConnectionError {
            return error.connectionErrors.first.map { Self.plainWords($0.error) } ?? "no address to connect to"
        }
        if let error = error as? IOError {
            switch error.errnoCode {
            case POSIXErrorCode.ECONNREFUSED.rawValue: return "connection refused (is the server running?)"
            case POSIXErrorCode.ENETUNREACH.rawValue, POSIXErrorCode.EHOSTUNREACH.rawValue: return "no route to it"
            case POSIXErrorCode.ECONNRESET.rawValue: return "the connection was reset"
            case POSIXErrorCode.ETIMEDOUT.rawValue: return "no answer (timed out)"
            default: return "\(error)"
            }
        }
        if error is NIOSSLError { return "the TLS handshake failed (\(error))" }
        if let error = error as? SocketAddressError, case .unknown(let host, _) = error {
            return "unknown host \(host)"
        }
        return "\(error)"
    }

    /// Moves acknowledged messages from the outbox to the messages, a batch per transaction (whatever arrived
    /// while the last one committed), then emits their `.sent` events.
    func recordAcknowledgements() async {
        while let batch = await self.acknowledgements.takeAll() {
            let recorded: Bool
            do {
                try await self.store.acknowledged(batch)
                recorded = true
            } catch {
                // The messages stay in the outbox and are resent on the next connection; the server answers with
                // the original acknowledgements, and `.sent` follows then.
                self.logger.warning("recording acknowledgements failed", metadata: ["error": "\(error)"])
                recorded = false
            }
            let takenOver = self.state.withLock { state in
                state.recording.subtract(batch.map(\.id))
                return recorded ? batch.compactMap { state.takenOver.removeValue(forKey: $0.id) } : []
            }
            guard recorded else { continue }
            let byID = Dictionary(takenOver.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
            for acknowledgement in batch {
                if let entry = byID[acknowledgement.id] {
                    // Written by a client that is gone: a message of the user's, as another device's would be.
                    self.emit(
                        .message(
                            ChatMessage(
                                id: entry.id,
                                from: acknowledgement.from,
                                conversation: acknowledgement.conversation,
                                seq: acknowledgement.seq,
                                time: acknowledgement.time,
                                text: entry.text,
                                media: entry.media
                            )
                        )
                    )
                } else {
                    self.emit(
                        .sent(
                            id: acknowledgement.id,
                            conversation: acknowledgement.conversation,
                            seq: acknowledgement.seq,
                            time: acknowledgement.time
                        )
                    )
                }
            }
        }
    }

    /// A random delay between zero and min(maxBackoff, minBackoff × 2^(failures - 1)).
    func backoff(after failures: Int) -> Duration {
        let base = self.configuration.minBackoff * (1 << min(failures - 1, 20))
        let ceiling = min(base, self.configuration.maxBackoff)
        let nanoseconds = ceiling.components.seconds * 1_000_000_000 + ceiling.components.attoseconds / 1_000_000_000
        return .nanoseconds(Int64.random(in: 0...max(1, nanoseconds)))
    }

    /// Sleeps, or returns early (within 50 ms) when stopped or cancelled.
    func pause(_ delay: Duration) async {
        let deadline = ContinuousClock.now + delay
        while !self.state.withLock({ $0.stopped }), !Task.isCancelled {
            let left = deadline - .now
            guard left > .zero else { return }
            try? await Task.sleep(for: min(left, .milliseconds(50)))
        }
    }
}

/// The server refused the stored token: it is forgotten, and the client logs in with a password it still holds, if it
/// holds one (its first login not done yet); otherwise the next attempt ends `run()` signed out.
struct StoredTokenRefused: Error {}

/// The server refused the configured credentials: `run()` ends.
struct LoginRefused: Error {
    var code: String
    var message: String
}
