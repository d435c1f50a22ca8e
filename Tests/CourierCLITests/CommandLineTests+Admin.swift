import CourierPostgresTesting
import CourierProtocol
import CourierStorePostgres
import CourierTesting
import Foundation
import NIOSSL
import PostgresNIO
import Testing

@testable import courier

/// The `courier` command: the admin commands (`user`, `group`, `backup`) and what reaches a running server.
extension CommandLineTests {
    @Test(
        "commands that read or change a data folder refuse one without Courier data and make nothing; user add and serve make one and say so"
    )
    func missingDataFolder() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let missing = folder.appendingPathComponent("no/such/folder").path
            let commands: [[String]] = [
                ["user", "list"], ["user", "devices", "alice"], ["user", "revoke", "alice", "1"],
                ["user", "passwd", "alice", "--password", "a new password"], ["user", "remove", "alice"],
                ["group", "list"], ["group", "show", "team"], ["group", "create", "team", "--owner", "alice"],
                ["group", "add", "team", "bob"], ["group", "remove", "team", "bob"], ["group", "title", "team", "读书会"],
                ["invite", "list"], ["invite", "create"], ["invite", "revoke", "1"],
                ["bot", "list"], ["bot", "create", "helper", "--owner", "alice"], ["bot", "token", "helper"],
                ["bot", "revoke", "helper"], ["hook", "list"], ["hook", "create", "--group", "ops", "--bot", "helper"],
                ["hook", "revoke", "1"],
                ["backup", folder.appendingPathComponent("copy").path],
            ]
            for command in commands {
                let result = try await CourierExecutable.run(command + ["--data", missing])
                #expect(result.status == 1, "\(command): \(result)")
                #expect(result.output.contains("no Courier data in \(missing)"), "\(command): \(result)")
                #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("no").path), "\(command)")
                #expect(
                    !FileManager.default.fileExists(atPath: folder.appendingPathComponent("copy").path),
                    "\(command)"
                )
            }
            // An empty folder that exists is no data folder either, and is left as it was.
            let empty = folder.appendingPathComponent("empty")
            try FileManager.default.createDirectory(at: empty, withIntermediateDirectories: false)
            let listed = try await Self.courier("user", "list", "--data", empty.path)
            #expect(listed.status == 1 && listed.output.contains("no Courier data"), "\(listed)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: empty.path).isEmpty)
            // user add makes one, and says so once.
            let first = try await Self.courier("user", "add", "alice", "--password", "pw-alice", "--data", missing)
            #expect(first.status == 0, "\(first)")
            #expect(first.output.contains("made a new data folder: \(missing)"), "\(first)")
            #expect(first.output.contains("created user alice"), "\(first)")
            let second = try await Self.courier("user", "add", "bob", "--password", "pw-bob", "--data", missing)
            #expect(second.output == "created user bob\n", "\(second)")
            let list = try await Self.courier("user", "list", "--data", missing)
            #expect(list.status == 0 && list.output.contains("alice") && list.output.contains("bob"), "\(list)")
            // serve, on a new folder, says it made it (after the line scripts wait for).
            let served = folder.appendingPathComponent("served")
            let (server, _, _) = try await Self.serve(folder, data: served)
            defer { server.stop() }
            try await waitUntil("the server's notice") {
                let log = (try? String(contentsOf: server.log, encoding: .utf8)) ?? ""
                return log.contains("made a new data folder: \(served.path)")
            }
        }
    }

    @Test("listings: a header and columns aligned by display width on a terminal, tab-separated lines elsewhere")
    func tables() {
        var table = Table(columns: ["conversation", "unread", "title"])
        table.add([.text("#读书会"), .number(12), .text("周末 · نادي")])
        table.add([.text("@bob"), .number(3), .none])
        table.add([.text("@a\u{1B}[2J"), .number(0), .text("x")])
        #expect(
            table.lines(onTerminal: false) == ["#读书会\t12\t周末 · نادي", "@bob\t3\t-", "@a^[[2J\t0\tx"]
        )
        let lines = table.lines(onTerminal: true)
        #expect(lines[0] == "CONVERSATION  UNREAD  TITLE")
        // 读书会 is six columns wide: "#读书会" takes seven, padded to CONVERSATION's twelve.
        #expect(lines[1] == "#读书会       12      周末 · نادي", "\(lines[1])")
        #expect(lines[2] == "@bob          3       -")
        #expect(lines[3].hasPrefix("@a^[[2J"))
    }

    @Test("a mistyped command is named, with the command it likely meant, before its options are blamed")
    func mistypedCommand() async throws {
        var result = try await Self.courier("sedn", "--as", "alice", "--to", "bob", "hi")
        #expect(result.status != 0, "\(result)")
        #expect(result.output.contains("no command 'sedn'; did you mean 'send'?"), "\(result)")
        #expect(!result.output.contains("Unknown option"), "\(result)")
        result = try await Self.courier("histroy", "--as", "alice")
        #expect(result.output.contains("did you mean 'history'?"), "\(result)")
        result = try await Self.courier("frobnicate")
        #expect(result.status != 0 && result.output.contains("no command 'frobnicate'; `courier --help` lists them"))
        result = try await Self.courier("help", "send")
        #expect(result.status == 0 && result.output.contains("USAGE: courier send"), "\(result)")
        result = try await Self.courier("--version")
        #expect(result.status == 0 && result.output.contains("0.1.0"), "\(result)")
    }

    @Test("user and group commands print what they did and refuse bad input with a one-line error")
    func adminCommands() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let data = folder.appendingPathComponent("data").path
            var result = try await Self.courier("user", "add", "alice", "--password", "pw-alice", "--data", data)
            #expect(
                result.status == 0 && result.output == "made a new data folder: \(data)\ncreated user alice\n",
                "\(result)"
            )
            result = try await Self.courier("user", "add", "bob", "--data", data)
            let generated = try #require(result.output.split(separator: " ").last).trimmingCharacters(in: .newlines)
            #expect(result.status == 0 && result.output.hasPrefix("created user bob with password "), "\(result)")
            #expect(generated.count == 20, "\(result)")
            result = try await Self.courier("user", "add", "Alice", "--password", "x", "--data", data)
            #expect(result.status == 1 && result.output.contains("Error: name-taken"), "\(result)")
            result = try await Self.courier("user", "add", "no spaces", "--data", data)
            #expect(result.status == 1 && result.output.contains("Error: invalid-name"), "\(result)")
            result = try await Self.courier("user", "add", "carol", "--password", "pw-carol", "--data", data)
            #expect(result.status == 0)

            result = try await Self.courier("user", "list", "--data", data)
            let listed = result.output.split(separator: "\n").map { $0.split(separator: "\t") }
            #expect(listed.map { String($0[0]) } == ["alice", "bob", "carol"], "\(result)")
            #expect(listed.allSatisfy { $0.count == 2 && $0[1].hasPrefix("created 20") }, "\(result)")

            result = try await Self.courier(
                "group",
                "create",
                "team",
                "--owner",
                "alice",
                "--members",
                "bob, carol",
                "--data",
                data
            )
            #expect(result.status == 0 && result.output == "created group team\n", "\(result)")
            result = try await Self.courier("group", "create", "TEAM", "--owner", "bob", "--data", data)
            #expect(result.status == 1 && result.output.contains("Error: name-taken"), "\(result)")
            result = try await Self.courier("group", "add", "team", "zed", "--data", data)
            #expect(result.status == 1 && result.output.contains("Error: unknown-user"), "\(result)")
            result = try await Self.courier("group", "remove", "team", "carol", "--data", data)
            #expect(result.status == 0 && result.output == "removed carol from team\n", "\(result)")
            result = try await Self.courier("group", "show", "team", "--data", data)
            #expect(
                result.output == "group team\ntitle -\nowner alice\nmembers alice,bob\nadmins -\nmessages 0\n",
                "\(result)"
            )
            result = try await Self.courier("group", "show", "nobody", "--data", data)
            #expect(result.status == 1 && result.output.contains("Error: unknown-group"), "\(result)")
            result = try await Self.courier("group", "list", "--data", data)
            #expect(result.output == "team\n", "\(result)")

            result = try await Self.courier("user", "passwd", "bob", "--password", "pw-bob", "--data", data)
            #expect(result.status == 0 && result.output == "password changed for bob\n", "\(result)")
            result = try await Self.courier("user", "passwd", "zed", "--data", data)
            #expect(result.status == 1 && result.output.contains("Error: unknown-user"), "\(result)")
            result = try await Self.courier("user", "remove", "carol", "--data", data)
            #expect(result.status == 0 && result.output == "removed user carol\n", "\(result)")
            result = try await Self.courier("user", "list", "--data", data)
            #expect(result.output.split(separator: "\n").last?.contains("\tremoved 20") == true, "\(result)")
            result = try await Self.courier("user", "add", "carol", "--password", "x", "--data", data)
            #expect(result.status == 1 && result.output.contains("Error: name-taken"), "removed names stay taken")
        }
    }

    @Test("a device revoked and a user removed with the commands are cut off by the running server")
    func changesReachTheServer() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let data = folder.appendingPathComponent("data")
            try await CourierExecutable.addUsers(["alice", "bob"], data: data)
            let (server, native, _) = try await Self.serve(folder, data: data)
            let (alice, _) = try await NativeTestClient.login(port: native, "alice")
            let (bob, _) = try await NativeTestClient.login(port: native, "bob")

            // Connected now (not "last seen" at some earlier time), once the server wrote it down.
            var result = try await Self.courier("user", "devices", "alice", "--data", data.path)
            try await waitUntil("alice's device shows connected: \(result)") {
                result = try await Self.courier("user", "devices", "alice", "--data", data.path)
                return result.output.contains("\tconnected since 20")
            }
            let columns = result.output.split(separator: "\n").map { $0.split(separator: "\t") }
            #expect(columns.count == 1 && columns.first?[2] == "active", "\(result)")
            #expect(columns.first?.last?.hasPrefix("connected since 20") == true, "\(result)")
            let device = try #require(columns.first.map { String($0[0]) })
            let revokedAt = ContinuousClock.now
            result = try await Self.courier("user", "revoke", "alice", device, "--data", data.path)
            #expect(result.output == "revoked device \(device) of alice\n", "\(result)")
            let aliceLast = try await alice.expectClose()
            print(
                "changesReachTheServer: alice's connection closed \(ContinuousClock.now - revokedAt) after the revoke"
            )
            #expect(aliceLast.last?.failure?.code == ErrorCodes.tokenRevoked, "\(aliceLast)")
            result = try await Self.courier("user", "devices", "alice", "--data", data.path)
            #expect(result.output.split(separator: "\t").dropFirst(2).first == "revoked", "\(result)")
            // Its connection closed: last seen then (the server notes it a moment after the close).
            try await waitUntil("alice's device shows last seen") {
                result = try await Self.courier("user", "devices", "alice", "--data", data.path)
                return result.output.contains("\tlast seen 20")
            }

            _ = try await Self.courier("user", "remove", "bob", "--data", data.path)
            let bobLast = try await bob.expectClose()
            #expect(bobLast.last?.failure?.code == ErrorCodes.tokenRevoked, "\(bobLast)")
            await #expect(throws: (any Error).self) { _ = try await NativeTestClient.login(port: native, "bob") }
            #expect(await server.terminate() == 0)
        }
    }

    @Test("a backup taken while the server writes restores into a server with every message acknowledged before it")
    func backupRestores() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let data = folder.appendingPathComponent("data")
            try await CourierExecutable.addUsers(["alice", "bob"], data: data)
            let (server, native, _) = try await Self.serve(folder, data: data)
            let (alice, _) = try await NativeTestClient.login(port: native, "alice")
            // A stored file before the backup: the copy has it too.
            let file = SeededRandom.bytes(300_000, seededFor: "backupRestores")
            let stored = try #require(try await alice.upload(file, stream: 1).done, "the upload")
            for index in 1...100 { #expect(try await alice.sendText("m\(index)", to: .user("bob")).ack != nil) }
            // More sends go on while the backup runs.
            let more = Task {
                for index in 101...180 { _ = try await alice.sendText("m\(index)", to: .user("bob")) }
            }
            let copy = folder.appendingPathComponent("copy")
            var result = try await Self.courier("backup", "--data", data.path, copy.path)
            #expect(result.status == 0 && result.output.hasPrefix("backed up "), "\(result)")
            // Its mark (no file deleted while it copied) is gone with it, and was not copied.
            #expect(!FileManager.default.fileExists(atPath: data.path + "/media/backup-in-progress"))
            #expect(!FileManager.default.fileExists(atPath: copy.path + "/media/backup-in-progress"))
            try await more.value
            result = try await Self.courier("backup", "--data", data.path, copy.path)
            #expect(result.status == 1 && result.output.contains("does not overwrite"), "\(result)")
            await alice.close()
            #expect(await server.terminate() == 0)

            // The copy is a data folder a server runs on.
            let (restored, restoredNative, _) = try await Self.serve(folder, data: copy)
            let (bob, _) = try await NativeTestClient.login(port: restoredNative, "bob")
            let history = try await bob.request {
                $0.history.conversation.user = "alice"
                $0.history.limit = 200
            }
            guard case .history(let page)? = history.body else {
                Issue.record("\(history)")
                return
            }
            // All 100 acknowledged before the backup, then a gap-free prefix of those sent during it.
            let seqs = page.messages.map(\.seq).reversed()
            #expect(seqs.count >= 100 && Array(seqs) == Array(1...UInt64(seqs.count)), "\(seqs)")
            #expect(page.messages.reversed().map(\.body.text) == (1...seqs.count).map { "m\($0)" })
            print("backupRestores: the copy holds \(seqs.count) of 180 messages")
            #expect(try await bob.sendText("after restore", to: .user("alice")).ack != nil)
            await bob.close()
            let (owner, _) = try await NativeTestClient.login(port: restoredNative, "alice")
            guard case .success(let (_, fetched)) = try await owner.fetch(stored.sha256, stream: 1) else {
                Issue.record("the restored server cannot serve the file")
                return
            }
            #expect(fetched == file)
            await owner.close()
            #expect(await restored.terminate() == 0)
        }
    }
}
