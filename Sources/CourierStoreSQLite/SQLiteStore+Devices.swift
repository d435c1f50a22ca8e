public import CourierStore
internal import GRDB

extension SQLiteStore {
    // MARK: Devices and sessions

    /// Devices whose first connection came (`connected`), or whose last one ended, in one transaction: `user
    /// devices` shows each connected since then, or when it was last seen.
    public func recordDeviceActivity(_ changes: [DeviceActivityChange]) async throws {
        // Neither column is one the group commit carries (``write(keepingRows:_:committed:)``): devices connecting
        // and leaving do not make it read everything again.
        try await self.write(keepingRows: true) { db in
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
}
