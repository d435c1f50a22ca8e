import CourierTesting
import Foundation
import Testing

/// The `courier` command: a group's title, mentions in `unread`, and `mute`.
extension CommandLineTests {
    @Test("group title (Chinese and Arabic) shows in group show and unread; @mentions count in unread; mute is kept")
    func quietCommands() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let cli = try await CLIFixture(folder: folder, users: ["alice", "bob", "carol"])
            let server = try await cli.serve()
            defer { server.stop() }
            let data = cli.data.path
            let asAlice = ["COURIER_PASSWORD": "pw-alice"]
            let asBob = ["COURIER_PASSWORD": "pw-bob"]
            var result = try await Self.courier(
                "group",
                "create",
                "team",
                "--owner",
                "alice",
                "--members",
                "bob,carol",
                "--data",
                data
            )
            #expect(result.status == 0, "\(result)")
            // The administrator titles it while the server runs; the title may not mislead.
            result = try await Self.courier("group", "title", "team", "读书会 · نادي", "--data", data)
            #expect(result.status == 0 && result.output == "titled team\n", "\(result)")
            result = try await Self.courier("group", "title", "team", "\u{202E}evil", "--data", data)
            #expect(result.status == 1 && result.output.contains("invalid-request"), "\(result)")
            result = try await Self.courier("group", "show", "team", "--data", data)
            #expect(result.output.hasPrefix("group team\ntitle 读书会 · نادي\nowner alice\n"), "\(result)")

            result = try await cli.run(
                ["send", "--as", "alice", "--group", "team", "@bob 周五读完第三章"],
                environment: asAlice
            )
            #expect(result.status == 0, "\(result)")
            result = try await cli.run(["send", "--as", "alice", "--group", "team", "大家好"], environment: asAlice)
            #expect(result.status == 0, "\(result)")
            result = try await cli.run(["unread", "--as", "bob"], environment: asBob)
            #expect(result.status == 0 && result.output == "#team\t2\t1\tall\t读书会 · نادي\n", "\(result)")

            result = try await cli.run(["mute", "--as", "bob", "--group", "team"], environment: asBob)
            #expect(result.status == 0 && result.output.hasSuffix("#team alerts on mentions\n"), "\(result)")
            result = try await cli.run(["unread", "--as", "bob", "--json"], environment: asBob)
            let line = try #require(result.output.split(separator: "\n").last)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            #expect(object["group"] as? String == "team" && object["notify"] as? String == "mentions", "\(result)")
            #expect(object["mentions"] as? Int == 1 && object["title"] as? String == "读书会 · نادي", "\(result)")
            // Outside one's conversations: refused, with the code.
            result = try await cli.run(["mute", "--as", "bob", "--to", "carol", "--level", "none"], environment: asBob)
            #expect(result.status != 0 && result.output.contains("not-member"), "\(result)")
            result = try await cli.run(
                ["mute", "--as", "bob", "--group", "team", "--level", "loud"],
                environment: asBob
            )
            #expect(result.status != 0, "\(result)")
        }
    }
}
