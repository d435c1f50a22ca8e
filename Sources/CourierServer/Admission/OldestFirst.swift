import NIOCore

/// A set of keys kept in the order they were last put in, whose oldest is taken out in amortized constant time: the
/// connections a full port may close to make room, oldest first.
struct OldestFirst<Key: Hashable & Sendable>: Sendable {
    /// Each key's stamp: when it was last put in.
    private var stamps: [Key: Int] = [:]
    /// Keys with the stamp they were put in with, oldest first; an entry whose stamp is no longer its key's is
    /// skipped (and swept once such entries outnumber the keys).
    private var order = CircularBuffer<(key: Key, stamp: Int)>()
    private var nextStamp = 0

    var count: Int { self.stamps.count }

    /// The length of the order, swept entries included, for tests.
    var orderLength: Int { self.order.count }

    /// Puts a key in as the newest (moving it there if it is in already).
    mutating func insert(_ key: Key) {
        let stamp = self.nextStamp
        self.nextStamp += 1
        self.stamps[key] = stamp
        self.order.append((key, stamp))
        if self.order.count > 2 * self.stamps.count + 1024 {
            self.order = CircularBuffer(self.order.filter { self.stamps[$0.key] == $0.stamp })
        }
    }

    /// Takes a key out.
    ///
    /// - Returns: Whether it was in.
    @discardableResult
    mutating func remove(_ key: Key) -> Bool {
        self.stamps.removeValue(forKey: key) != nil
    }

    /// Takes the oldest key out.
    mutating func popOldest() -> Key? {
        while let (key, stamp) = self.order.popFirst() {
            guard self.stamps[key] == stamp else { continue }
            self.stamps[key] = nil
            return key
        }
        return nil
    }
}
