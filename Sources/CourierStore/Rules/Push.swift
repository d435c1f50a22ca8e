// The rules of Web Push subscriptions, for every database.

extension StoreBackend {
    public func addPushSubscription(
        endpoint: String,
        p256dh: [UInt8],
        auth: [UInt8],
        for session: DeviceSession,
        nowMs: Int64
    ) async throws {
        let limits = self.limits
        guard endpoint.utf8.count <= limits.maxPushEndpointBytes else {
            throw CourierStoreError(.invalidRequest, "a push endpoint is at most \(limits.maxPushEndpointBytes) bytes")
        }
        let row = PushSubscriptionRow(
            endpoint: endpoint,
            device: session.device.id,
            user: session.user.id,
            p256dh: p256dh,
            auth: auth,
            createdMs: nowMs
        )
        try await self.addPushTarget(row, for: session, nowMs: nowMs)
    }

    /// Registers a phone's pushkey with a push gateway (Matrix's Push Gateway API) for a device: pushes then go to
    /// the gateway's `notify` URL, as a browser's go to its endpoint, and count against the same limits. A pushkey
    /// registered again by the same user moves to the device that registers it; another user's registration of
    /// the same pushkey is its own (one phone, two accounts), and is never taken away by this one.
    ///
    /// - Throws: `invalid-request` for an app id past ``StoreLimits/maxPushAppIDBytes``, a pushkey past
    ///   ``StoreLimits/maxPushKeyBytes`` or an URL past ``StoreLimits/maxPushEndpointBytes``; `token-revoked` for a
    ///   device logged out meanwhile.
    public func addPushGateway(_ gateway: PushGateway, for session: DeviceSession, nowMs: Int64) async throws {
        let limits = self.limits
        guard !gateway.appID.isEmpty, gateway.appID.utf8.count <= limits.maxPushAppIDBytes else {
            throw CourierStoreError(.invalidRequest, "an app id is 1 to \(limits.maxPushAppIDBytes) bytes")
        }
        guard !gateway.pushkey.isEmpty, gateway.pushkey.utf8.count <= limits.maxPushKeyBytes else {
            throw CourierStoreError(.invalidRequest, "a pushkey is 1 to \(limits.maxPushKeyBytes) bytes")
        }
        guard gateway.url.utf8.count <= limits.maxPushEndpointBytes else {
            throw CourierStoreError(.invalidRequest, "a gateway URL is at most \(limits.maxPushEndpointBytes) bytes")
        }
        let row = PushSubscriptionRow(
            endpoint: PushGateway.key(user: session.user.id, appID: gateway.appID, pushkey: gateway.pushkey),
            device: session.device.id,
            user: session.user.id,
            p256dh: [],
            auth: [],
            createdMs: nowMs,
            gateway: gateway
        )
        try await self.addPushTarget(row, for: session, nowMs: nowMs)
    }

    /// Removes a device's user's registration of a pushkey with a gateway.
    ///
    /// - Returns: Whether there was one.
    public func removePushGateway(appID: String, pushkey: String, for session: DeviceSession) async throws -> Bool {
        try await self.removePushSubscription(
            endpoint: PushGateway.key(user: session.user.id, appID: appID, pushkey: pushkey),
            for: session
        )
    }

