internal import Crypto
internal import Foundation

/// Why a push could not be made: the subscriber's keys, or a payload too large for one push.
public struct PushError: Error, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable {
        /// The subscription's `p256dh` is not an uncompressed P-256 point, or its `auth` not 16 bytes of base64url.
        case badSubscriptionKeys = "bad-subscription-keys"
        /// The payload, once encrypted, would pass the 4,096 bytes every push service must take.
        case payloadTooLarge = "payload-too-large"
        /// The push endpoint is not an absolute `https://` (or `http://`) URL with a host.
        case badEndpoint = "bad-endpoint"
    }

    public var code: Code
    public var description: String

    init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }

    /// Errors are the same when their codes are: the description is for people.
    public static func == (lhs: PushError, rhs: PushError) -> Bool { lhs.code == rhs.code }
}

/// A browser's subscription keys (`PushSubscription.toJSON().keys`): the user agent's P-256 public key and its
/// authentication secret. Made only from keys that are what they claim to be, since a subscription's body is the
/// network's.
public struct PushSubscriptionKeys: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The user agent's public key, an uncompressed point (65 bytes, `0x04 ‖ x ‖ y`).
    public let p256dh: [UInt8]
    /// The authentication secret, 16 bytes.
    public let auth: [UInt8]

    /// Keys as the browser spells them, base64url.
    ///
    /// - Throws: ``PushError`` `bad-subscription-keys` unless `p256dh` is a point on P-256 in its uncompressed form
    ///   and `auth` is 16 bytes.
    public init(p256dh: String, auth: String) throws {
        guard let point = Base64URL.decode(p256dh), let secret = Base64URL.decode(auth) else {
            throw PushError(.badSubscriptionKeys, "the subscription's keys are not base64url")
        }
        try self.init(p256dh: point, auth: secret)
    }

    /// Keys as bytes.
    ///
    /// - Throws: ``PushError`` `bad-subscription-keys`, as ``init(p256dh:auth:)-(String,String)``.
    public init(p256dh: [UInt8], auth: [UInt8]) throws {
        guard p256dh.count == 65, p256dh.first == 0x04,
            (try? P256.KeyAgreement.PublicKey(x963Representation: p256dh)) != nil
        else {
            throw PushError(.badSubscriptionKeys, "p256dh is not an uncompressed P-256 public key")
        }
        guard auth.count == 16 else {
            throw PushError(.badSubscriptionKeys, "auth is \(auth.count) bytes, not 16")
        }
        self.p256dh = p256dh
        self.auth = auth
    }

    /// The public key only: the authentication secret is never shown.
    public var description: String { "PushSubscriptionKeys(p256dh: \(Base64URL.encode(self.p256dh)))" }
    public var debugDescription: String { self.description }
}

/// Message encryption for Web Push (RFC 8291) in the `aes128gcm` content coding (RFC 8188): one record, so that a
/// push service relays bytes it cannot read and the browser alone opens them.
///
/// A push's body is `salt (16) ‖ record size (4, 4096) ‖ key id length (1, 65) ‖ the sender's ephemeral public key
/// (65) ‖ the record`, the record being AES-128-GCM over the payload, a `0x02` delimiter and zeros of padding. Each
/// push takes a fresh ephemeral key pair and a fresh salt: the pair (key, nonce) is never used twice.
public enum WebPushEncryption {
    /// The record size written in the header: 4,096, the most a push service must take.
    public static let recordSize = 4096
    /// The header before the record: salt, record size, key id length, the sender's public key.
    public static let headerSize = 16 + 4 + 1 + 65
    /// The largest payload one push carries: the record size less the header, the delimiter and GCM's 16-byte tag.
    public static let maxPayload = recordSize - headerSize - 1 - 16

    /// Encrypts a payload for one subscriber.
    ///
    /// - Parameters:
    ///   - payload: The bytes the service worker reads (`event.data`).
    ///   - keys: The subscriber's keys.
    ///   - paddedTo: The payload's length is hidden up to this many bytes (zeros after the delimiter); a longer payload is
    ///     not padded. At most ``maxPayload``.
    /// - Returns: The push's body, for a `POST` with `Content-Encoding: aes128gcm`.
    /// - Throws: ``PushError`` `payload-too-large` past ``maxPayload``.
    public static func encrypt(
        _ payload: some Collection<UInt8>,
        for keys: PushSubscriptionKeys,
        paddedTo: Int = 0
    ) throws -> [UInt8] {
        var salt = [UInt8](repeating: 0, count: 16)
        var generator = SystemRandomNumberGenerator()
        for index in salt.indices { salt[index] = generator.next() }
        return try self.encrypt(
            payload,
            for: keys,
            paddedTo: paddedTo,
            sender: P256.KeyAgreement.PrivateKey(),
            salt: salt
        )
    }

    /// ``encrypt(_:for:paddedTo:)`` with the sender's ephemeral key and the salt given: for RFC 8291's worked
    /// example. Never call it twice with the same key and salt.
    static func encrypt(
        _ payload: some Collection<UInt8>,
        for keys: PushSubscriptionKeys,
        paddedTo: Int,
        sender: P256.KeyAgreement.PrivateKey,
        salt: [UInt8]
    ) throws -> [UInt8] {
        guard payload.count <= Self.maxPayload else {
            throw PushError(
                .payloadTooLarge,
                "a push carries at most \(Self.maxPayload) bytes of payload, not \(payload.count)"
            )
        }
        precondition(salt.count == 16, "a salt is 16 bytes")
        let userAgent = try P256.KeyAgreement.PublicKey(x963Representation: keys.p256dh)
        let senderPublic = Array(sender.publicKey.x963Representation)
        let shared = try sender.sharedSecretFromKeyAgreement(with: userAgent)

        // RFC 8291 §3.3-3.4: the input keying material from the ECDH secret, the auth secret and both public keys.
        let keyInfo = Array("WebPush: info".utf8) + [0] + keys.p256dh + senderPublic
        let inputKey = shared.hkdfDerivedSymmetricKey(
            using: SHA256.self,
            salt: keys.auth,
            sharedInfo: keyInfo,
            outputByteCount: 32
        )
        // RFC 8188 §2.2-2.3: the content encryption key and the nonce, from that and the salt.
        let contentKey = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: inputKey,
            salt: salt,
            info: Array("Content-Encoding: aes128gcm".utf8) + [0],
            outputByteCount: 16
        )
        let nonce = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: inputKey,
            salt: salt,
            info: Array("Content-Encoding: nonce".utf8) + [0],
            outputByteCount: 12
        ).withUnsafeBytes { Array($0) }

        var record = Array(payload)
        record.append(0x02)
        let padded = min(max(paddedTo, payload.count), Self.maxPayload)
        record.append(contentsOf: repeatElement(0, count: padded - payload.count))
        let sealed = try AES.GCM.seal(record, using: contentKey, nonce: AES.GCM.Nonce(data: nonce))

        var body: [UInt8] = []
        body.reserveCapacity(Self.headerSize + record.count + 16)
        body.append(contentsOf: salt)
        let size = UInt32(Self.recordSize)
        body.append(contentsOf: [
            UInt8(size >> 24), UInt8(size >> 16 & 0xFF), UInt8(size >> 8 & 0xFF), UInt8(size & 0xFF),
        ])
        body.append(UInt8(senderPublic.count))
        body.append(contentsOf: senderPublic)
        body.append(contentsOf: sealed.ciphertext)
        body.append(contentsOf: sealed.tag)
        return body
    }
}
