internal import CourierProtocol

// The rule of migration `v11-media-types` on both databases: media types stored before they were parsed strictly
// (RFC 9110, ``MediaType``) are brought to their one spelling, and one that is no media type at all (such as a list,
// `image/png, text/html`) is dropped, so the file is served as bytes to download.

/// Stored media types and the bodies that carry them, as migration `v11-media-types` leaves them.
package enum MediaTypeRepair {
    /// The spelling a stored type is kept in: its canonical one, or "" (none given) for one that is no media type.
    package static func type(_ stored: String) -> String {
        stored.isEmpty ? "" : MediaType.canonical(stored) ?? ""
    }

    /// A stored `courier.v1.Body` with its media's type respelled by ``type(_:)``; nil when it needs no change (or is
    /// not a media message's body).
    package static func body(_ bytes: [UInt8]) -> [UInt8]? {
        guard var body = try? Courier_V1_Body(serializedBytes: bytes), case .media(var media)? = body.content else {
            return nil
        }
        let repaired = self.type(media.mime)
        guard repaired != media.mime else { return nil }
        media.mime = repaired
        body.media = media
        return try? body.serializedBytes()
    }
}
