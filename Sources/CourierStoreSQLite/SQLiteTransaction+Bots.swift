package import CourierStore
internal import GRDB

extension SQLiteTransaction {
    // MARK: Bots

    package func setAckedCursor(_ cursor: Int64, of device: DeviceID) async throws {
        try await self.update { db in
            try db.execute(
                sql: "UPDATE devices SET acked_cursor = ? WHERE id = ?",
                arguments: [cursor, device.rawValue]
            )
        }
    }

    package func setBotOwner(_ owner: UserID, of bot: UserID) async throws {
        try await self.update { db in
            try db.execute(
                sql: "UPDATE users SET bot_owner = ? WHERE id = ?",
                arguments: [owner.rawValue, bot.rawValue]
            )
        }
    }

    package func botOwners() async throws -> [(bot: UserID, owner: UserID)] {
        try await self.access { db in
            try Row.fetchAll(db, sql: "SELECT id, bot_owner FROM users WHERE bot_owner IS NOT NULL ORDER BY id").map {
                (UserID(rawValue: $0["id"]), UserID(rawValue: $0["bot_owner"]))
            }
        }
    }
}
