/// The rule for user and group names: 1 to 32 ASCII letters, digits, `.`, `_` or `-`, starting with a letter or a
/// digit. Names are unique without regard to case and keep the case they were created with.
public enum Names {
    /// The longest name, in bytes.
    public static let maxLength = 32

    /// Checks a name against the rule.
    ///
    /// - Throws: ``CourierStoreError`` with code `invalid-name`, saying what is wrong.
    public static func validate(_ name: String, what: String = "name") throws {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, bytes.count <= maxLength else {
            throw CourierStoreError(.invalidName, "a \(what) has 1 to \(maxLength) characters, not \(bytes.count)")
        }
        func isAlphanumeric(_ byte: UInt8) -> Bool {
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
        }
        guard isAlphanumeric(bytes[0]) else {
            throw CourierStoreError(.invalidName, "a \(what) starts with a letter or a digit")
        }
        for byte in bytes where !isAlphanumeric(byte) && !"._-".utf8.contains(byte) {
            throw CourierStoreError(
                .invalidName,
                "a \(what) has only letters, digits, '.', '_' and '-', not \(String(decoding: [byte], as: UTF8.self).debugDescription)"
            )
        }
    }
}
