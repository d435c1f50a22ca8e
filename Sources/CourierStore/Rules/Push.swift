// The rules of Web Push subscriptions, for every database.

extension StoreBackend {
    /// Registers a device's push subscription, or moves one registered before (by any device) to it.
    ///
    /// - Throws: `invalid-request` for an endpoint longer than ``StoreLimits/maxPushEndpointBytes``, or past
    ///   ``StoreLimits/maxPushSubscriptionsPerDevice`` or ``StoreLimits/maxPushSubscriptionsPerUser``;
    ///   `storage-failed`.
    public func addPushSubscription(
        endpoint: String,
        p256dh: [UInt8],
        auth: [UInt8],
        for session: DeviceSession,
        nowMs: Int64
    ) async throws {
        let limits = self.limits
        guard endpoint.utf8.count <= limits.maxPushEndpointBytes else {
            throw CourierStoreError(
                .invalidRequest,
                "a push endpoint is at most \(limits.maxPushEndpointBytes) bytes"
            )
        }
        let row = PushSubscriptionRow(
            endpoint: endpoint,
            device: session.device.id,
            user: session.user.id,
            p256dh: p256dh,
            auth: auth,
            createdMs: nowMs
        )
        try await self.transaction(doing: "register a push subscription") { transaction in
            // The user's row first: two registrations of one user count each other's.
            _ = try await transaction.lockUsers([session.user.id])
            let theirs = try await transaction.pushSubscriptions(of: session.user.id).filter { $0.endpoint != endpoint }
            guard theirs.filter({ $0.device == session.device.id }).count < limits.maxPushSubscriptionsPerDevice else {
                throw CourierStoreError(
                    .invalidRequest,
                    "a device has at most \(limits.maxPushSubscriptionsPerDevice) push subscriptions"
                )
            }
            guard theirs.count < limits.maxPushSubscriptionsPerUser else {
                throw CourierStoreError(
                    .invalidRequest,
                    "a user has at most \(limits.maxPushSubscriptionsPerUser) push subscriptions"
                )
            }
            try await transaction.putPushSubscription(row)
        }
    }

    /// Removes one of the user's push subscriptions.
    ///
    /// - Returns: Whether the user had it.
    public func removePushSubscription(endpoint: String, for session: DeviceSession) async throws -> Bool {
        try await self.transaction(doing: "remove a push subscription") { transaction in
            try await transaction.deletePushSubscription(endpoint: endpoint, of: session.user.id)
        }
    }

    /// A user's push subscriptions, of devices not revoked, oldest first.
    public func pushSubscriptions(of user: UserID) async throws -> [PushSubscriptionRow] {
        try await self.reading(doing: "list push subscriptions") { transaction in
            try await transaction.pushSubscriptions(of: user)
        }
    }
}

extension StoreTransaction {
    /// Revokes a user's devices that are not revoked yet, the ones given or all of them (nil), and drops their push
    /// subscriptions: a revoked device is pushed nothing.
    ///
    /// - Returns: The devices revoked now, by id.
    func revokeDevices(_ devices: [DeviceID]?, of user: UserID, nowMs: Int64) async throws -> [DeviceID] {
        let revoked = try await self.markDevicesRevoked(devices, of: user, nowMs: nowMs)
        try await self.deletePushSubscriptions(of: revoked)
        return revoked
    }
}
