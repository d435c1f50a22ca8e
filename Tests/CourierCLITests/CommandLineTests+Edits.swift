import CourierTesting
import Foundation
import Testing

@testable import courier

/// The `courier` command: `send --reply-to`, `edit`, `react`, and what `history --json` says of them.
extension CommandLineTests {
    @Test(
        "send --reply-to, edit and react by id; history --json carries edited_at, reply_to and reactions; search finds the edited text"
    )
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

            // Search finds the edited text, not the one it replaced.
            result = try await client("search", "--as", "bob", "上午 开会", "--json")
            var found = try json(result.output)
            #expect(found.count == 1, "\(result)")
            #expect(found.first?["id"] as? String == "q1" && found.first?["from"] as? String == "alice")
            #expect(found.first?["to"] as? String == "bob" && found.first?["text"] as? String == "明天上午几点开会?")
            #expect(found.first?["fragment"] as? String == "明天上午几点开会?")
            #expect(found.first?["marks"] as? [[Int]] == [[2, 2], [6, 2]], "\(found)")
            result = try await client("search", "--as", "bob", "明天几点", "--json")
            #expect(try json(result.output).isEmpty, "\(result)")
            result = try await client("search", "--as", "alice", "十点", "--with", "bob")
            #expect(result.status == 0 && result.output.contains("@bob #2  bob: 十点 🕙\n"), "\(result)")
            result = try await client("search", "--as", "alice", "十点", "--group", "nope")
            #expect(result.status != 0 && result.output.contains("unknown-group"), "\(result)")
            result = try await client("search", "--as", "alice", "开会", "--with", "bob", "--group", "g")
            #expect(result.status != 0 && result.output.contains("name at most one conversation"), "\(result)")
            found = try json(try await client("search", "--as", "alice", "🕙", "--json").output)
            #expect(found.map { $0["id"] as? String } == ["a1"])
        }
    }
}
