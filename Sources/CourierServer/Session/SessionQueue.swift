/// A first-in, first-out queue that holds no storage while empty: a connection's inbox and writes in flight are
/// empty nearly all the time, and an idle connection should not pay for their capacity.
struct SessionQueue<Element> {
    private var storage: [Element] = []
    private var head = 0

    var isEmpty: Bool { self.head == self.storage.count }
    var count: Int { self.storage.count - self.head }
    var first: Element? { self.isEmpty ? nil : self.storage[self.head] }

    mutating func append(_ element: Element) {
        self.storage.append(element)
    }

    mutating func prepend(_ element: Element) {
        if self.head > 0 {
            self.head -= 1
            self.storage[self.head] = element
        } else {
            self.storage.insert(element, at: 0)
        }
    }

    mutating func popFirst() -> Element? {
        guard !self.isEmpty else { return nil }
        let element = self.storage[self.head]
        self.head += 1
        if self.head == self.storage.count {
            // Empty again: give the storage back.
            self.storage = []
            self.head = 0
        } else if self.head >= 64, self.head * 2 >= self.storage.count {
            self.storage.removeFirst(self.head)
            self.head = 0
        }
        return element
    }

    /// The element `offset` places after the first.
    subscript(offset: Int) -> Element {
        get { self.storage[self.head + offset] }
        set { self.storage[self.head + offset] = newValue }
    }

    /// Takes everything out, first first.
    mutating func removeAll() -> [Element] {
        defer {
            self.storage = []
            self.head = 0
        }
        return Array(self.storage[self.head...])
    }
}
