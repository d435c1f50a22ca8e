/// The one spelling of a SHA-256 digest everywhere Courier names media by it (the protocol's `sha256` fields, the
/// server's media store, the SDK's and the proxy's caches, file names): 64 lowercase hex digits. Another spelling of
/// the same digest (upper case) is refused rather than taken as a second name of one file.
public enum SHA256Hex {
    /// Whether `text` is 64 lowercase hex digits.
    public static func isValid(_ text: some StringProtocol) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    /// The hex spelling of a digest's bytes.
    public static func string(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
