extension Duration {
    /// The duration in whole milliseconds (rounded towards zero), as the protocol's `_ms` fields and the store's
    /// times count.
    public var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = self.components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
