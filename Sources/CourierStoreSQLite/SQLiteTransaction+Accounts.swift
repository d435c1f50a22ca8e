package import CourierStore
internal import Foundation
internal import GRDB

extension SQLiteTransaction {
    // MARK: Users

    package func user(named name: String) async throws -> User? {
        try await self.access { db in
            try Row.fetchOne(
                db.cachedStatement(sql: "SELECT id, name, created_ms, removed_ms FROM users WHERE name = ?"),
                arguments: [name]
            ).map(Self.user)
        }
    }

    package func users() async throws -> [User] {
        try await self.access { db in
            try Row.fetchAll(db, sql: "SELECT id, name, created_ms, removed_ms FROM users ORDER BY name").map(Self.user)
        }
    }

    static func user(_ row: Row) -> User {
        User(
            id: UserID(rawValue: row["id"]),
            name: row["name"],
            createdMs: row["created_ms"],
            removedMs: row["removed_ms"]
        )
    }

    package func passwordHash(of user: UserID) async throws -> String? {
        try await self.access { db in
            try String.fetchOne(db, sql: "SELECT password_hash FROM users WHERE id = ?", arguments: [user.rawValue])
        }
    }

    package func insertUser(name: String, passwordHash: String, nowMs: Int64) async throws -> UserID? {
        try await self.update { db in
            // The name is unique without regard to case (the column's NOCASE).
            try db.execute(
                sql: "INSERT INTO users (name, password_hash, created_ms) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                arguments: [name, passwordHash, nowMs]
            )
            return db.changesCount == 1 ? UserID(rawValue: db.lastInsertedRowID) : nil
        }
    }

    package func setPasswordHash(_ hash: String, of user: UserID) async throws {
        try await self.update { db in
            try db.execute(sql: "UPDATE users SET password_hash = ? WHERE id = ?", arguments: [hash, user.rawValue])
        }
    }

    package func markRemoved(_ user: UserID, nowMs: Int64) async throws {
        try await self.update { db in
            try db.execute(
                sql: "UPDATE users SET removed_ms = ?, password_hash = NULL WHERE id = ?",
                arguments: [nowMs, user.rawValue]
            )
        }
    }

    package func logCursor(of user: UserID) async throws -> Int64 {
        try await self.access { db in
            try Int64.fetchOne(db, sql: "SELECT cursor FROM log_heads WHERE user_id = ?", arguments: [user.rawValue])
                ?? 0
        }
    }

    // MARK: Devices

    package func usableDevices(of user: UserID, nowMs: Int64) async throws -> Int {
        try await self.access { db in
            try Int.fetchOne(
                db,
                sql: "SELECT count(*) FROM devices WHERE user_id = ? AND revoked_ms IS NULL AND expires_ms > ?",
                arguments: [user.rawValue, nowMs]
            ) ?? 0
        }
    }

