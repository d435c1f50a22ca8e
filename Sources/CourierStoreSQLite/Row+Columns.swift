internal import Foundation
internal import GRDB

extension Row {
    /// A column's integer, or nil for NULL. Asking GRDB for an `Int64?` decodes through the generic `Optional`
    /// conformance, which looks its type up in the Swift runtime's metadata cache at every call: reading a page of a
    /// user's log back spent a tenth of the server's time there. An `Int64` is read straight from the statement.
    @inline(__always)
    func optionalInt64(_ index: Int) -> Int64? {
        self.hasNull(atIndex: index) ? nil : (self[index] as Int64)
    }

    /// A column's bytes (a blob's, or a text's), copied once, straight from SQLite's buffer (empty for NULL: the
    /// columns read this way are `NOT NULL`, or read only where they are not).
    @inline(__always)
    func bytes(_ index: Int) -> [UInt8] {
        (try? self.withUnsafeData(atIndex: index) { data in data.map { [UInt8]($0) } ?? [] }) ?? []
    }

    /// A column's text, or nil for NULL (as ``optionalInt64(_:)``).
    @inline(__always)
    func optionalString(_ index: Int) -> String? {
        self.hasNull(atIndex: index) ? nil : (self[index] as String)
    }
}
