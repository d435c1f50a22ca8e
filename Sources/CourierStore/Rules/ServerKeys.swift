// The keys the servers of one database share, for every database.

extension StoreBackend {
    public func serverKey(named name: String, nowMs: Int64, make: @Sendable () -> [UInt8]) async throws -> [UInt8] {
        if let kept = try await self.reading(doing: "read a server key", { try await $0.serverKey(named: name) }) {
            return kept
        }
        // Two nodes starting at once may both make one: the first kept is the one both use.
        let made = make()
        return try await self.transaction(doing: "keep a server key") { transaction in
            try await transaction.insertServerKey(named: name, value: made, nowMs: nowMs)
            guard let kept = try await transaction.serverKey(named: name) else {
                throw CourierStoreError(.storageFailed, "the key was not kept")
            }
            return kept
        }
    }
}
