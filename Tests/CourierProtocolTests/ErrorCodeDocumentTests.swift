import CourierProtocol
import Foundation
import Testing

@Suite("docs/PROTOCOL.md session error codes")
struct ErrorCodeDocumentTests {
    @Test("the session error-code table lists exactly ErrorCodes.all, in order, with the same meanings")
    func table() throws {
        let url = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("docs/PROTOCOL.md")
        let document = try String(contentsOf: url, encoding: .utf8)
        let heading = try #require(document.range(of: "### Session error codes"))
        let rows = document[heading.upperBound...].split(separator: "\n")
            .drop { !$0.hasPrefix("| `") }
            .prefix { $0.hasPrefix("| `") }
            .map { line in line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) } }
        let documented = rows.map { "\($0[0]) \($0[1]) \($0[2])" }
        let expected = ErrorCodes.all.map { "`\($0.code)` \($0.closes ? "yes" : "no") \($0.meaning)" }
        #expect(documented == expected)
        #expect(Set(ErrorCodes.all.map(\.code)).count == ErrorCodes.all.count, "a code listed twice")
    }
}
