#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Which addresses a request to a URL a user gave (a push endpoint, a webhook, a gateway) may reach: only public
/// unicast ones. Loopback, private, shared, link-local (the clouds' metadata services), multicast, documentation and
/// reserved ranges are refused, in IPv4 and in IPv6, including IPv4 addresses carried in IPv6 (mapped, NAT64,
/// 6to4) — unless the server allows private targets.
enum TargetAddress {
    /// An address as its bytes: 4 for IPv4, 16 for IPv6.
    static func isPublic(_ bytes: [UInt8]) -> Bool {
        switch bytes.count {
        case 4: return Self.isPublicV4(bytes)
        case 16: return Self.isPublicV6(bytes)
        default: return false
        }
    }

    /// An address written as text (either family); false for anything that is not an address.
    static func isPublic(_ text: String) -> Bool {
        guard let bytes = Self.parse(text) else { return false }
        return Self.isPublic(bytes)
    }

    /// An address written as text, as its bytes, or nil.
    static func parse(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { Array($0) }
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            return withUnsafeBytes(of: &v6) { Array($0) }
        }
        return nil
    }

    /// The text of an address's bytes.
    static func text(_ bytes: [UInt8]) -> String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        let family = bytes.count == 4 ? AF_INET : AF_INET6
        let written = bytes.withUnsafeBytes { raw in
            inet_ntop(family, raw.baseAddress, &buffer, socklen_t(buffer.count))
        }
        guard written != nil else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func isPublicV4(_ a: [UInt8]) -> Bool {
        let (b0, b1, b2) = (a[0], a[1], a[2])
        switch b0 {
        case 0, 10, 127: return false  // "this network", private, loopback
        case 100 where b1 & 0xC0 == 64: return false  // shared address space (carrier NAT), 100.64.0.0/10
        case 169 where b1 == 254: return false  // link-local: 169.254.169.254 is the metadata service
        case 172 where b1 & 0xF0 == 16: return false  // private, 172.16.0.0/12
        case 192 where b1 == 168: return false  // private
        case 192 where b1 == 0 && (b2 == 0 || b2 == 2): return false  // IETF protocol assignments, TEST-NET-1
        case 198 where b1 & 0xFE == 18: return false  // benchmarking, 198.18.0.0/15
        case 198 where b1 == 51 && b2 == 100: return false  // TEST-NET-2
        case 203 where b1 == 0 && b2 == 113: return false  // TEST-NET-3
        case 224...255: return false  // multicast, reserved, broadcast
        default: return true
        }
    }

    private static func isPublicV6(_ a: [UInt8]) -> Bool {
        let embedded = Array(a[12..<16])
        let zeros = { (range: Range<Int>) in a[range].allSatisfy { $0 == 0 } }
        // ::, ::1, and the deprecated IPv4-compatible ::a.b.c.d.
        if zeros(0..<12) { return false }
        // IPv4-mapped ::ffff:a.b.c.d: as the IPv4 address.
        if zeros(0..<10) && a[10] == 0xFF && a[11] == 0xFF { return Self.isPublicV4(embedded) }
        // NAT64 64:ff9b::a.b.c.d (and the local-use 64:ff9b:1::/48): as the IPv4 address, or refused.
        if a[0] == 0x00 && a[1] == 0x64 && a[2] == 0xFF && a[3] == 0x9B {
            return zeros(4..<12) ? Self.isPublicV4(embedded) : false
        }
        // 6to4 2002:a.b.c.d::/48: as the IPv4 address.
        if a[0] == 0x20 && a[1] == 0x02 { return Self.isPublicV4(Array(a[2..<6])) }
        switch a[0] {
        case 0xFC, 0xFD: return false  // unique local, fc00::/7
        case 0xFE where a[1] & 0xC0 == 0x80: return false  // link-local, fe80::/10
        case 0xFE where a[1] & 0xC0 == 0xC0: return false  // site-local (deprecated), fec0::/10
        case 0xFF: return false  // multicast
        default: break
        }
        // Discard-only 100::/64; documentation 2001:db8::/32; Teredo 2001::/32 (carries addresses of its own).
        if a[0] == 0x01 && a[1] == 0x00 && zeros(2..<8) { return false }
        if a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0D && a[3] == 0xB8 { return false }
        if a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x00 && a[3] == 0x00 { return false }
        // Only global unicast (2000::/3) is public.
        return a[0] & 0xE0 == 0x20
    }
}
