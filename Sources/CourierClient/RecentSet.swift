/// A set that keeps only the newest `capacity` insertions: one more forgets the oldest.
struct RecentSet<Element: Hashable & Sendable>: Sendable {
    /// Each member with the serial number of its newest insertion.
    private var members: [Element: UInt64] = [:]
    /// The insertions, oldest at `head`.
    private var order: [(element: Element, serial: UInt64)] = []
    private var head = 0
    private var serial: UInt64 = 0
    let capacity: Int

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    var count: Int { self.members.count }

    func contains(_ element: Element) -> Bool {
        self.members[element] != nil
    }

    mutating func insert(_ element: Element) {
        self.serial += 1
        self.members[element] = self.serial
        self.order.append((element, self.serial))
        while self.order.count - self.head > self.capacity {
            let oldest = self.order[self.head]
            // Only if not inserted again since.
            if self.members[oldest.element] == oldest.serial { self.members[oldest.element] = nil }
            self.head += 1
        }
        // Compacted once the forgotten part is the larger.
        if self.head > self.capacity {
            self.order.removeFirst(self.head)
            self.head = 0
        }
    }

    mutating func remove(_ element: Element) {
        self.members[element] = nil
    }
}
