import CourierTesting
import Foundation
import Testing

/// The `courier` command: a user's own account: `invite`, `signup`, `password`, `devices`, `find-user` and
/// `delete-account`.
extension CommandLineTests {
    @Test(
        "an invitation signs a user up; the user changes its password from standard input, lists and ends its devices, finds bob, and deletes itself"
    )
    func accountCommands() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let cli = try await CLIFixture(folder: folder, users: ["bob"])
            // Another machine of the same user: a home of its own.
            let elsewhere = [
                "XDG_CONFIG_HOME": folder.appendingPathComponent("config-2").path,
                "XDG_DATA_HOME": folder.appendingPathComponent("share-2").path,
            ]
            var result = try await Self.courier(
                "invite",
                "create",
                "--uses",
                "1",
                "--expires",
                "7d",
                "--data",
                cli.data.path
            )
            #expect(result.status == 0 && result.output.contains("invitation 1: 1 use, until "), "\(result)")
            let token = try #require(
                result.output.split(separator: "\n").first { $0.hasPrefix("ci_") }.map(String.init),
                "\(result)"
            )
            let server = try await cli.serve(["--registration", "invite"])
            defer { server.stop() }

            // Not on a terminal: the password is a line of standard input.
            result = try await cli.run(
                ["signup", "--as", "xiaoming", "--invite", token],
                input: "我的密码很安全啊\n"
            )
            #expect(result.status == 0 && result.output.hasPrefix("signed up as xiaoming"), "\(result)")
            result = try await cli.run(["signup", "--as", "other", "--invite", token], input: "another password\n")
            #expect(
                result.status != 0 && result.output.contains("sign-up refused for other: invite-used-up"),
                "\(result)"
            )
            result = try await cli.run(["signup", "--as", "nobody2"], input: "")
            #expect(result.status != 0 && result.output.contains("standard input ended"), "\(result)")
            // The token saved by the sign-up serves the next commands.
            result = try await cli.run(["send", "--as", "xiaoming", "--to", "bob", "你好，我是新来的"])
            #expect(result.status == 0, "\(result)")
            result = try await cli.run(
                ["login", "--as", "xiaoming"],
                environment: elsewhere.merging(["COURIER_PASSWORD": "我的密码很安全啊"]) { $1 }
            )
            #expect(result.status == 0, "\(result)")
            result = try await cli.run(["devices", "--as", "xiaoming"])
            var lines = result.output.split(separator: "\n")
            #expect(result.status == 0 && lines.count == 2, "\(result)")
            #expect(lines.filter { $0.contains("(this one)") }.count == 1, "\(result)")
            #expect(lines.allSatisfy { $0.contains("\tactive\t") }, "\(result)")

            // The present password, then the new one, a line each.
            result = try await cli.run(["password", "--as", "xiaoming"], input: "wrong guess\n新的密码也要足够长\n")
            #expect(result.status != 0 && result.output.contains("wrong-password"), "\(result)")
            result = try await cli.run(["password", "--as", "xiaoming"], input: "我的密码很安全啊\n短\n")
            #expect(result.status != 0 && result.output.contains("weak-password"), "\(result)")
            result = try await cli.run(["password", "--as", "xiaoming"], input: "我的密码很安全啊\n新的密码也要足够长\n")
            #expect(
                result.status == 0 && result.output.contains("your other devices are logged out"),
                "\(result)"
            )
            result = try await cli.run(["devices", "--as", "xiaoming"])
            lines = result.output.split(separator: "\n")
            #expect(result.status == 0 && lines.count == 1 && lines[0].contains("(this one)"), "\(result)")
            // The other machine was logged out; the old password no longer works there, the new one does.
            result = try await cli.run(
                ["send", "--as", "xiaoming", "--to", "bob", "from the other one"],
                environment: elsewhere.merging(["COURIER_PASSWORD": "我的密码很安全啊"]) { $1 }
            )
            #expect(result.status != 0, "\(result)")
            result = try await cli.run(
                ["login", "--as", "xiaoming"],
                environment: elsewhere.merging(["COURIER_PASSWORD": "新的密码也要足够长"]) { $1 }
            )
            #expect(result.status == 0, "\(result)")
            result = try await cli.run(["devices", "--as", "xiaoming"])
            let other = try #require(
                result.output.split(separator: "\n").first { !$0.contains("(this one)") }?.split(separator: "\t").first,
                "\(result)"
            )
            result = try await cli.run(["devices", "--as", "xiaoming", "--revoke", String(other)])
            #expect(result.status == 0 && result.output.hasPrefix("logged out device \(other)"), "\(result)")
            result = try await cli.run(["devices", "--as", "xiaoming", "--revoke", "999999"])
            #expect(result.status != 0 && result.output.contains("invalid-request"), "\(result)")

            result = try await cli.run(["find-user", "--as", "xiaoming", "BOB"])
            #expect(result.status == 0 && result.output == "bob\n", "\(result)")
            result = try await cli.run(["find-user", "--as", "xiaoming", "bo"])
            #expect(result.status == 1 && result.output.contains("no user named bo"), "\(result)")

            result = try await Self.courier("invite", "list", "--data", cli.data.path)
            #expect(result.output.hasPrefix("1\tused-up\t1/1\tcreated "), "\(result)")
            result = try await Self.courier("invite", "list", "--json", "--data", cli.data.path)
            let invite = try #require(
                try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any],
                "\(result)"
            )
            #expect(invite["state"] as? String == "used-up" && invite["uses"] as? Int == 1, "\(result)")
            result = try await cli.run(["devices", "--as", "xiaoming", "--json"])
            let devices = try result.output.split(separator: "\n").map {
                try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
            }
            #expect(devices.filter { $0["current"] as? Bool == true }.count == 1, "\(result)")
            #expect(devices.allSatisfy { $0["state"] as? String == "active" && $0["id"] is Int }, "\(result)")
            #expect(!result.output.contains(token), "the token is never listed")

            result = try await cli.run(["delete-account", "--as", "xiaoming"], input: "新的密码也要足够长\n")
            #expect(result.status != 0 && result.output.contains("pass --yes"), "\(result)")
            result = try await cli.run(["delete-account", "--as", "xiaoming", "--yes"], input: "新的密码也要足够长\n")
            #expect(result.status == 0 && result.output.hasPrefix("deleted the account xiaoming"), "\(result)")
            result = try await Self.courier("user", "list", "--data", cli.data.path)
            #expect(
                result.output.split(separator: "\n").contains { $0.hasPrefix("xiaoming\t") && $0.contains("removed") },
                "\(result)"
            )
            // Bob still reads what xiaoming wrote, under that name.
            result = try await cli.run(
                ["history", "--as", "bob", "--with", "xiaoming"],
                environment: ["COURIER_PASSWORD": "pw-bob"]
            )
            #expect(result.status == 0 && result.output.contains("你好，我是新来的"), "\(result)")
        }
    }
}
