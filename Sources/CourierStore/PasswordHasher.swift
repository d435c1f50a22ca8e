internal import Crypto
internal import Foundation
internal import _CryptoExtras

/// Salted, slow password hashes: scrypt (RFC 7914) from swift-crypto's `_CryptoExtras`.
///
/// A stored hash reads `scrypt$<log2 N>$<r>$<p>$<salt, base64>$<key, base64>`: the cost parameters travel with the
/// hash, so raising the cost later leaves old hashes verifiable.
public struct PasswordHasher: Hashable, Sendable {
    /// log2 of scrypt's CPU/memory cost N. The default, 15 (N = 32768), with r = 8 uses 32 MiB and about 0.1 s.
    public var logN: Int
    /// scrypt's block size r.
    public var blockSize: Int
    /// scrypt's parallelism p.
    public var parallelism: Int
    /// Bytes of random salt per password.
    public var saltBytes: Int
    /// Bytes of derived key stored.
    public var keyBytes: Int

    /// The production cost: N = 2^15, r = 8, p = 1, a 16-byte salt and a 32-byte key.
    public static let standard = PasswordHasher(logN: 15, blockSize: 8, parallelism: 1, saltBytes: 16, keyBytes: 32)

    public init(logN: Int, blockSize: Int, parallelism: Int, saltBytes: Int, keyBytes: Int) {
        self.logN = logN
        self.blockSize = blockSize
        self.parallelism = parallelism
        self.saltBytes = saltBytes
        self.keyBytes = keyBytes
    }

    /// Hashes a password with a fresh random salt.
    public func hash(_ password: String) throws -> String {
        var generator = SystemRandomNumberGenerator()
        let salt = (0..<self.saltBytes).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        let key = try Self.derive(
            password,
            salt: salt,
            logN: self.logN,
            r: self.blockSize,
            p: self.parallelism,
            count: self.keyBytes
        )
        return [
            "scrypt", String(self.logN), String(self.blockSize), String(self.parallelism),
            Data(salt).base64EncodedString(), Data(key).base64EncodedString(),
        ].joined(separator: "$")
    }

    /// Checks a password against a stored hash in constant time (for hashes of the same length).
    ///
    /// - Returns: false for a wrong password and for a stored value that is not a hash this type wrote.
    public static func verify(_ password: String, against stored: String) -> Bool {
        let parts = stored.split(separator: "$", omittingEmptySubsequences: false)
        guard parts.count == 6, parts[0] == "scrypt",
            let logN = Int(parts[1]), (1...24).contains(logN),
            let r = Int(parts[2]), (1...64).contains(r),
            let p = Int(parts[3]), (1...16).contains(p),
            let salt = Data(base64Encoded: String(parts[4])),
            let expected = Data(base64Encoded: String(parts[5])), !expected.isEmpty,
            let key = try? derive(password, salt: Array(salt), logN: logN, r: r, p: p, count: expected.count)
        else { return false }
        var difference: UInt8 = 0
        for (a, b) in zip(key, expected) { difference |= a ^ b }
        return difference == 0
    }

    private static func derive(
        _ password: String,
        salt: [UInt8],
        logN: Int,
        r: Int,
        p: Int,
        count: Int
    ) throws -> [UInt8] {
        let key = try KDF.Scrypt.deriveKey(
            from: Array(password.utf8),
            salt: salt,
            outputByteCount: count,
            rounds: 1 << logN,
            blockSize: r,
            parallelism: p
        )
        return key.withUnsafeBytes { Array($0) }
    }
}

/// Session tokens: 32 random bytes, base64url, prefixed `ct_`; the store keeps only their SHA-256.
package enum SessionToken {
    static let prefix = "ct_"

    package static func make(prefix: String = SessionToken.prefix) -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        let base64 = Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        return prefix + base64
    }

    static func hash(_ token: String) -> Data {
        Data(self.digest(token))
    }

    /// The token's SHA-256: what a store keeps of it.
    package static func digest(_ token: String) -> [UInt8] {
        Array(SHA256.hash(data: Array(token.utf8)))
    }
}
