import Foundation
import Testing

@Suite("Platform neutrality")
struct PlatformNeutralityTests {
    /// The modules a client app links must build on every platform Swift runs on: Foundation and NIO, no Glibc.
    @Test("no module but the server and the CLI imports Glibc (or Musl, or Darwin) directly")
    func noGlibcOutsideTheServer() throws {
        let root = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        var checked = 0
        for module in ["CourierWire", "CourierProtocol", "CourierClient"] {
            let folder = root.appendingPathComponent("Sources/\(module)")
            let files = try #require(FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil))
            for case let file as URL in files where file.pathExtension == "swift" {
                checked += 1
                let text = try String(contentsOf: file, encoding: .utf8)
                for line in text.split(separator: "\n") {
                    let words = line.split(separator: " ")
                    guard let index = words.firstIndex(of: "import"), index + 1 < words.count else { continue }
                    #expect(
                        !["Glibc", "Musl", "Darwin"].contains(String(words[index + 1])),
                        "\(file.lastPathComponent): \(line)"
                    )
                }
            }
        }
        #expect(checked > 10)
    }
}