    package func devices(of user: UserID) async throws -> [Device] {
        try await self.access { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT d.*, u.name AS user_name FROM devices d JOIN users u ON u.id = d.user_id
                    WHERE d.user_id = ? ORDER BY d.id
                    """,
                arguments: [user.rawValue]
            ).map(Self.device)
        }
    }

    package func device(holding tokenHash: [UInt8], nowMs: Int64, locking: Bool) async throws -> HeldDevice? {
        try await self.access { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT d.*, u.name AS user_name, u.created_ms AS user_created_ms, u.removed_ms AS user_removed_ms
                    FROM devices d JOIN users u ON u.id = d.user_id
                    WHERE d.token_hash = ? OR (d.previous_token_hash = ? AND d.previous_token_until_ms > ?)
                    """,
                arguments: [Data(tokenHash), Data(tokenHash), nowMs]
            ).map { row in
                HeldDevice(
                    device: Self.device(row),
                    tokens: Self.tokens(row),
                    user: User(
                        id: UserID(rawValue: row["user_id"]),
                        name: row["user_name"],
                        createdMs: row["user_created_ms"],
                        removedMs: row["user_removed_ms"]
                    )
                )
            }
        }
    }

    package func tokens(of device: DeviceID, locking: Bool) async throws -> DeviceTokens? {
        try await self.access { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT token_hash, expires_ms, previous_token_hash, previous_token_until_ms, previous_expires_ms
                    FROM devices WHERE id = ?
                    """,
                arguments: [device.rawValue]
            ).map(Self.tokens)
        }
    }

    static func tokens(_ row: Row) -> DeviceTokens {
        DeviceTokens(
            tokenHash: Array(row["token_hash"] as Data),
            expiresMs: row["expires_ms"],
            previousHash: (row["previous_token_hash"] as Data?).map(Array.init),
            previousUntilMs: row["previous_token_until_ms"],
            previousExpiresMs: row["previous_expires_ms"]
        )
    }

    package func setTokens(_ tokens: DeviceTokens, of device: DeviceID) async throws {
        try await self.update { db in
            try db.execute(
                sql: """
                    UPDATE devices SET token_hash = ?, expires_ms = ?, previous_token_hash = ?,
                    previous_token_until_ms = ?, previous_expires_ms = ? WHERE id = ?
                    """,
                arguments: [
                    Data(tokens.tokenHash), tokens.expiresMs, tokens.previousHash.map { Data($0) },
                    tokens.previousUntilMs, tokens.previousExpiresMs, device.rawValue,
                ]
            )
        }
    }

    package func insertDevice(_ device: NewDevice) async throws -> DeviceID {
        try await self.update { db in
            try db.execute(
                sql: """
                    INSERT INTO devices (user_id, name, token_hash, created_ms, expires_ms, acked_cursor)
                    VALUES (?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    device.user.rawValue, device.name, Data(device.tokenHash), device.createdMs, device.expiresMs,
                    device.ackedCursor,
                ]
            )
            return DeviceID(rawValue: db.lastInsertedRowID)
        }
    }

    package func markDevicesRevoked(_ devices: [DeviceID]?, of user: UserID, nowMs: Int64) async throws -> [DeviceID] {
        try await self.update { db in
            let active = try Int64.fetchAll(
                db,
                sql: "SELECT id FROM devices WHERE user_id = ? AND revoked_ms IS NULL ORDER BY id",
                arguments: [user.rawValue]
            ).map(DeviceID.init(rawValue:))
            let revoked = devices.map { asked in active.filter(asked.contains) } ?? active
            for device in revoked {
                try db.execute(
                    sql: "UPDATE devices SET revoked_ms = ? WHERE id = ?",
                    arguments: [nowMs, device.rawValue]
                )
            }
            return revoked
        }
    }

    static func device(_ row: Row) -> Device {
        var device = Device(
            id: DeviceID(rawValue: row["id"]),
            userID: UserID(rawValue: row["user_id"]),
            userName: row["user_name"],
            name: row["name"],
            createdMs: row["created_ms"],
            expiresMs: row["expires_ms"],
            revokedMs: row["revoked_ms"],
            lastSeenMs: row["last_seen_ms"],
            ackedCursor: UInt64(row["acked_cursor"] as Int64)
        )
        device.connectedSinceMs = row["connected_since_ms"]
        return device
    }

    // MARK: Changes

    package func recordChanges(_ changes: [StoreChange], nowMs: Int64) async throws {
        guard !changes.isEmpty else { return }
        try await self.update { db in try SQLiteStore.recordChanges(changes, nowMs: nowMs, db) }
    }

    package func latestChangeID() async throws -> Int64 {
        try await self.access { db in try Int64.fetchOne(db, sql: "SELECT MAX(id) FROM changes") ?? 0 }
    }

    package func changes(after id: Int64, limit: Int) async throws -> [(id: Int64, change: StoreChange?)] {
        try await self.access { db in
            try Row.fetchAll(
                db,
                sql: "SELECT id, kind, user_id, device_id FROM changes WHERE id > ? ORDER BY id LIMIT ?",
                arguments: [id, limit]
            ).map { row in
                (
                    row["id"],
                    StoreChange(
                        kind: row["kind"],
                        user: (row["user_id"] as Int64?).map(UserID.init(rawValue:)),
                        device: (row["device_id"] as Int64?).map(DeviceID.init(rawValue:))
                    )
                )
            }
        }
    }

    package func pruneChanges(olderThanMs: Int64) async throws {
        try await self.update { db in
            try db.execute(sql: "DELETE FROM changes WHERE time_ms < ?", arguments: [olderThanMs])
        }
    }
}

extension SQLiteStore {
    /// Records changes for a running server (see ``StoreTransaction/recordChanges(_:nowMs:)``); one writer at a time.
    static func recordChanges(_ changes: [StoreChange], nowMs: Int64, _ db: Database) throws {
        let insert = try db.cachedStatement(
            sql: "INSERT INTO changes (kind, user_id, device_id, time_ms) VALUES (?, ?, ?, ?)"
        )
        for change in changes {
            let columns = change.columns
            try insert.execute(arguments: [columns.kind, columns.user?.rawValue, columns.device?.rawValue, nowMs])
        }
    }
}