    /// Adds a push target (a subscription or a gateway's pushkey) under the user's lock, the oldest making room past
    /// the limits.
    private func addPushTarget(_ row: PushSubscriptionRow, for session: DeviceSession, nowMs: Int64) async throws {
        let limits = self.limits
        let endpoint = row.endpoint
        let (p256dh, auth) = (row.p256dh, row.auth)
        try await self.transaction(doing: "register a push target") { transaction in
            // The user's row first, as every revocation takes it (``StoreTransaction/revokeDevices(_:of:nowMs:)``):
            // a device revoked while its registration waited is seen revoked here, or its revocation, after this
            // commits, drops what this wrote. Two registrations of one user count each other's.
            // The endpoint's user too, if another holds it (a move counts for both): users are locked in order.
            let before = try await transaction.pushSubscription(at: endpoint)
            let locked = Set([session.user.id] + (before.map { [$0.user] } ?? []))
            let rows = try await transaction.lockUsers(locked.sorted())
            guard let user = rows[session.user.id], !user.removed,
                let device = try await transaction.devices(of: session.user.id).first(where: {
                    $0.id == session.device.id
                }),
                device.revokedMs == nil, device.expiresMs > nowMs
            else {
                throw CourierStoreError(.tokenRevoked, "the device was logged out")
            }
            // An endpoint is a browser's subscription: another user's moves here only with its own keys (the same
            // browser, another login); whoever merely learned the endpoint cannot take the pushes away.
            let held = try await transaction.pushSubscription(at: endpoint)
            if let held, !locked.contains(held.user) {
                // Moved to a third user since it was read: rare enough to ask again.
                throw CourierStoreError(.invalidRequest, "this endpoint was just registered elsewhere: try again")
            }
            if let held, held.user != session.user.id,
                !(Self.sameBytes(held.p256dh, p256dh) && Self.sameBytes(held.auth, auth))
            {
                throw CourierStoreError(.invalidRequest, "this endpoint is registered with other keys")
            }
            // Past a limit the oldest subscriptions make room, as the oldest devices do: a user is never locked out
            // by subscriptions of browsers long gone.
            var theirs = try await transaction.pushSubscriptions(of: session.user.id).filter { $0.endpoint != endpoint }
            let mine = session.device.id
            while theirs.filter({ $0.device == mine }).count >= max(1, limits.maxPushSubscriptionsPerDevice) {
                let oldest = theirs.first { $0.device == mine }!
                _ = try await transaction.deletePushSubscription(endpoint: oldest.endpoint, of: session.user.id)
                theirs.removeAll { $0.endpoint == oldest.endpoint }
            }
            while theirs.count >= max(1, limits.maxPushSubscriptionsPerUser) {
                _ = try await transaction.deletePushSubscription(endpoint: theirs[0].endpoint, of: session.user.id)
                theirs.removeFirst()
            }
            try await transaction.putPushSubscription(row)
            // The user it moved from, if any, counts one fewer.
            try await transaction.recountPushTargets(of: Array(Set([session.user.id, held?.user ?? session.user.id])))
        }
    }

    public func removePushSubscription(endpoint: String, for session: DeviceSession) async throws -> Bool {
        try await self.transaction(doing: "remove a push subscription") { transaction in
            guard try await transaction.deletePushSubscription(endpoint: endpoint, of: session.user.id) else {
                return false
            }
            try await transaction.recountPushTargets(of: [session.user.id])
            return true
        }
    }

    public func pushSubscriptions(of user: UserID) async throws -> [PushSubscriptionRow] {
        try await self.reading(doing: "list push subscriptions") { transaction in
            try await transaction.pushSubscriptions(of: user)
        }
    }

    /// Whether two keys are the same, in time that does not depend on where they differ.
    static func sameBytes(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }
}

extension StoreTransaction {
    /// Revokes a user's devices that are not revoked yet, the ones given or all of them (nil), and drops their push
    /// subscriptions: a revoked device is pushed nothing. The user's row is locked first, as a registration locks it.
    ///
    /// - Returns: The devices revoked now, by id.
    func revokeDevices(_ devices: [DeviceID]?, of user: UserID, nowMs: Int64) async throws -> [DeviceID] {
        _ = try await self.lockUsers([user])
        let revoked = try await self.markDevicesRevoked(devices, of: user, nowMs: nowMs)
        try await self.deletePushSubscriptions(of: revoked)
        if !revoked.isEmpty { try await self.recountPushTargets(of: [user]) }
        return revoked
    }
}
