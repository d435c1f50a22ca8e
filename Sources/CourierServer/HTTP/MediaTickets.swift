import CourierPush
import CourierStore
import Crypto
import Foundation

/// Short-lived tickets for `GET /media/<sha256>?ticket=…`: what a player or a download link, which can only be given a
/// URL, carries instead of a device token. A ticket names one user and one file and ends after
/// ``ServerConfiguration/Media/ticketLifetime``: a URL that lands in a browser's history or download list opens
/// that one file, for that one user, for minutes.
///
/// A ticket is `USER.EXPIRES.MAC`: the user's id, the moment it ends (Unix milliseconds) and an HMAC-SHA256 over
/// both and the file's digest, keyed by a server key kept in the database (one key for every node, so a ticket made
/// by one node opens the file through any). Nothing is stored per ticket. What the user may see is checked again
/// when the ticket is used, as for a token.
struct MediaTickets: Sendable {
    /// The name the key is kept under (``CourierDatabase/serverKey(named:nowMs:make:)``).
    static let keyName = "media-tickets"
    /// The longest ticket read; anything longer is refused before any work.
    static let maxTicketBytes = 128

    let key: SymmetricKey
    /// How long a ticket opens its file.
    let lifetime: Duration

    init(key: [UInt8], lifetime: Duration) {
        self.key = SymmetricKey(data: key)
        self.lifetime = lifetime
    }

    /// A ticket for `user` to `sha256`, and when it ends.
    func issue(user: UserID, sha256: String, nowMs: Int64) -> (ticket: String, expiresMs: Int64) {
        let expires =
            nowMs + Int64(self.lifetime.components.seconds) * 1000
            + self.lifetime.components.attoseconds / 1_000_000_000_000_000
        let mac = self.mac(user: user.rawValue, expiresMs: expires, sha256: sha256)
        return ("\(user.rawValue).\(expires).\(mac)", expires)
    }

    /// Why a ticket opens nothing.
    enum Refusal: Error, Equatable {
        /// Not a ticket of this server, or not for this file.
        case invalid
        /// A ticket of this server for this file, past its end.
        case expired
    }

    /// The user a ticket for `sha256` speaks for.
    ///
    /// - Throws: ``Refusal``.
    func user(of ticket: String, sha256: String, nowMs: Int64) throws(Refusal) -> UserID {
        guard ticket.utf8.count <= Self.maxTicketBytes else { throw .invalid }
        let parts = ticket.split(separator: ".", omittingEmptySubsequences: false)
        // Only as ``issue(user:sha256:nowMs:)`` spells it ("042" and "+42" are not "42", and the MAC is 43
        // characters, unpadded): one ticket, one spelling.
        guard parts.count == 3, let user = Int64(parts[0]), let expires = Int64(parts[1]),
            String(user) == parts[0], String(expires) == parts[1],
            parts[2].utf8.count == 43, let mac = Base64URL.decode(parts[2]), mac.count == SHA256.byteCount
        else { throw .invalid }
        var message = Self.message(user: user, expiresMs: expires, sha256: sha256)
        let valid = message.withUTF8 { bytes in
            HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: bytes, using: self.key)
        }
        guard valid else { throw .invalid }
        guard nowMs < expires else { throw .expired }
        return UserID(rawValue: user)
    }

    private func mac(user: Int64, expiresMs: Int64, sha256: String) -> String {
        var message = Self.message(user: user, expiresMs: expiresMs, sha256: sha256)
        let code = message.withUTF8 { HMAC<SHA256>.authenticationCode(for: $0, using: self.key) }
        return Base64URL.encode(Data(code))
    }

    private static func message(user: Int64, expiresMs: Int64, sha256: String) -> String {
        "courier-media-ticket-1\n\(user)\n\(expiresMs)\n\(sha256)"
    }
}
