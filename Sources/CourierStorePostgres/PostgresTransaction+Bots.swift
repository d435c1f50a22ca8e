package import CourierStore
internal import PostgresNIO

extension PostgresTransaction {
    // MARK: Bots

    package func setAckedCursor(_ cursor: Int64, of device: DeviceID) async throws {
        try await self.connection.run(
            "UPDATE devices SET acked_cursor = \(cursor) WHERE id = \(device.rawValue)",
            logger: self.logger
        )
    }

    package func setBotOwner(_ owner: UserID, of bot: UserID) async throws {
        try await self.connection.run(
            "UPDATE users SET bot_owner = \(owner.rawValue) WHERE id = \(bot.rawValue)",
            logger: self.logger
        )
    }

    package func botOwners() async throws -> [(bot: UserID, owner: UserID)] {
        try await self.connection.rows(
            "SELECT id, bot_owner FROM users WHERE bot_owner IS NOT NULL ORDER BY id",
            logger: self.logger
        ).map { (UserID(rawValue: try $0.get("id")), UserID(rawValue: try $0.get("bot_owner"))) }
    }
}
