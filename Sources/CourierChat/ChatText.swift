public import CourierClient
import Foundation

/// How the chat (and the commands beside it) put things into words for a terminal.
public enum ChatText {
    /// A media message as its line shows it: kind, name and size, as `[image photo.jpg, 2.4 MB]`.
    public static func describe(_ media: MediaInfo) -> String {
        let name = media.name.isEmpty ? media.sha256.prefix(12) + "…" : media.name
        return "[\(media.kind.rawValue) \(Self.printable(name)), \(Self.size(media.size))]"
    }

    /// A byte count for people: `512 B`, `2.4 MB`, `1.1 GB` (decimal units).
    public static func size(_ bytes: Int64) -> String {
        if bytes < 1000 { return "\(bytes) B" }
        let units = ["kB", "MB", "GB", "TB"]
        var value = Double(bytes) / 1000
        var unit = 0
        while value >= 999.5, unit < units.count - 1 {
            value /= 1000
            unit += 1
        }
        return String(format: value < 10 ? "%.1f %@" : "%.0f %@", value, units[unit])
    }

    /// Text made safe to print: control characters (which could move the cursor or change the terminal) shown in
    /// caret notation, `^[` for ESC; tabs as spaces.
    public static func printable(_ text: String) -> String {
        var result = ""
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x09: result += "    "
            case 0x0A: result.unicodeScalars.append(scalar)
            case 0x00..<0x20: result += "^" + String(Unicode.Scalar(UInt8(scalar.value + 0x40)))
            case 0x7F: result += "^?"
            case 0x80..<0xA0: result += "^?"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}
