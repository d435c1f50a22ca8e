import CourierTesting
import Foundation
import Testing

@testable import courier

/// The `courier` command: `send --reply-to`, `edit`, `react`, and what `history --json` says of them.
extension CommandLineTests {
    @Test("send --reply-to, edit and react by id; history --json carries edited_at, reply_to and reactions")
    func editsAndReactions() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let cli = try await CLIFixture(folder: folder, users: ["alice", "bob"])
            let server = try await cli.serve([])
            defer { server.stop() }
            func client(_ arguments: String...) async throws -> (status: Int32, output: String) {
                let user = arguments[arguments.firstIndex(of: "--as")! + 1]
                return try await cli.run(arguments, environment: ["COURIER_PASSWORD": "pw-" + user])
            }
            func json(_ output: String) throws -> [[String: Any]] {
                try output.split(separator: "\n").filter { $0.hasPrefix("{") }.map {
                    try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any], "\($0)")
                }
            }
            var result = try await client("send", "--as", "alice", "--to", "bob", "--id", "q1", "明天几点开会?")
            #expect(result.status == 0, "\(result)")
            result = try await client(
                "send",
                "--as",
                "bob",
                "--to",
                "alice",
                "--id",
                "a1",
                "--reply-to",
                "q1",
                "十点 🕙"
            )
            #expect(result.status == 0 && result.output.hasPrefix("sent to @alice: seq 2"), "\(result)")
            result = try await client("edit", "--as", "alice", "q1", "明天上午几点开会?")
            #expect(result.status == 0 && result.output == "edited q1\n", "\(result)")
            // Only the sender edits: bob's id "q1" names no message of his.
            result = try await client("edit", "--as", "bob", "q1", "hijack")
            #expect(result.status != 0 && result.output.contains("unknown-message"), "\(result)")
            result = try await client("react", "--as", "bob", "q1", "👍")
            #expect(result.status == 0, "\(result)")
            result = try await client("react", "--as", "alice", "q1", "好")
            #expect(result.status == 0, "\(result)")
            result = try await client("react", "--as", "alice", "a1", "❤")
            #expect(result.status == 0, "\(result)")
            result = try await client("react", "--as", "alice", "a1", "two words")
            #expect(result.status != 0 && result.output.contains("invalid-reaction"), "\(result)")
            result = try await client("react", "--as", "bob", "q1", "👍", "--off")
            #expect(result.status == 0, "\(result)")

            result = try await client("history", "--as", "bob", "--with", "alice", "--json")
            let lines = try json(result.output)
            #expect(lines.count == 2, "\(result)")
            #expect(lines[0]["text"] as? String == "明天上午几点开会?")
            #expect((lines[0]["edited_at"] as? String)?.hasSuffix("Z") == true)
            #expect(lines[0]["reactions"] as? [String: Int] == ["好": 1])
            #expect(lines[1]["edited_at"] == nil)
            let reply = try #require(lines[1]["reply_to"] as? [String: Any], "\(lines[1])")
            #expect(reply["seq"] as? Int == 1 && reply["id"] as? String == "q1" && reply["from"] as? String == "alice")
            #expect(lines[1]["reactions"] as? [String: Int] == ["❤️": 1])
            result = try await client("history", "--as", "bob", "--with", "alice")
            #expect(result.output.contains("alice: 明天上午几点开会? (edited)  好 1\n"), "\(result)")
            #expect(result.output.contains("you: (re #1) 十点 🕙  ❤️ 1\n"), "\(result)")
        }
    }
}
