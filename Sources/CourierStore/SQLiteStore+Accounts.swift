internal import GRDB

extension SQLiteStore {
    /// Removes a user: its devices are revoked, it leaves every group, and it can no longer log in. Its messages
    /// stay in history under its name, which is never given out again.
    ///
    /// - Throws: `unknown-user`, `storage-failed`.
    public func removeUser(named name: String, nowMs: Int64) async throws {
        try await self.write { db in
            let user = try Self.activeUser(named: name, db)
            try Self.revokeAll(of: user.id, nowMs: nowMs, db)
            let groups = try Int64.fetchAll(
                db,
                sql: """
                    SELECT m.conversation_id FROM members m JOIN conversations c ON c.id = m.conversation_id
                    WHERE m.user_id = ? AND c.kind = 2
                    """,
                arguments: [user.id.rawValue]
            )
            var log = EventLogWriter()
            for group in groups {
                try Self.removeMember(user.id, from: group, log: &log, db)
            }
            try log.finish(db)
            try db.execute(
                sql: "UPDATE users SET removed_ms = ?, password_hash = NULL WHERE id = ?",
                arguments: [nowMs, user.id.rawValue]
            )
            try Self.recordChange(.userRemoved(user.id), nowMs: nowMs, db)
            for user in log.appended.keys { try Self.recordChange(.logAppended(user), nowMs: nowMs, db) }
        }
    }

    static func user(named name: String, _ db: Database) throws -> User? {
        // A string that breaks the naming rule names nobody: checked before SQLite sees it, which would read a
        // string with a NUL only up to the NUL ("alice\0x" would find alice).
        guard Names.isValid(name) else { return nil }
        return try Row.fetchOne(
            db,
            sql: "SELECT id, name, created_ms, removed_ms FROM users WHERE name = ?",
            arguments: [name]
        )
        .map(SQLiteTransaction.user)
    }

    static func activeUser(named name: String, _ db: Database) throws -> User {
        guard let user = try user(named: name, db), user.removedMs == nil else {
            throw CourierStoreError(.unknownUser, "no user named \(name)")
        }
        return user
    }

    private static func revokeAll(of user: UserID, nowMs: Int64, _ db: Database) throws {
        let devices = try Int64.fetchAll(
            db,
            sql: "SELECT id FROM devices WHERE user_id = ? AND revoked_ms IS NULL",
            arguments: [user.rawValue]
        )
        for device in devices {
            try db.execute(sql: "UPDATE devices SET revoked_ms = ? WHERE id = ?", arguments: [nowMs, device])
            try recordChange(.deviceRevoked(DeviceID(rawValue: device)), nowMs: nowMs, db)
        }
    }

    // MARK: Devices and sessions

    /// Devices whose first connection came (`connected`), or whose last one ended, in one transaction: `user
    /// devices` shows each connected since then, or when it was last seen.
    public func recordDeviceActivity(_ changes: [DeviceActivityChange]) async throws {
        try await self.write { db in
            for change in changes {
                if change.connected {
                    try db.execute(
                        sql: "UPDATE devices SET connected_since_ms = ? WHERE id = ?",
                        arguments: [change.ms, change.device.rawValue]
                    )
                } else {
                    try db.execute(
                        sql: "UPDATE devices SET connected_since_ms = NULL, last_seen_ms = ? WHERE id = ?",
                        arguments: [change.ms, change.device.rawValue]
                    )
                }
            }
        }
    }

    /// No device is connected (a server starting): what a server that stopped without saying so left, goes.
    public func clearConnectedDevices() async throws {
        try await self.write { db in
            try db.execute(
                sql: """
                    UPDATE devices SET last_seen_ms = MAX(COALESCE(last_seen_ms, 0), connected_since_ms),
                    connected_since_ms = NULL WHERE connected_since_ms IS NOT NULL
                    """
            )
        }
    }

    // MARK: Changes for a running server

    static func recordChange(_ change: StoreChange, nowMs: Int64, _ db: Database) throws {
        try self.recordChanges([change], nowMs: nowMs, db)
    }
}
