/// The media a browser may be handed as what it says it is: pictures, sound and video it only shows or plays, each
/// type with the first bytes its files begin with. Anything else users upload (and any of these whose bytes begin
/// otherwise) is served as `application/octet-stream`, as an attachment.
///
/// The list is short on purpose: SVG (which runs script), HTML, XML, PDF and text are absent, and so is every type a
/// browser could read as something else.
public enum InlineMedia {
    /// How many of a file's first bytes ``matches(_:prefix:)`` reads.
    public static let prefixBytes = 16

    /// The types served inline (by their ``MediaType/essence``), each with its files' signature.
    static let signatures: [String: Signature] = [
        "image/png": .png, "image/jpeg": .jpeg, "image/gif": .gif, "image/webp": .webp, "image/avif": .avif,
        "audio/mpeg": .mpegAudio, "audio/aac": .adts,
        "audio/ogg": .ogg, "audio/opus": .ogg, "video/ogg": .ogg,
        "audio/webm": .ebml, "video/webm": .ebml,
        "audio/mp4": .isoMedia, "audio/x-m4a": .isoMedia, "video/mp4": .isoMedia, "video/quicktime": .isoMedia,
        "audio/wav": .wave, "audio/wave": .wave, "audio/x-wav": .wave,
        "audio/flac": .flac, "audio/x-flac": .flac,
    ]

    /// Whether `type` is on the list and `prefix` (a file's first ``prefixBytes`` bytes, or all of a shorter one)
    /// begins as its files do.
    public static func matches(_ type: MediaType, prefix: some Collection<UInt8>) -> Bool {
        guard let signature = self.signatures[type.essence] else { return false }
        return signature.matches(Array(prefix.prefix(self.prefixBytes)))
    }

    /// Whether `type` is on the list at all (whatever the bytes).
    public static func isListed(_ type: MediaType) -> Bool { self.signatures[type.essence] != nil }

    enum Signature {
        case png, jpeg, gif, webp, avif, mpegAudio, adts, ogg, ebml, isoMedia, wave, flac

        func matches(_ bytes: [UInt8]) -> Bool {
            func starts(_ text: String, at offset: Int = 0) -> Bool {
                let expected = Array(text.utf8)
                return bytes.count >= offset + expected.count
                    && Array(bytes[offset..<offset + expected.count]) == expected
            }
            func starts(_ expected: [UInt8]) -> Bool { bytes.starts(with: expected) }
            switch self {
            case .png: return starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
            case .jpeg: return starts([0xFF, 0xD8, 0xFF])
            case .gif: return starts("GIF87a") || starts("GIF89a")
            case .webp: return starts("RIFF") && starts("WEBP", at: 8)
            case .avif: return starts("ftyp", at: 4) && (starts("avif", at: 8) || starts("avis", at: 8))
            // An ID3 tag, or an MPEG audio frame's sync bits (11 set) with a layer (not the reserved 00).
            case .mpegAudio:
                return starts("ID3")
                    || (bytes.count >= 2 && bytes[0] == 0xFF && bytes[1] & 0xE0 == 0xE0
                        && bytes[1] & 0x06 != 0)
            // An ADTS frame: twelve sync bits and layer 00.
            case .adts: return bytes.count >= 2 && bytes[0] == 0xFF && bytes[1] & 0xF6 == 0xF0
            case .ogg: return starts("OggS")
            case .ebml: return starts([0x1A, 0x45, 0xDF, 0xA3])
            case .isoMedia: return starts("ftyp", at: 4)
            case .wave: return starts("RIFF") && starts("WAVE", at: 8)
            case .flac: return starts("fLaC")
            }
        }
    }
}
