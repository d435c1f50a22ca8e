import Foundation
public import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The proxies in front of the server (`--trusted-proxy`), by address or network: their connections carry clients'
/// addresses. On the native and compat ports such a connection must begin with a PROXY protocol header
/// (``ProxyHeader``); on the HTTP port its requests' `X-Forwarded-For` names the client. Every per-address limit then
/// counts the client, not the proxy. Anyone else's header is not read: it cannot choose the address it counts under.
public struct TrustedProxies: Sendable, Equatable {
    /// One network: its address bytes (4 or 16) and prefix length.
    struct Network: Sendable, Equatable {
        var bytes: [UInt8]
        var prefix: Int

        func contains(_ address: [UInt8]) -> Bool {
            guard address.count == self.bytes.count else { return false }
            var left = self.prefix
            for (mine, theirs) in zip(self.bytes, address) where left > 0 {
                let bits = min(8, left)
                let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - bits))
                guard mine & mask == theirs & mask else { return false }
                left -= bits
            }
            return true
        }
    }

    private var networks: [Network] = []
    /// As given: `ADDRESS` or `ADDRESS/BITS`.
    public private(set) var specifications: [String] = []

    public init() {}

    /// Reads `ADDRESS` or `ADDRESS/BITS` (IPv4 or IPv6) for each proxy.
    ///
    /// - Throws: ``Invalid``, naming the one that is not.
    public init(_ specifications: [String]) throws {
        for specification in specifications {
            let parts = specification.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
            guard let bytes = Self.bytes(of: String(parts[0])) else {
                throw Invalid(description: "\(specification) is not an IP address or ADDRESS/BITS")
            }
            var prefix = bytes.count * 8
            if parts.count == 2 {
                guard let bits = Int(parts[1]), parts[1].allSatisfy(\.isNumber), (0...prefix).contains(bits) else {
                    throw Invalid(description: "\(specification): the prefix length is 0 to \(prefix)")
                }
                prefix = bits
            }
            self.networks.append(Network(bytes: bytes, prefix: prefix))
            self.specifications.append(specification)
        }
    }

    public struct Invalid: Error, CustomStringConvertible {
        public var description: String
    }

    public var isEmpty: Bool { self.networks.isEmpty }

    /// Whether a connection from `address` is a trusted proxy's.
    public func contains(_ address: SocketAddress?) -> Bool {
        guard !self.networks.isEmpty, let ip = address?.ipAddress else { return false }
        return self.contains(ip: ip)
    }

    /// Whether `ip` is a trusted proxy's address.
    public func contains(ip: String) -> Bool {
        guard !self.networks.isEmpty, let bytes = Self.bytes(of: ip) else { return false }
        return self.networks.contains { $0.contains(bytes) }
    }

    /// The client a request through a trusted proxy came from: the last address of `X-Forwarded-For` (each proxy
    /// appends the address it was reached from) that is not itself a trusted proxy. Addresses before it were said by
    /// the client, and could be anything. Nil when the header names no such address.
    public func client(forwardedFor values: [String]) -> String? {
        let hops = values.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        for hop in hops.reversed() {
            guard let bytes = Self.bytes(of: hop), let canonical = Self.canonical(hop) else { return nil }
            if !self.networks.contains(where: { $0.contains(bytes) }) { return canonical }
        }
        return nil
    }

    /// An address in its one spelling (`2001:DB8::1` and `2001:db8:0::1` are `2001:db8::1`), as the per-address limits
    /// count it; nil for anything that is not an address alone.
    static func canonical(_ ip: String) -> String? {
        guard !ip.contains("\0"), let address = try? SocketAddress(ipAddress: ip, port: 0) else { return nil }
        return address.ipAddress
    }

    /// An address's bytes: 4 for IPv4 (an IPv4-mapped IPv6 address too), 16 for IPv6; nil for anything else.
    static func bytes(of ip: String) -> [UInt8]? {
        guard !ip.contains("\0") else { return nil }
        var buffer = [UInt8](repeating: 0, count: 16)
        if ip.withCString({ inet_pton(AF_INET, $0, &buffer) }) == 1 { return Array(buffer.prefix(4)) }
        guard ip.withCString({ inet_pton(AF_INET6, $0, &buffer) }) == 1 else { return nil }
        if buffer.prefix(10).allSatisfy({ $0 == 0 }), buffer[10] == 0xFF, buffer[11] == 0xFF {
            return Array(buffer.suffix(4))
        }
        return buffer
    }
}