extension SQLiteTransaction {
    // MARK: Push subscriptions

    package func pushSubscriptions(of user: UserID) async throws -> [PushSubscriptionRow] {
        try await self.access { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT s.* FROM push_subscriptions s JOIN devices d ON d.id = s.device_id
                    WHERE s.user_id = ? AND d.revoked_ms IS NULL ORDER BY s.created_ms, s.endpoint
                    """,
                arguments: [user.rawValue]
            ).map(Self.pushSubscription)
        }
    }

    package func pushSubscription(at endpoint: String) async throws -> PushSubscriptionRow? {
        try await self.access { db in
            try Row.fetchOne(db, sql: "SELECT * FROM push_subscriptions WHERE endpoint = ?", arguments: [endpoint])
                .map(Self.pushSubscription)
        }
    }

    static func pushSubscription(_ row: Row) -> PushSubscriptionRow {
        PushSubscriptionRow(
            endpoint: row["endpoint"],
            device: DeviceID(rawValue: row["device_id"]),
            user: UserID(rawValue: row["user_id"]),
            p256dh: Array(row["p256dh"] as Data),
            auth: Array(row["auth"] as Data),
            createdMs: row["created_ms"],
            gateway: (row["gateway_url"] as String?).map { url in
                PushGateway(appID: row["app_id"] ?? "", pushkey: row["pushkey"] ?? "", url: url)
            }
        )
    }

    package func putPushSubscription(_ row: PushSubscriptionRow) async throws {
        try await self.update { db in
            try db.execute(
                sql: """
                    INSERT INTO push_subscriptions
                        (endpoint, device_id, user_id, p256dh, auth, created_ms, gateway_url, app_id, pushkey)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (endpoint) DO UPDATE SET device_id = excluded.device_id, user_id = excluded.user_id,
                        p256dh = excluded.p256dh, auth = excluded.auth, created_ms = excluded.created_ms,
                        gateway_url = excluded.gateway_url, app_id = excluded.app_id, pushkey = excluded.pushkey
                    """,
                arguments: [
                    row.endpoint, row.device.rawValue, row.user.rawValue, Data(row.p256dh), Data(row.auth),
                    row.createdMs, row.gateway?.url, row.gateway?.appID, row.gateway?.pushkey,
                ]
            )
        }
    }

    package func deletePushSubscription(endpoint: String, of user: UserID) async throws -> Bool {
        try await self.update { db in
            try db.execute(
                sql: "DELETE FROM push_subscriptions WHERE endpoint = ? AND user_id = ?",
                arguments: [endpoint, user.rawValue]
            )
            return db.changesCount == 1
        }
    }

    package func deletePushSubscriptions(of devices: [DeviceID]) async throws {
        guard !devices.isEmpty else { return }
        try await self.update { db in
            try db.execute(
                sql: "DELETE FROM push_subscriptions WHERE device_id IN (SELECT value FROM json_each(?))",
                arguments: ["[" + devices.map { String($0.rawValue) }.joined(separator: ",") + "]"]
            )
        }
    }
}

extension SQLiteTransaction {
    // MARK: Server keys

    package func serverKey(named name: String) async throws -> [UInt8]? {
        try await self.access { db in
            try Data.fetchOne(db, sql: "SELECT value FROM server_keys WHERE name = ?", arguments: [name]).map {
                Array($0)
            }
        }
    }

    package func insertServerKey(named name: String, value: [UInt8], nowMs: Int64) async throws {
        try await self.update { db in
            try db.execute(
                sql: "INSERT INTO server_keys (name, value, created_ms) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING",
                arguments: [name, Data(value), nowMs]
            )
        }
    }

    // MARK: Invitations

    package func insertInvite(tokenHash: [UInt8], maxUses: Int, expiresMs: Int64?, nowMs: Int64) async throws -> Int64 {
        try await self.update { db in
            try db.execute(
                sql: "INSERT INTO invites (token_hash, created_ms, expires_ms, max_uses) VALUES (?, ?, ?, ?)",
                arguments: [Data(tokenHash), nowMs, expiresMs, maxUses]
            )
            return db.lastInsertedRowID
        }
    }

    package func invite(holding tokenHash: [UInt8], locking: Bool) async throws -> Invite? {
        // One writer at a time: a read inside the write transaction is as good as a lock.
        try await self.access { db in
            try Row.fetchOne(db, sql: "SELECT * FROM invites WHERE token_hash = ?", arguments: [Data(tokenHash)])
                .map(Self.invite)
        }
    }

    package func invites() async throws -> [Invite] {
        try await self.access { db in
            try Row.fetchAll(db, sql: "SELECT * FROM invites ORDER BY id").map(Self.invite)
        }
    }

    package func useInvite(_ id: Int64) async throws {
        try await self.update { db in
            try db.execute(sql: "UPDATE invites SET uses = uses + 1 WHERE id = ?", arguments: [id])
        }
    }

    package func revokeInvite(_ id: Int64, nowMs: Int64) async throws -> Bool {
        try await self.update { db in
            try db.execute(
                sql: "UPDATE invites SET revoked_ms = ? WHERE id = ? AND revoked_ms IS NULL",
                arguments: [nowMs, id]
            )
            return db.changesCount == 1
        }
    }

    static func invite(_ row: Row) -> Invite {
        Invite(
            id: row["id"],
            createdMs: row["created_ms"],
            expiresMs: row["expires_ms"],
            maxUses: row["max_uses"],
            uses: row["uses"],
            revokedMs: row["revoked_ms"]
        )
    }
}

extension SQLiteTransaction {
    // MARK: Profiles

    package func profiles(of users: [UserID]) async throws -> [UserID: ProfileRow] {
        guard !users.isEmpty else { return [:] }
        return try await self.access { db in
            var profiles: [UserID: ProfileRow] = [:]
            // One lookup by key each: SQLite answers them from its cache faster than it parses a long IN list.
            let statement = try db.cachedStatement(sql: "SELECT * FROM profiles WHERE user_id = ?")
            for user in users {
                if let row = try Row.fetchOne(statement, arguments: [user.rawValue]) {
                    profiles[user] = Self.profile(row)
                }
            }
            return profiles
        }
    }

    package func setProfile(_ profile: ProfileRow?, of user: UserID) async throws {
        try await self.update { db in
            guard let profile else {
                try db.execute(sql: "DELETE FROM profiles WHERE user_id = ?", arguments: [user.rawValue])
                return
            }
            try db.execute(
                sql: """
                    INSERT OR REPLACE INTO profiles (
                        user_id, display_name, avatar_sha256, avatar_size, avatar_mime, avatar_width, avatar_height,
                        thumb_sha256, thumb_size, thumb_mime, thumb_width, thumb_height, updated_ms, bot
                    ) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    user.rawValue, profile.displayName, profile.avatar?.sha256, profile.avatar?.size,
                    profile.avatar?.mime, profile.avatar?.width, profile.avatar?.height, profile.thumbnail?.sha256,
                    profile.thumbnail?.size, profile.thumbnail?.mime, profile.thumbnail?.width,
                    profile.thumbnail?.height, profile.updatedMs, profile.bot,
                ]
            )
        }
    }

    package func profileImage(sha256: String) async throws -> ProfileImage? {
        try await self.access { db in
            let row = try Row.fetchOne(
                db,
                sql: """
                    SELECT p.* FROM profiles p JOIN users u ON u.id = p.user_id
                    WHERE u.removed_ms IS NULL AND (p.avatar_sha256 = ? OR p.thumb_sha256 = ?) LIMIT 1
                    """,
                arguments: [sha256, sha256]
            )
            guard let row else { return nil }
            let profile = Self.profile(row)
            return profile.avatar?.sha256 == sha256 ? profile.avatar : profile.thumbnail
        }
    }

    static func profile(_ row: Row) -> ProfileRow {
        func image(_ prefix: String) -> ProfileImage? {
            guard let sha256: String = row["\(prefix)_sha256"] else { return nil }
            return ProfileImage(
                sha256: sha256,
                size: row["\(prefix)_size"] ?? 0,
                mime: row["\(prefix)_mime"] ?? "",
                width: row["\(prefix)_width"] ?? 0,
                height: row["\(prefix)_height"] ?? 0
            )
        }
        return ProfileRow(
            displayName: row["display_name"],
            avatar: image("avatar"),
            thumbnail: image("thumb"),
            updatedMs: row["updated_ms"],
            bot: row["bot"] ?? false
        )
    }
}
