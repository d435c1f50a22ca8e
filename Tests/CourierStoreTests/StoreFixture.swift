import CourierStore
import CourierTesting
import Foundation
import Logging

/// A store on a real SQLite file in a temporary folder, with cheap password hashes (the tests that are about
/// hashing use the standard cost).
struct StoreFixture {
    static let cheapHasher = PasswordHasher(logN: 4, blockSize: 8, parallelism: 1, saltBytes: 16, keyBytes: 32)
    static let start: Int64 = 1_800_000_000_000

    let folder: URL
    let store: SQLiteStore

    init(folder: URL, configure: (inout SQLiteStore.Configuration) -> Void = { _ in }) throws {
        var configuration = SQLiteStore.Configuration()
        configuration.passwordHasher = Self.cheapHasher
        configure(&configuration)
        self.folder = folder
        self.store = try SQLiteStore(folder: folder, configuration: configuration, logger: Logger(label: "test"))
    }

    /// Creates users with the password "pw-" + name.
    @discardableResult
    func users(_ names: String...) async throws -> [String: UserID] {
        var ids: [String: UserID] = [:]
        for name in names {
            ids[name] = try await self.store.addUser(name: name, password: "pw-" + name, nowMs: Self.start).id
        }
        return ids
    }

    func send(
        _ sender: UserID,
        _ id: String,
        to: Conversation,
        _ text: String,
        nowMs: Int64 = start
    ) async throws -> WriteOutcome {
        let batch = try await self.store.apply(
            [.send(.init(sender: sender, id: id, to: to, body: Array(text.utf8)))],
            nowMs: nowMs
        )
        return batch.outcomes[0]
    }

    func sent(
        _ sender: UserID,
        _ id: String,
        to: Conversation,
        _ text: String,
        nowMs: Int64 = start
    ) async throws -> SendReceipt {
        let outcome = try await self.send(sender, id, to: to, text, nowMs: nowMs)
        guard case .sent(let receipt) = outcome else {
            throw FixtureError(message: "expected a receipt, got \(outcome)")
        }
        return receipt
    }

    /// Every event in a user's log after a cursor.
    func log(_ user: UserID, after cursor: UInt64 = 0) async throws -> [StoredEvent] {
        var events: [StoredEvent] = []
        var cursor = cursor
        while true {
            let page = try await self.store.events(for: user, after: cursor, limit: 100)
            guard let last = page.last else { return events }
            events += page
            cursor = last.cursor
        }
    }

    /// The texts of the message events in a log.
    func texts(_ user: UserID, after cursor: UInt64 = 0) async throws -> [String] {
        try await self.log(user, after: cursor).compactMap {
            guard case .message(let message) = $0.kind else { return nil }
            return String(decoding: message.body, as: UTF8.self)
        }
    }
}

struct FixtureError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

func refusal(_ outcome: WriteOutcome) -> CourierStoreError.Code? {
    if case .refused(let error) = outcome { return error.code }
    return nil
}
