package import CourierStore
internal import Logging
internal import NIOCore
internal import PostgresNIO

extension PostgresStore {
    /// Runs `body` as one transaction on a pooled connection (``write(doing:_:)``: run again from the start when
    /// PostgreSQL aborts it for a conflict).
    package func transaction<T: Sendable>(
        doing: String,
        _ body: @escaping @Sendable (PostgresTransaction) async throws -> T
    ) async throws -> T {
        try await self.write(doing: doing) { connection in
            try await body(PostgresTransaction(connection: connection, store: self))
        }
    }

    /// Runs reads on one pooled connection, outside a transaction.
    package func reading<T: Sendable>(
        doing: String,
        _ body: @escaping @Sendable (PostgresTransaction) async throws -> T
    ) async throws -> T {
        try await self.read(doing: doing) { connection in
            try await body(PostgresTransaction(connection: connection, store: self))
        }
    }
}

/// The reads and writes of the store's rules in PostgreSQL's SQL, on one connection. Rows a transaction writes are
/// locked in one order by every write: conversations, users, devices, each by id.
package struct PostgresTransaction: StoreTransaction {
    let connection: PostgresConnection
    let store: PostgresStore
    var logger: Logger { self.store.logger }

    // MARK: Users

    package func user(named name: String) async throws -> User? {
        try await PostgresStore.user(named: name, self.connection, logger: self.logger)
    }

    package func users() async throws -> [User] {
        try await self.connection.rows(
            "SELECT id, name, created_ms, removed_ms FROM users ORDER BY lower(name) COLLATE \"C\"",
            logger: self.logger
        ).map(PostgresStore.user)
    }

    package func passwordHash(of user: UserID) async throws -> String? {
        try await self.connection.value(
            "SELECT password_hash FROM users WHERE id = \(user.rawValue)",
            as: String.self,
            logger: self.logger
        )
    }

    package func insertUser(name: String, passwordHash: String, nowMs: Int64) async throws -> UserID? {
        // Two nodes adding the name at once: the unique index on lower(name) lets one in.
        try await self.connection.value(
            """
            INSERT INTO users (name, password_hash, created_ms) VALUES (\(name), \(passwordHash), \(nowMs))
            ON CONFLICT DO NOTHING RETURNING id
            """,
            as: Int64.self,
            logger: self.logger
        ).map(UserID.init(rawValue:))
    }

    package func setPasswordHash(_ hash: String, of user: UserID) async throws {
        try await self.connection.run(
            "UPDATE users SET password_hash = \(hash) WHERE id = \(user.rawValue)",
            logger: self.logger
        )
    }

    package func markRemoved(_ user: UserID, nowMs: Int64) async throws {
        try await self.connection.run(
            "UPDATE users SET removed_ms = \(nowMs), password_hash = NULL WHERE id = \(user.rawValue)",
            logger: self.logger
        )
    }

    package func logCursor(of user: UserID) async throws -> Int64 {
        try await self.connection.value(
            "SELECT cursor FROM log_heads WHERE user_id = \(user.rawValue)",
            as: Int64.self,
            logger: self.logger
        ) ?? 0
    }

    // MARK: Devices

    package func usableDevices(of user: UserID, nowMs: Int64) async throws -> Int {
        try await self.connection.value(
            """
            SELECT count(*)::bigint FROM devices
            WHERE user_id = \(user.rawValue) AND revoked_ms IS NULL AND expires_ms > \(nowMs)
            """,
            as: Int64.self,
            logger: self.logger
        ).map { Int($0) } ?? 0
    }

    package func devices(of user: UserID) async throws -> [Device] {
        try await self.connection.rows(
            """
            SELECT d.*, u.name AS user_name FROM devices d JOIN users u ON u.id = d.user_id
            WHERE d.user_id = \(user.rawValue) ORDER BY d.id
            """,
            logger: self.logger
        ).map(PostgresStore.device)
    }

    package func device(holding tokenHash: [UInt8], nowMs: Int64, locking: Bool) async throws -> HeldDevice? {
        let hash = ByteBuffer(bytes: tokenHash)
        let row =
            locking
            ? try await self.connection.row(
                """
                SELECT d.*, u.name AS user_name, u.created_ms AS user_created_ms, u.removed_ms AS user_removed_ms
                FROM devices d JOIN users u ON u.id = d.user_id
                WHERE d.token_hash = \(hash)
                    OR (d.previous_token_hash = \(hash) AND d.previous_token_until_ms > \(nowMs))
                FOR UPDATE OF d
                """,
                logger: self.logger
            )
            : try await self.connection.row(
                """
                SELECT d.*, u.name AS user_name, u.created_ms AS user_created_ms, u.removed_ms AS user_removed_ms
                FROM devices d JOIN users u ON u.id = d.user_id
                WHERE d.token_hash = \(hash)
                    OR (d.previous_token_hash = \(hash) AND d.previous_token_until_ms > \(nowMs))
                """,
                logger: self.logger
            )
        guard let row else { return nil }
        return HeldDevice(
            device: try PostgresStore.device(row),
            tokens: try Self.tokens(row),
            user: User(
                id: UserID(rawValue: try row.get("user_id")),
                name: try row.get("user_name"),
                createdMs: try row.get("user_created_ms"),
                removedMs: try row.get("user_removed_ms")
            )
        )
    }

    package func tokens(of device: DeviceID, locking: Bool) async throws -> DeviceTokens? {
        let row =
            locking
            ? try await self.connection.row(
                """
                SELECT token_hash, expires_ms, previous_token_hash, previous_token_until_ms, previous_expires_ms
                FROM devices WHERE id = \(device.rawValue) FOR UPDATE
                """,
                logger: self.logger
            )
            : try await self.connection.row(
                """
                SELECT token_hash, expires_ms, previous_token_hash, previous_token_until_ms, previous_expires_ms
                FROM devices WHERE id = \(device.rawValue)
                """,
                logger: self.logger
            )
        return try row.map(Self.tokens)
    }

    static func tokens(_ row: PostgresRandomAccessRow) throws -> DeviceTokens {
        DeviceTokens(
            tokenHash: try row.bytes("token_hash"),
            expiresMs: try row.get("expires_ms"),
            previousHash: try row.get("previous_token_hash", as: ByteBuffer?.self).map { Array($0.readableBytesView) },
            previousUntilMs: try row.get("previous_token_until_ms"),
            previousExpiresMs: try row.get("previous_expires_ms")
        )
    }

    package func setTokens(_ tokens: DeviceTokens, of device: DeviceID) async throws {
        try await self.connection.run(
            """
            UPDATE devices SET token_hash = \(ByteBuffer(bytes: tokens.tokenHash)), expires_ms = \(tokens.expiresMs),
            previous_token_hash = \(tokens.previousHash.map { ByteBuffer(bytes: $0) }),
            previous_token_until_ms = \(tokens.previousUntilMs), previous_expires_ms = \(tokens.previousExpiresMs)
            WHERE id = \(device.rawValue)
            """,
            logger: self.logger
        )
    }

    package func insertDevice(_ device: NewDevice) async throws -> DeviceID {
        guard
            let id = try await self.connection.value(
                """
                INSERT INTO devices (user_id, name, token_hash, created_ms, expires_ms, acked_cursor)
                VALUES (\(device.user.rawValue), \(device.name), \(ByteBuffer(bytes: device.tokenHash)),
                    \(device.createdMs), \(device.expiresMs), \(device.ackedCursor))
                RETURNING id
                """,
                as: Int64.self,
                logger: self.logger
            )
        else { throw CourierStoreError(.storageFailed, "no id for a new device") }
        return DeviceID(rawValue: id)
    }

    package func markDevicesRevoked(_ devices: [DeviceID]?, of user: UserID, nowMs: Int64) async throws -> [DeviceID] {
        let revoked =
            if let devices {
                try await self.connection.values(
                    """
                    UPDATE devices SET revoked_ms = \(nowMs) WHERE id IN (
                        SELECT id FROM devices WHERE user_id = \(user.rawValue) AND revoked_ms IS NULL
                        AND id = ANY(\(devices.map(\.rawValue))) ORDER BY id FOR UPDATE
                    ) RETURNING id
                    """,
                    as: Int64.self,
                    logger: self.logger
                )
            } else {
                try await self.connection.values(
                    """
                    UPDATE devices SET revoked_ms = \(nowMs) WHERE id IN (
                        SELECT id FROM devices WHERE user_id = \(user.rawValue) AND revoked_ms IS NULL
                        ORDER BY id FOR UPDATE
                    ) RETURNING id
                    """,
                    as: Int64.self,
                    logger: self.logger
                )
            }
        return revoked.sorted().map(DeviceID.init(rawValue:))
    }

    // MARK: Push subscriptions

    package func pushSubscriptions(of user: UserID) async throws -> [PushSubscriptionRow] {
        try await self.connection.rows(
            """
            SELECT s.* FROM push_subscriptions s JOIN devices d ON d.id = s.device_id
            WHERE s.user_id = \(user.rawValue) AND d.revoked_ms IS NULL ORDER BY s.created_ms, s.endpoint
            """,
            logger: self.logger
        ).map(Self.pushSubscription)
    }

    package func pushSubscription(at endpoint: String) async throws -> PushSubscriptionRow? {
        try await self.connection.row(
            "SELECT * FROM push_subscriptions WHERE endpoint = \(endpoint)",
            logger: self.logger
        ).map(Self.pushSubscription)
    }

    static func pushSubscription(_ row: PostgresRandomAccessRow) throws -> PushSubscriptionRow {
        PushSubscriptionRow(
            endpoint: try row.get("endpoint"),
            device: DeviceID(rawValue: try row.get("device_id")),
            user: UserID(rawValue: try row.get("user_id")),
            p256dh: try row.bytes("p256dh"),
            auth: try row.bytes("auth"),
            createdMs: try row.get("created_ms"),
            gateway: try (row.get("gateway_url") as String?).map { url in
                PushGateway(
                    appID: try row.get("app_id") as String? ?? "",
                    pushkey: try row.get("pushkey") as String? ?? "",
                    url: url
                )
            }
        )
    }

    package func putPushSubscription(_ row: PushSubscriptionRow) async throws {
        try await self.connection.run(
            """
            INSERT INTO push_subscriptions
                (endpoint, device_id, user_id, p256dh, auth, created_ms, gateway_url, app_id, pushkey)
            VALUES (\(row.endpoint), \(row.device.rawValue), \(row.user.rawValue), \(ByteBuffer(bytes: row.p256dh)),
                \(ByteBuffer(bytes: row.auth)), \(row.createdMs), \(row.gateway?.url), \(row.gateway?.appID),
                \(row.gateway?.pushkey))
            ON CONFLICT (endpoint) DO UPDATE SET device_id = excluded.device_id, user_id = excluded.user_id,
                p256dh = excluded.p256dh, auth = excluded.auth, created_ms = excluded.created_ms,
                gateway_url = excluded.gateway_url, app_id = excluded.app_id, pushkey = excluded.pushkey
            """,
            logger: self.logger
        )
    }

    package func deletePushSubscription(endpoint: String, of user: UserID) async throws -> Bool {
        try await self.connection.rows(
            """
            DELETE FROM push_subscriptions WHERE endpoint = \(endpoint) AND user_id = \(user.rawValue)
            RETURNING endpoint
            """,
            logger: self.logger
        ).count == 1
    }

    package func deletePushSubscriptions(of devices: [DeviceID]) async throws {
        guard !devices.isEmpty else { return }
        try await self.connection.run(
            "DELETE FROM push_subscriptions WHERE device_id = ANY(\(devices.map(\.rawValue)))",
            logger: self.logger
        )
    }

    // MARK: Server keys

    package func serverKey(named name: String) async throws -> [UInt8]? {
        try await self.connection.row("SELECT value FROM server_keys WHERE name = \(name)", logger: self.logger)
            .map { try $0.bytes("value") }
    }

    package func insertServerKey(named name: String, value: [UInt8], nowMs: Int64) async throws {
        try await self.connection.run(
            """
            INSERT INTO server_keys (name, value, created_ms) VALUES (\(name), \(ByteBuffer(bytes: value)), \(nowMs))
            ON CONFLICT (name) DO NOTHING
            """,
            logger: self.logger
        )
    }

    // MARK: Invitations

    package func insertInvite(tokenHash: [UInt8], maxUses: Int, expiresMs: Int64?, nowMs: Int64) async throws -> Int64 {
        let id = try await self.connection.value(
            """
            INSERT INTO invites (token_hash, created_ms, expires_ms, max_uses)
            VALUES (\(ByteBuffer(bytes: tokenHash)), \(nowMs), \(expiresMs), \(Int64(maxUses))) RETURNING id
            """,
            as: Int64.self,
            logger: self.logger
        )
        guard let id else { throw CourierStoreError(.storageFailed, "the invitation was not stored") }
        return id
    }

    package func invite(holding tokenHash: [UInt8], locking: Bool) async throws -> Invite? {
        let hash = ByteBuffer(bytes: tokenHash)
        let row =
            locking
            ? try await self.connection.row(
                "SELECT * FROM invites WHERE token_hash = \(hash) FOR UPDATE",
                logger: self.logger
            )
            : try await self.connection.row("SELECT * FROM invites WHERE token_hash = \(hash)", logger: self.logger)
        return try row.map(Self.invite)
    }

    package func invites() async throws -> [Invite] {
        try await self.connection.rows("SELECT * FROM invites ORDER BY id", logger: self.logger).map(Self.invite)
    }

    package func useInvite(_ id: Int64) async throws {
        try await self.connection.run("UPDATE invites SET uses = uses + 1 WHERE id = \(id)", logger: self.logger)
    }

    package func revokeInvite(_ id: Int64, nowMs: Int64) async throws -> Bool {
        try await self.connection.value(
            "UPDATE invites SET revoked_ms = \(nowMs) WHERE id = \(id) AND revoked_ms IS NULL RETURNING id",
            as: Int64.self,
            logger: self.logger
        ) != nil
    }

    static func invite(_ row: PostgresRandomAccessRow) throws -> Invite {
        Invite(
            id: try row.get("id"),
            createdMs: try row.get("created_ms"),
            expiresMs: try row.get("expires_ms"),
            maxUses: Int(try row.get("max_uses", as: Int64.self)),
            uses: Int(try row.get("uses", as: Int64.self)),
            revokedMs: try row.get("revoked_ms")
        )
    }

    // MARK: Profiles

    package func profiles(of users: [UserID]) async throws -> [UserID: ProfileRow] {
        guard !users.isEmpty else { return [:] }
        let rows = try await self.connection.rows(
            "SELECT * FROM profiles WHERE user_id = ANY(\(users.map(\.rawValue)))",
            logger: self.logger
        )
        var profiles: [UserID: ProfileRow] = [:]
        for row in rows { profiles[UserID(rawValue: try row.get("user_id"))] = try Self.profile(row) }
        return profiles
    }

    package func setProfile(_ profile: ProfileRow?, of user: UserID) async throws {
        guard let profile else {
            try await self.connection.run("DELETE FROM profiles WHERE user_id = \(user.rawValue)", logger: self.logger)
            return
        }
        let (avatar, thumbnail) = (profile.avatar, profile.thumbnail)
        try await self.connection.run(
            """
            INSERT INTO profiles (
                user_id, display_name, avatar_sha256, avatar_size, avatar_mime, avatar_width, avatar_height,
                thumb_sha256, thumb_size, thumb_mime, thumb_width, thumb_height, updated_ms, bot
            ) VALUES (
                \(user.rawValue), \(profile.displayName), \(avatar?.sha256), \(avatar?.size), \(avatar?.mime),
                \(avatar.map { Int64($0.width) }), \(avatar.map { Int64($0.height) }), \(thumbnail?.sha256),
                \(thumbnail?.size), \(thumbnail?.mime), \(thumbnail.map { Int64($0.width) }),
                \(thumbnail.map { Int64($0.height) }), \(profile.updatedMs), \(profile.bot)
            )
            ON CONFLICT (user_id) DO UPDATE SET
                display_name = EXCLUDED.display_name, avatar_sha256 = EXCLUDED.avatar_sha256,
                avatar_size = EXCLUDED.avatar_size, avatar_mime = EXCLUDED.avatar_mime,
                avatar_width = EXCLUDED.avatar_width, avatar_height = EXCLUDED.avatar_height,
                thumb_sha256 = EXCLUDED.thumb_sha256, thumb_size = EXCLUDED.thumb_size,
                thumb_mime = EXCLUDED.thumb_mime, thumb_width = EXCLUDED.thumb_width,
                thumb_height = EXCLUDED.thumb_height, updated_ms = EXCLUDED.updated_ms, bot = EXCLUDED.bot
            """,
            logger: self.logger
        )
    }

    package func profileImage(sha256: String) async throws -> ProfileImage? {
        let row = try await self.connection.row(
            """
            SELECT p.* FROM profiles p JOIN users u ON u.id = p.user_id
            WHERE u.removed_ms IS NULL AND (p.avatar_sha256 = \(sha256) OR p.thumb_sha256 = \(sha256)) LIMIT 1
            """,
            logger: self.logger
        )
        guard let row else { return nil }
        let profile = try Self.profile(row)
        return profile.avatar?.sha256 == sha256 ? profile.avatar : profile.thumbnail
    }

    static func profile(_ row: PostgresRandomAccessRow) throws -> ProfileRow {
        func image(_ prefix: String) throws -> ProfileImage? {
            guard let sha256 = try row.get("\(prefix)_sha256", as: String?.self) else { return nil }
            return ProfileImage(
                sha256: sha256,
                size: try row.get("\(prefix)_size", as: Int64?.self) ?? 0,
                mime: try row.get("\(prefix)_mime", as: String?.self) ?? "",
                width: Int(try row.get("\(prefix)_width", as: Int64?.self) ?? 0),
                height: Int(try row.get("\(prefix)_height", as: Int64?.self) ?? 0)
            )
        }
        return ProfileRow(
            displayName: try row.get("display_name"),
            avatar: try image("avatar"),
            thumbnail: try image("thumb"),
            updatedMs: try row.get("updated_ms"),
            bot: try row.get("bot", as: Bool?.self) ?? false
        )
    }

    // MARK: Changes

    package func recordChanges(_ changes: [StoreChange], nowMs: Int64) async throws {
        try await PostgresStore.recordChanges(changes, nowMs: nowMs, self.connection, logger: self.logger)
    }

    package func latestChangeID() async throws -> Int64 {
        try await self.connection.value("SELECT MAX(id) FROM changes", as: Int64.self, logger: self.logger) ?? 0
    }

    package func changes(after id: Int64, limit: Int) async throws -> [(id: Int64, change: StoreChange?)] {
        try await self.connection.rows(
            "SELECT id, kind, user_id, device_id FROM changes WHERE id > \(id) ORDER BY id LIMIT \(limit)",
            logger: self.logger
        ).map { row in
            (
                try row.get("id"),
                StoreChange(
                    kind: try row.get("kind", as: Int64.self),
                    user: try row.get("user_id", as: Int64?.self).map(UserID.init(rawValue:)),
                    device: try row.get("device_id", as: Int64?.self).map(DeviceID.init(rawValue:))
                )
            )
        }
    }

    package func pruneChanges(olderThanMs: Int64) async throws {
        try await self.connection.run("DELETE FROM changes WHERE time_ms < \(olderThanMs)", logger: self.logger)
    }
}
