/// The key a client address counts under in per-address limits: an IPv4 address whole, an IPv6 address by its
/// /64 prefix (one host is commonly given a whole /64, so counting single IPv6 addresses would let one client
/// appear as billions).
enum AddressKey {
    static func of(ip: String) -> String {
        guard ip.contains(":") else { return ip }
        // An IPv4-mapped address (::ffff:1.2.3.4) counts as the IPv4 address.
        if let last = ip.split(separator: ":").last, last.contains(".") { return String(last) }
        let expanded = Self.expand(ip)
        guard expanded.count == 8 else { return ip }
        return expanded.prefix(4).joined(separator: ":") + "::/64"
    }

    /// The eight groups of an IPv6 address, `::` filled in; fewer when the text is not an IPv6 address.
    private static func expand(_ ip: String) -> [String] {
        let halves = ip.components(separatedBy: "::")
        let head = halves[0].split(separator: ":").map(String.init)
        guard halves.count == 2 else { return head }
        let tail = halves[1].split(separator: ":").map(String.init)
        let missing = 8 - head.count - tail.count
        guard missing >= 0 else { return [] }
        return head + Array(repeating: "0", count: missing) + tail
    }
}
