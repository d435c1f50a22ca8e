import CourierTesting
import Foundation
import Testing

/// The `courier` command: `profile`, and the display names `history --json` and `find-user` show.
extension CommandLineTests {
    @Test(
        "a display name in any script and an avatar with an ffmpeg-made thumbnail reach bob: history --json's from_name, find-user, media get"
    )
    func profileCommands() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let cli = try await CLIFixture(folder: folder, users: ["alice", "bob"])
            let server = try await cli.serve()
            defer { server.stop() }
            let asAlice = ["COURIER_PASSWORD": "pw-alice"]
            let asBob = ["COURIER_PASSWORD": "pw-bob"]
            let picture = folder.appendingPathComponent("portrait.png")
            _ = try await ExternalProgram.output(
                "/usr/bin/ffmpeg",
                ["-loglevel", "error", "-f", "lavfi", "-i", "color=c=red:s=640x480", "-frames:v", "1", picture.path]
            )

            var result = try await cli.run(
                ["profile", "--as", "alice", "--display-name", "  王小明 🐉 ", "--avatar", picture.path],
                environment: asAlice
            )
            let fields = result.output.split(separator: "\n").last?.split(separator: "\t").map(String.init) ?? []
            // One's own profile has a fifth column: the push setting, on by default.
            #expect(result.status == 0 && fields.count == 5 && fields.last == "on", "\(result)")
            #expect(fields.prefix(2) == ["alice", "王小明 🐉"], "\(result)")
            let (avatar, thumbnail) = (fields[safe: 2] ?? "", fields[safe: 3] ?? "")
            #expect(avatar.count == 64 && thumbnail.count == 64 && avatar != thumbnail, "\(result)")

            result = try await cli.run(["send", "--as", "alice", "--to", "bob", "我换了头像"], environment: asAlice)
            #expect(result.status == 0, "\(result)")
            result = try await cli.run(["send", "--as", "bob", "--to", "alice", "好看"], environment: asBob)
            #expect(result.status == 0, "\(result)")
            result = try await cli.run(["history", "--as", "bob", "--with", "alice", "--json"], environment: asBob)
            let lines = try result.output.split(separator: "\n").filter { $0.hasPrefix("{") }.map {
                try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
            }
            #expect(lines.map { $0["from"] as? String } == ["alice", "bob"], "\(result)")
            #expect(lines.map { $0["from_name"] as? String } == ["王小明 🐉", nil], "\(result)")

            result = try await cli.run(["find-user", "--as", "bob", "ALICE"], environment: asBob)
            #expect(result.output == "alice\t王小明 🐉\n", "\(result)")
            result = try await cli.run(["profile", "--as", "bob", "--user", "alice"], environment: asBob)
            #expect(result.output.hasSuffix("alice\t王小明 🐉\t\(avatar)\t\(thumbnail)\n"), "\(result)")
            result = try await cli.run(["profile", "--as", "bob", "--user", "alice", "--json"], environment: asBob)
            let profile = try #require(
                try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any],
                "\(result)"
            )
            #expect(profile["display_name"] as? String == "王小明 🐉" && profile["avatar"] as? String == avatar)
            // Another's push setting is not shown.
            #expect(profile["push_previews"] == nil, "\(profile)")

            // bob fetches the thumbnail: a JPEG that ffmpeg made at most 128 pixels across, the shape kept.
            let copy = folder.appendingPathComponent("thumbnail.jpg")
            result = try await cli.run(["media", "get", thumbnail, "-o", copy.path, "--as", "bob"], environment: asBob)
            #expect(result.status == 0, "\(result)")
            let probe = try await ExternalProgram.output(
                "/usr/bin/ffprobe",
                ["-v", "error", "-show_entries", "stream=width,height", "-of", "csv=p=0", copy.path]
            )
            #expect(probe.trimmingCharacters(in: .whitespacesAndNewlines) == "128,96", "\(probe)")

            // What would mislead is refused, and changes nothing.
            result = try await cli.run(
                ["profile", "--as", "alice", "--display-name", "\u{202E}nimda"],
                environment: asAlice
            )
            #expect(result.status != 0 && result.output.contains("invalid-profile"), "\(result)")
            result = try await cli.run(
                ["profile", "--as", "alice", "--display-name", "", "--remove-avatar"],
                environment: asAlice
            )
            #expect(result.status == 0 && result.output.hasSuffix("alice\t-\t-\t-\ton\n"), "\(result)")

            // The push setting: off, seen by its user alone, and changing it is no profile change for bob.
            result = try await cli.run(["profile", "--as", "alice", "--push-previews", "off"], environment: asAlice)
            #expect(result.status == 0 && result.output.hasSuffix("alice\t-\t-\t-\toff\n"), "\(result)")
            result = try await cli.run(["profile", "--as", "alice", "--json"], environment: asAlice)
            #expect(result.output.contains(#""push_previews":false"#), "\(result)")
            result = try await cli.run(["profile", "--as", "bob", "--user", "alice"], environment: asBob)
            #expect(result.output.hasSuffix("alice\t-\t-\t-\n"), "\(result)")
            result = try await cli.run(["profile", "--as", "alice", "--push-previews", "maybe"], environment: asAlice)
            #expect(result.status != 0 && result.output.contains("on"), "\(result)")
            result = try await cli.run(["profile", "--as", "alice", "--push-previews", "on"], environment: asAlice)
            #expect(result.status == 0 && result.output.hasSuffix("\ton\n"), "\(result)")
        }
    }
}

extension Array {
    subscript(safe index: Int) -> Element? { self.indices.contains(index) ? self[index] : nil }
}
