#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// glibc's wcwidth(3), which Swift's Glibc module does not export.
@_silgen_name("wcwidth") private func cWidth(_ character: Int32) -> Int32

/// The C library's idea of how many columns text takes on a terminal: the oracle the chat's own widths are checked
/// against.
public enum CLibraryWidth {
    /// Display width by wcwidth(3) in a UTF-8 locale, the table terminals use, summed over the scalars (a
    /// character wcwidth calls unprintable counts 0).
    public static func of(_ text: some StringProtocol) -> Int {
        _ = setlocale(LC_CTYPE, "C.UTF-8")
        return text.unicodeScalars.reduce(0) { $0 + max(0, Int(cWidth(Int32(bitPattern: $1.value)))) }
    }
}
