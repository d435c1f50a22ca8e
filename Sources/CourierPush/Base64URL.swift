/// base64url (RFC 4648 §5) without padding, as Web Push and JWTs spell keys, secrets and tokens.
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    private static let values: [Int8] = {
        var values = [Int8](repeating: -1, count: 256)
        for (index, byte) in alphabet.enumerated() { values[Int(byte)] = Int8(index) }
        return values
    }()

    /// The bytes spelled without padding.
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var iterator = bytes.makeIterator()
        while let first = iterator.next() {
            let second = iterator.next()
            let third = iterator.next()
            let group = UInt32(first) << 16 | UInt32(second ?? 0) << 8 | UInt32(third ?? 0)
            out.append(alphabet[Int(group >> 18 & 63)])
            out.append(alphabet[Int(group >> 12 & 63)])
            if second != nil { out.append(alphabet[Int(group >> 6 & 63)]) }
            if third != nil { out.append(alphabet[Int(group & 63)]) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes a text spells, or nil when it is not base64url: a character outside the alphabet, a length no
    /// encoding has, or bits left over that an encoder would have written as zero. The padding some senders add is
    /// allowed when it is exactly what base64 pads with (`==` after 2 characters of a group, `=` after 3).
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        var utf8 = Array(text.utf8)
        var padding = 0
        while utf8.last == UInt8(ascii: "=") {
            utf8.removeLast()
            padding += 1
        }
        guard utf8.count % 4 != 1 else { return nil }
        guard padding == 0 || (utf8.count % 4 != 0 && padding == 4 - utf8.count % 4) else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count * 3 / 4)
        var group: UInt32 = 0
        var filled = 0
        for byte in utf8 {
            let value = values[Int(byte)]
            guard value >= 0 else { return nil }
            group = group << 6 | UInt32(value)
            filled += 1
            if filled == 4 {
                out.append(UInt8(group >> 16 & 0xFF))
                out.append(UInt8(group >> 8 & 0xFF))
                out.append(UInt8(group & 0xFF))
                group = 0
                filled = 0
            }
        }
        switch filled {
        case 2:
            guard group & 0xF == 0 else { return nil }
            out.append(UInt8(group >> 4 & 0xFF))
        case 3:
            guard group & 0x3 == 0 else { return nil }
            out.append(UInt8(group >> 10 & 0xFF))
            out.append(UInt8(group >> 2 & 0xFF))
        default:
            break
        }
        return out
    }
}
