/// HLS keys, held in memory only and never written to disk: a key on disk would let anyone with the files decrypt
/// the cached segments. The least recently used beyond a count are forgotten (and fetched again when asked for).
actor KeyStore {
    private var keys: [String: [UInt8]] = [:]
    private var order: [String] = []
    let capacity: Int

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    func key(for url: String) -> [UInt8]? {
        guard let key = self.keys[url] else { return nil }
        self.order.removeAll { $0 == url }
        self.order.append(url)
        return key
    }

    func store(_ key: [UInt8], for url: String) {
        if self.keys.updateValue(key, forKey: url) == nil {
            self.order.append(url)
        }
        while self.order.count > self.capacity {
            self.keys[self.order.removeFirst()] = nil
        }
    }

    var count: Int { self.keys.count }
}
