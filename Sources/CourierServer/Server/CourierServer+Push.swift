internal import CourierPush
internal import CourierStore

extension CourierServer {
    /// The name the Web Push signing key is kept under (``CourierDatabase/serverKey(named:nowMs:make:)``).
    static let vapidKeyName = "vapid"

    /// The server's VAPID key (RFC 8292), made on its first start and kept with its data: one for every node of a
    /// cluster, so that a subscription made through one node is pushed to by any.
    ///
    /// - Throws: `storage-failed` when the store fails, or when what it keeps is not a P-256 private key.
    func vapidKey() async throws -> VAPIDKey {
        let kept = try await self.store.serverKey(named: Self.vapidKeyName, nowMs: SessionClock.systemWallMs()) {
            VAPIDKey().privateKeyBytes
        }
        do {
            return try VAPIDKey(privateKeyBytes: kept)
        } catch {
            throw CourierStoreError(.storageFailed, "the Web Push key kept in the database is not a P-256 private key")
        }
    }

    /// The key media tickets are signed with (``MediaTickets``), made on the first start and kept with the data: one
    /// for every node.
    func mediaTicketKey() async throws -> [UInt8] {
        let kept = try await self.store.serverKey(named: MediaTickets.keyName, nowMs: SessionClock.systemWallMs()) {
            var generator = SystemRandomNumberGenerator()
            return (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        }
        guard kept.count >= 32 else {
            throw CourierStoreError(.storageFailed, "the media ticket key kept in the database is too short")
        }
        return kept
    }
}
