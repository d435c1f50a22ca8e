import CourierPostgresTesting
import CourierProtocol
import CourierStorePostgres
import CourierTesting
import Foundation
import NIOSSL
import PostgresNIO
import Testing

@testable import courier

/// The `courier` executable as a user runs it: the admin commands' output and errors, `serve`'s flags, backups,
/// and crash reports.
@Suite("The courier command", .serialized)
struct CommandLineTests {
    /// Runs `courier` and returns its status and output (stdout and stderr together).
    static func courier(_ arguments: String...) async throws -> (status: Int32, output: String) {
        try await CourierExecutable.run(arguments)
    }

    /// The `--limit` names of docs/PROTOCOL.md's "Limits" table (its second column).
    static func documentedLimits() throws -> [String] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/PROTOCOL.md"), encoding: .utf8)
        let table = try #require(text.range(of: "| field | `--limit` | default | past it |"))
        var names: [String] = []
        for line in text[table.upperBound...].split(separator: "\n").dropFirst() {
            guard line.hasPrefix("|") else { break }
            let column = line.split(separator: "|", omittingEmptySubsequences: false)[2]
            names += column.matches(of: /`([a-z-]+)`/).map { String($0.1) }
        }
        return names
    }

    /// Starts `courier serve` on `data` with free ports and its log in `folder`.
    static func serve(
        _ folder: URL,
        data: URL,
        _ arguments: [String] = []
    ) async throws -> (server: ServerProcess, native: Int, http: Int) {
        try await ServerProcess.start(data: data, logFolder: folder, arguments: arguments)
    }

    @Test("user and group commands print what they did and refuse bad input with a one-line error")
    func adminCommands() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let data = folder.appendingPathComponent("data").path
            var result = try await Self.courier("user", "add", "alice", "--password", "pw-alice", "--data", data)
            #expect(result.status == 0 && result.output == "created user alice\n", "\(result)")
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
            #expect(result.output == "group team\nowner alice\nmembers alice,bob\nmessages 0\n", "\(result)")
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

    @Test("serve: TLS from --tls-cert/--tls-key, --limit by name, and clear errors for bad flags")
    func serveFlags() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let data = folder.appendingPathComponent("data")
            let certificate = try await TestCertificate.make(in: folder)
            let other = try await TestCertificate.make(in: folder, name: "other")
            var result = try await Self.courier("serve", "--data", data.path, "--tls-cert", certificate.certificateFile)
            #expect(result.status != 0 && result.output.contains("--tls-cert and --tls-key go together"), "\(result)")
            let missing = folder.appendingPathComponent("missing.pem").path
            result = try await Self.courier(
                "serve",
                "--data",
                data.path,
                "--tls-cert",
                missing,
                "--tls-key",
                certificate.keyFile
            )
            #expect(result.status != 0 && result.output.contains("cannot use \(missing)"), "\(result)")
            result = try await Self.courier(
                "serve",
                "--data",
                data.path,
                "--port",
                "0",
                "--compat-port",
                "0",
                "--http-port",
                "0",
                "--tls-cert",
                certificate.certificateFile,
                "--tls-key",
                other.keyFile
            )
            #expect(result.status != 0 && result.output.contains("Error:"), "a key of another certificate: \(result)")
            result = try await Self.courier("serve", "--data", data.path, "--limit", "max-nothing=1")
            #expect(
                result.status != 0 && result.output.contains("--limit max-nothing=1: expected NAME=VALUE"),
                "\(result)"
            )
            result = try await Self.courier("serve", "--data", data.path, "--limit", "max-text-bytes=lots")
            #expect(result.status != 0 && result.output.contains("lots is not a size like"), "\(result)")
            result = try await Self.courier("serve", "--data", data.path, "--limit", "media-quota-bytes=9999999999T")
            #expect(result.status != 0 && result.output.contains("is not a size like"), "\(result)")
            result = try await Self.courier("serve", "--data", data.path, "--limit", "idle-timeout=5 minutes")
            #expect(result.status != 0 && result.output.contains("is not a duration"), "\(result)")
            result = try await Self.courier("serve", "--data", data.path, "--limit", "idle-timeout=106751991167301d")
            #expect(result.status != 0 && result.output.contains("too long a duration"), "\(result)")
            // Nothing that would switch a limit off or break the protocol: zero, seconds cut to nothing, a chunk
            // larger than a frame.
            for (limit, said) in [
                ("login-window=0s", "is not longer than zero"),
                ("token-lifetime=500ms", "not a whole number of seconds"),
                ("max-chunk-bytes=2M", "must be at most 1048576"), ("max-answer-bytes=1M", "must be at most"),
                ("max-handed-events=-1", "is not 0 or more"),
            ] {
                result = try await Self.courier("serve", "--data", data.path, "--limit", limit)
                #expect(result.status != 0 && result.output.contains(said), "\(limit): \(result)")
            }
            // Ports out of range are refused by name, negative ones too (not taken for a flag, not wrapped around).
            for (flag, value) in [("--port", "70000"), ("--http-port", "-1"), ("--compat-port", "65536")] {
                result = try await Self.courier("serve", "--data", data.path, flag, value)
                #expect(
                    result.status != 0 && result.output.contains("\(flag) \(value) is not a port number"),
                    "\(result)"
                )
            }
            // Every limit docs/PROTOCOL.md lists is a --limit name, and every --limit name is listed there.
            #expect(Set(LimitOption.setters.map(\.name)) == Set(try Self.documentedLimits()))
            // No help says a default twice (ours in the text, then ArgumentParser's).
            for command in [["serve"], ["proxy", "serve"], ["send"], ["history"], ["bench"], ["backup"]] {
                let help = try await CourierExecutable.run(command + ["--help"])
                let flat = help.output.split(whereSeparator: \.isWhitespace).joined(separator: " ")
                #expect(flat.firstMatch(of: /\(default: [^)]*\)\.? \(default:/) == nil, "\(command): \(flat)")
            }
            // A port in use is named, with the flag that changes it; a data folder that cannot be one is said so.
            let taken = try await FreePort.hold()
            for (flag, name) in [("--port", "native"), ("--compat-port", "compat"), ("--http-port", "http")] {
                var arguments = ["serve", "--data", data.path, "--port", "0", "--compat-port", "0", "--http-port", "0"]
                arguments[arguments.firstIndex(of: flag)! + 1] = String(taken.port)
                result = try await CourierExecutable.run(arguments)
                #expect(
                    result.status != 0
                        && result.output.contains(
                            "cannot listen on the \(name) port \(taken.port) of 127.0.0.1: the port is in use"
                        ) && result.output.contains("choose another with \(flag)"),
                    "\(result)"
                )
            }
            result = try await CourierExecutable.run(
                ["proxy", "--port", String(taken.port), "--cache-dir", folder.appendingPathComponent("cache").path]
            )
            #expect(result.output.contains("cannot listen on port \(taken.port)") && result.status != 0, "\(result)")
            await taken.close()
            let aFile = folder.appendingPathComponent("a-file")
            try Data().write(to: aFile)
            result = try await Self.courier("serve", "--data", aFile.path)
            #expect(result.status != 0 && result.output.contains("\(aFile.path) is a file, not a folder"), "\(result)")
            result = try await Self.courier("user", "list", "--data", aFile.appendingPathComponent("data").path)
            #expect(result.output.contains("a part of the path is a file, not a folder"), "\(result)")
            #expect(!result.output.contains("NSCocoaErrorDomain"), "\(result)")
            result = try await CourierExecutable.run(["proxy", "--port", "70000"])
            #expect(result.status != 0 && result.output.contains("is not a port number"), "\(result)")
            result = try await CourierExecutable.run(["proxy", "stats", "--proxy", "127.0.0.1:0"])
            #expect(
                result.status != 0 && result.output.contains("--proxy 127.0.0.1:0: expected HOST:PORT"),
                "\(result)"
            )
            // Durations as everywhere (30s, 2m), bare numbers as seconds.
            result = try await CourierExecutable.run(["proxy", "--revalidate-interval", "soon"])
            #expect(result.status != 0 && result.output.contains("--revalidate-interval"), "\(result)")

            try await CourierExecutable.addUsers(["alice", "bob"], data: data)
            let (server, native, http) = try await Self.serve(
                folder,
                data: data,
                [
                    "--tls-cert", certificate.certificateFile, "--tls-key", certificate.keyFile,
                    "--limit", "max-text-bytes=16", "--limit", "max-media-bytes=1K", "--limit", "media-quota-bytes=4K",
                ]
            )
            let (alice, welcome) = try await NativeTestClient.login(
                port: native,
                "alice",
                tls: certificate.trustingClient
            )
            #expect(welcome.limits.maxTextBytes == 16)
            #expect(try await alice.sendText(String(repeating: "a", count: 16), to: .user("bob")).ack != nil)
            let refused = try await alice.sendText(String(repeating: "a", count: 17), to: .user("bob"))
            #expect(refused.failure?.code == ErrorCodes.textTooLarge, "\(refused)")
            // The media limits from --limit: the size (1 KiB) and the quota (4 KiB) the welcome says.
            #expect(welcome.limits.maxMediaBytes == 1024 && welcome.limits.mediaQuotaLeftBytes == 4096)
            let tooLarge = try await alice.upload(SeededRandom.bytes(1025, seededFor: "serveFlags"), stream: 1)
            #expect(tooLarge.error?.code == ErrorCodes.mediaTooLarge, "\(tooLarge)")
            let health = try await ExternalProgram.curl(
                ["--cacert", certificate.certificateFile, "https://127.0.0.1:\(http)/health"]
            )
            #expect(health.contains("\"status\":\"ok\""), "\(health)")
            // A second server on the same data folder does not start beside the first.
            result = try await Self.courier(
                "serve",
                "--data",
                data.path,
                "--port",
                "0",
                "--compat-port",
                "0",
                "--http-port",
                "0"
            )
            #expect(
                result.status != 0 && result.output.contains("is already using the data folder \(data.path)"),
                "\(result)"
            )
            await alice.close()
            #expect(await server.terminate() == 0)
        }
    }

    @Test("login, send and history round trip; a send while the server is away is queued and delivered once after")
    func clientCommands() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let cli = try await CLIFixture(folder: folder, users: ["alice", "bob"])
            let (data, ports) = (cli.data, cli.ports)
            // A page of one message: `history` pages through the server's cap by itself.
            func serve() async throws -> ServerProcess { try await cli.serve(["--limit", "max-history-page=1"]) }
            func client(
                _ arguments: String...,
                environment: [String: String] = [:]
            ) async throws -> (
                status: Int32, output: String
            ) {
                try await cli.run(arguments, environment: environment)
            }
            // JSON lines only (standard error, merged in, may say where older messages are).
            func json(_ output: String) throws -> [[String: Any]] {
                try output.split(separator: "\n").filter { $0.hasPrefix("{") }.map {
                    try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any], "\($0)")
                }
            }
            var server = try await serve()

            // A server never reached from here (a wrong address): the send fails, nothing is queued.
            let nowhere = try await FreePort.pick()
            var result = try await CourierExecutable.run(
                ["send", "--as", "alice", "--to", "bob", "lost?", "--server", "127.0.0.1:\(nowhere)"],
                environment: cli.home.merging(["COURIER_PASSWORD": "pw-alice"]) { $1 }
            )
            #expect(
                result.status != 0 && result.output.contains("has never reached this server from here"),
                "\(result)"
            )

            result = try await client("login", "--as", "alice", "--password", "pw-alice")
            #expect(result.status == 0 && result.output.hasPrefix("logged in as alice"), "\(result)")
            let tokenFile = folder.appendingPathComponent("config/courier/127.0.0.1_\(ports.0)/alice.token")
            let permissions = try FileManager.default.attributesOfItem(atPath: tokenFile.path)[.posixPermissions]
            #expect((permissions as? Int) == 0o600, "the token file is the user's alone")
            result = try await client("send", "--as", "alice", "--to", "bob", "hello bob")
            #expect(result.status == 0 && result.output.hasPrefix("sent to @bob: seq 1, id "), "\(result)")
            // Logging in again renews this machine's device (a new token) rather than adding one.
            let firstToken = try String(contentsOf: tokenFile, encoding: .utf8)
            result = try await client("login", "--as", "alice", "--password", "pw-alice")
            #expect(result.status == 0, "\(result)")
            #expect(try String(contentsOf: tokenFile, encoding: .utf8) != firstToken)
            result = try await Self.courier("user", "devices", "alice", "--data", data.path)
            #expect(result.output.split(separator: "\n").count == 1, "one device: \(result)")
            // bob has no token: no password and no terminal is a clear error; COURIER_PASSWORD works.
            result = try await client("send", "--as", "bob", "--to", "alice", "x")
            #expect(result.status == 1 && result.output.contains("no password for bob"), "\(result)")
            result = try await client(
                "send",
                "--as",
                "bob",
                "--to",
                "alice",
                "你好, alice 👋",
                environment: ["COURIER_PASSWORD": "pw-bob"]
            )
            #expect(result.status == 0 && result.output.hasPrefix("sent to @alice: seq 2"), "\(result)")

            result = try await client("history", "--as", "alice", "--with", "bob", "--json")
            let lines = try json(result.output)
            #expect(lines.map { $0["seq"] as? Int } == [1, 2], "\(result)")
            #expect(lines.map { $0["from"] as? String } == ["alice", "bob"])
            #expect(lines.map { $0["to"] as? String } == ["bob", "alice"])
            #expect(lines.map { $0["text"] as? String } == ["hello bob", "你好, alice 👋"])
            #expect(lines.allSatisfy { $0["kind"] as? String == "text" && $0["group"] == nil })
            #expect(
                lines.allSatisfy { ($0["time"] as? String)?.hasSuffix("Z") == true && ($0["id"] as? String) != nil }
            )
            result = try await client("history", "--as", "bob", "--with", "alice", "--json", "--limit", "1")
            #expect(try json(result.output).map { $0["seq"] as? Int } == [2], "\(result)")
            #expect(result.output.contains("(older: --before 2)"), "the hint, on standard error: \(result)")
            result = try await client("history", "--as", "bob", "--with", "alice", "--json", "--before", "2")
            #expect(try json(result.output).map { $0["seq"] as? Int } == [1], "\(result)")
            result = try await client("history", "--as", "bob", "--with", "alice")
            #expect(result.output.contains("  #1  alice: hello bob\n"), "\(result)")
            // Her own are "you" to alice, as in the chat.
            result = try await client("history", "--as", "alice", "--with", "bob")
            #expect(result.output.contains("  #1  you: hello bob\n"), "\(result)")
            result = try await client("history", "--as", "bob", "--json")
            #expect(result.status != 0 && result.output.contains("name one conversation"), "\(result)")

            // The server goes away: the send is queued in alice's outbox.
            #expect(await server.terminate() == 0)
            result = try await client("send", "--as", "alice", "--to", "bob", "while you were away")
            #expect(result.status == 0 && result.output.hasPrefix("queued "), "\(result)")
            // Back on the same ports: alice's next command sends the outbox first, once.
            server = try await serve()
            result = try await client("history", "--as", "alice", "--with", "bob", "--json")
            #expect(try json(result.output).map { $0["text"] as? String }.last == "while you were away", "\(result)")
            result = try await client("history", "--as", "bob", "--with", "alice", "--json")
            let texts = try json(result.output).compactMap { $0["text"] as? String }
            #expect(texts == ["hello bob", "你好, alice 👋", "while you were away"], "\(result)")

            // A mistyped password at `login` keeps the saved, working token.
            let token = try String(contentsOf: tokenFile, encoding: .utf8)
            result = try await client("login", "--as", "alice", "--password", "not-alice's")
            #expect(result.status != 0 && result.output.contains("login refused for alice"), "\(result)")
            #expect(result.output.contains("the saved token is kept"), "\(result)")
            #expect(try String(contentsOf: tokenFile, encoding: .utf8) == token)
            result = try await client("history", "--as", "alice", "--with", "bob", "--json")
            #expect(result.status == 0 && !result.output.isEmpty, "the kept token still works: \(result)")
            // Wrong again and again: throttled, and told when to try again.
            var throttled: (status: Int32, output: String)?
            for _ in 0..<10 where throttled == nil {
                result = try await client("login", "--as", "alice", "--password", "wrong")
                if result.output.contains("throttled") { throttled = result }
            }
            #expect(throttled?.output.contains("try again in ") == true, "\(String(describing: throttled))")

            // A revoked token: a clear message, and the saved token is gone. Devices are named after the user, the
            // machine and the command that logged in.
            result = try await Self.courier("user", "devices", "alice", "--data", data.path)
            var buffer = [CChar](repeating: 0, count: 256)
            _ = gethostname(&buffer, buffer.count - 1)
            let host = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let machine = host.split(separator: ".").first.map(String.init) ?? host
            #expect(result.output.contains("alice@\(machine) (login)"), "\(result)")
            let device = try #require(result.output.split(separator: "\t").first.map(String.init), "\(result)")
            _ = try await Self.courier("user", "revoke", "alice", device, "--data", data.path)
            result = try await client("history", "--as", "alice", "--with", "bob")
            #expect(result.status == 1 && result.output.contains("courier login --as alice"), "\(result)")
            #expect(!FileManager.default.fileExists(atPath: tokenFile.path))
            // A removed account is said to be gone, not to need a login.
            result = try await client("login", "--as", "bob", "--password", "pw-bob")
            #expect(result.status == 0, "\(result)")
            _ = try await Self.courier("user", "remove", "bob", "--data", data.path)
            result = try await client("history", "--as", "bob", "--with", "alice")
            #expect(result.status == 1 && result.output.contains("the account bob was removed"), "\(result)")
            #expect(!result.output.contains("courier login"), "\(result)")
            #expect(await server.terminate() == 0)
        }
    }

    @Test("history shows others' control characters in caret notation, never raw to the terminal")
    func historyEscapes() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let cli = try await CLIFixture(folder: folder, users: ["alice", "bob"])
            let server = try await cli.serve()
            let hostile = "hi\u{1B}]0;owned\u{07}\u{1B}[2J\u{9B}x"
            var result = try await cli.run(
                ["send", "--as", "bob", "--to", "alice", hostile],
                environment: ["COURIER_PASSWORD": "pw-bob"]
            )
            #expect(result.status == 0, "\(result)")
            result = try await cli.run(
                ["history", "--as", "alice", "--with", "bob"],
                environment: ["COURIER_PASSWORD": "pw-alice"]
            )
            #expect(result.status == 0, "\(result)")
            #expect(result.output.contains("bob: hi^[]0;owned^G^[[2J^?x"), "\(result)")
            #expect(!result.output.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x07 || $0.value == 0x9B })
            #expect(await server.terminate() == 0)
        }
    }

    @Test("send --file uploads with progress lines; history --json names the media; media get writes the same bytes")
    func mediaCommands() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let cli = try await CLIFixture(folder: folder, users: ["alice", "bob", "carol"])
            let server = try await cli.serve()
            func client(_ user: String, _ arguments: String...) async throws -> (status: Int32, output: String) {
                try await cli.run(arguments + ["--as", user], environment: ["COURIER_PASSWORD": "pw-" + user])
            }
            var random = SeededRandom(seed: TestSeed.make(for: "mediaCommands"))
            var bytes: [UInt8] = []
            random.appendBytes(3_000_000, to: &bytes)
            let photo = folder.appendingPathComponent("holiday.png")
            try Data(bytes).write(to: photo)

            var result = try await client("alice", "send", "--to", "bob", "--file", photo.path)
            #expect(result.status == 0, "\(result)")
            #expect(result.output.contains("sending holiday.png: 100% (3000000 of 3000000 bytes)"), "\(result)")
            #expect(result.output.contains("sent [image holiday.png, 3.0 MB] to @bob: seq 1"), "\(result)")
            result = try await client("alice", "send", "--to", "bob", "--file", photo.path, "also text")
            #expect(result.status != 0 && result.output.contains("give a text, or --file PATH"), "\(result)")
            result = try await client(
                "alice",
                "send",
                "--to",
                "bob",
                "--file",
                folder.appendingPathComponent("nope").path
            )
            #expect(result.status == 1 && result.output.contains("cannot read"), "\(result)")

            result = try await client("bob", "history", "--with", "alice", "--json")
            let line = try #require(
                try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any],
                "\(result)"
            )
            #expect(line["kind"] as? String == "image" && line["mime"] as? String == "image/png")
            #expect(line["name"] as? String == "holiday.png" && line["size"] as? Int == bytes.count)
            let sha = try #require(line["sha256"] as? String)

            let copy = folder.appendingPathComponent("copy.png")
            result = try await client("bob", "media", "get", sha, "-o", copy.path)
            #expect(result.status == 0 && result.output.contains("wrote \(copy.path): 3.0 MB"), "\(result)")
            #expect(try Data(contentsOf: copy) == Data(bytes))
            // carol is not in the conversation: the same answer as for media that does not exist.
            result = try await client("carol", "media", "get", sha, "-o", folder.appendingPathComponent("x").path)
            #expect(result.status == 1 && result.output.contains("unknown-media"), "\(result)")
            #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("x").path))
            result = try await client("bob", "media", "get", "abc", "-o", copy.path)
            #expect(result.status != 0 && result.output.contains("64 hex digits"), "\(result)")
            #expect(await server.terminate() == 0)
        }
    }

    @Test("serve takes its addresses and data folder from COURIER_* variables; a flag wins over its variable")
    func serveEnvironment() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let data = folder.appendingPathComponent("from-environment")
            let ports = (try await FreePort.pick(), try await FreePort.pick(), try await FreePort.pick())
            let flagged = try await FreePort.pick()
            try await CourierExecutable.addUsers(["alice"], data: data)
            let server = try await ServerProcess.start(
                arguments: ["serve", "--http-port", String(flagged)],
                environment: [
                    "COURIER_HOST": "127.0.0.1", "COURIER_PORT": String(ports.0),
                    "COURIER_COMPAT_PORT": String(ports.1),
                    "COURIER_HTTP_PORT": String(ports.2), "COURIER_DATA": data.path,
                ],
                readyPort: ports.0,
                log: folder.appendingPathComponent("server.log")
            )
            // The native port and the data folder came from the environment: alice (in that folder) logs in.
            let (alice, welcome) = try await NativeTestClient.login(port: ports.0, "alice")
            #expect(welcome.user == "alice")
            await alice.close()
            let compat = try await CompatTestClient.connect(port: ports.1)
            try await compat.write(try CompatTestClient.packet("auth", ["user": "alice", "password": "pw-alice"]))
            _ = try await compat.expect("welcome")
            await compat.close()
            // --http-port beat COURIER_HTTP_PORT.
            let health = try await ExternalProgram.curl(["http://127.0.0.1:\(flagged)/health"])
            #expect(health.contains("\"status\":\"ok\""), "\(health)")
            let unused = try await ExternalProgram.run(
                "/usr/bin/curl",
                ["--silent", "http://127.0.0.1:\(ports.2)/health"]
            )
            #expect(unused.status != 0, "nothing listens on the variable's port: \(unused)")
            #expect(await server.terminate() == 0)

            let result = try await CourierExecutable.run(["serve"], environment: ["COURIER_PORT": "seventy"])
            #expect(result.status != 0 && result.output.contains("COURIER_PORT=seventy is not a port number"))
        }
    }

    @Test(
        "courier bench: what is sent is acknowledged and delivered, in pairs, groups and open loop; idle reports memory",
        arguments: [
            ["--pattern", "pairs", "--connections", "6", "--messages", "50"],
            ["--pattern", "group", "--group-size", "3", "--connections", "6", "--messages", "20"],
            ["--pattern", "pairs", "--connections", "4", "--messages", "40", "--rate", "400"],
        ]
    )
    func benchCountsAddUp(_ arguments: [String]) async throws {
        let result = try await CourierExecutable.run(["bench", "--json", "--no-ceilings"] + arguments)
        #expect(result.status == 0, "\(result.output)")
        let line = try #require(result.output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(result.output)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        let connections = try #require(report["connections"] as? Int)
        let messages = Int(arguments[arguments.firstIndex(of: "--messages")! + 1])!
        let recipients = arguments.contains("group") ? 2 : 1
        #expect(report["connected"] as? Int == connections)
        #expect(report["sent"] as? Int == connections * messages)
        #expect(report["acknowledged"] as? Int == connections * messages)
        #expect(report["delivered"] as? Int == connections * messages * recipients)
        #expect(report["failures"] as? Int == 0)
        // One latency a message acknowledged, and one a delivery.
        let ack = try #require(report["ack_latency"] as? [String: Double])
        let endToEnd = try #require(report["end_to_end_latency"] as? [String: Double])
        #expect(ack["count"] == Double(connections * messages))
        #expect(endToEnd["count"] == Double(connections * messages * recipients))
        #expect((ack["p50_ms"] ?? 0) > 0 && (ack["p50_ms"] ?? 0) <= (ack["p99_ms"] ?? 0))
        #expect((report["server_cpu_seconds"] as? Double ?? 0) > 0)
        #expect((report["server_peak_rss_bytes"] as? Int ?? 0) > 1_000_000)
        if arguments.contains("--rate") {
            // 160 messages at 400/s take about 0.4 s: open loop keeps the pace rather than rushing.
            #expect((report["seconds"] as? Double ?? 0) >= 0.3, "\(report)")
        }
    }

    @Test(
        "bench --database --nodes 2: pairs split over two nodes on PostgreSQL, every message acknowledged and delivered; the password stays out of the arguments",
        .enabled(if: TestDatabase.isEnabled, Comment(rawValue: TestDatabase.skipReason))
    )
    func benchOnPostgres() async throws {
        try await TestDatabase.with { location in
            var bare = location
            bare.password = nil
            let result = try await CourierExecutable.run(
                [
                    "bench", "--json", "--database", TestDatabase.url(of: bare), "--nodes", "2", "--connections", "6",
                    "--messages", "30",
                ],
                environment: ["PGPASSWORD": location.password ?? ""]
            )
            #expect(result.status == 0, "\(result.output)")
            let line = try #require(result.output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(result.output)")
            let report = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            #expect(report["acknowledged"] as? Int == 180)
            #expect(report["delivered"] as? Int == 180)
            #expect(report["failures"] as? Int == 0)
            // Both nodes' processes counted, the ceiling measured by pgbench in the same database.
            #expect((report["server_cpu_seconds"] as? Double ?? 0) > 0)
            #expect((report["ceiling_insert_messages_per_second"] as? Double ?? 0) > 0)
            if let password = location.password { #expect(!result.output.contains(password)) }
            // The users went into the database the nodes shared.
            var users: Int64 = 0
            try await TestDatabase.admin(location) { connection in
                for try await count in try await connection.query(
                    "SELECT count(*)::bigint FROM users",
                    logger: TestDatabase.logger
                ).decode(Int64.self) {
                    users = count
                }
            }
            #expect(users == 6)
        }
    }

    @Test("bench --pattern media uploads and downloads one file through a fresh server and reports both directions")
    func benchMedia() async throws {
        let result = try await CourierExecutable.run(["bench", "--pattern", "media", "--size", "3000000", "--json"])
        #expect(result.status == 0, "\(result.output)")
        let line = try #require(result.output.split(separator: "\n").last.map(String.init))
        let report = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
        #expect(report["bytes"] as? Int == 3_000_000)
        for key in ["upload_seconds", "download_seconds", "ceiling_write_seconds", "ceiling_sha256_seconds"] {
            #expect((report[key] as? Double ?? 0) > 0, "\(key) in \(line)")
        }
        let before = try #require(report["server_rss_before_bytes"] as? Int)
        let peak = try #require(report["server_rss_peak_bytes"] as? Int)
        #expect(peak >= before && before > 0)
        #expect((report["http_seconds"] as? Double ?? 0) > 0, "curl downloaded the same file")
    }

    @Test("courier bench --storm runs the load again during a login storm; the storm is throttled, nothing is lost")
    func benchStorm() async throws {
        let result = try await CourierExecutable.run([
            "bench", "--json", "--no-ceilings", "--pattern", "pairs", "--connections", "4", "--messages", "20",
            "--rate", "100", "--storm", "30",
        ])
        #expect(result.status == 0, "\(result.output)")
        let line = try #require(result.output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(result.output)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        let storm = try #require(report["storm"] as? [String: Any], "\(report)")
        let attempts = try #require(storm["attempts"] as? Int)
        // The address's limit: 20 failed logins a minute are checked, whatever the storm sends.
        #expect(attempts > 20 && (storm["password_checks"] as? Int ?? 99) <= 20, "\(storm)")
        #expect((storm["throttled"] as? Int ?? 0) > 0)
        #expect(
            storm["acknowledged"] as? Int == 80 && storm["delivered"] as? Int == 80 && storm["failures"] as? Int == 0
        )
    }

    @Test("courier bench --pattern idle holds its connections and reports the server's memory before and after")
    func benchIdle() async throws {
        let result = try await CourierExecutable.run([
            "bench", "--json", "--pattern", "idle", "--connections", "50", "--settle", "500ms",
        ])
        #expect(result.status == 0, "\(result.output)")
        let line = try #require(result.output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(result.output)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(report["connected"] as? Int == 50)
        #expect(report["sent"] as? Int == 0)
        let before = try #require(report["server_rss_before_bytes"] as? Int)
        let after = try #require(report["server_rss_after_bytes"] as? Int)
        #expect(before > 0 && after > before, "\(report)")
    }

    @Test("courier bench --server loads a server started apart, adding its users to that server's data folder")
    func benchAgainstARunningServer() async throws {
        try await withTemporaryDirectory(prefix: "courier-bench") { folder in
            let data = folder.appendingPathComponent("data")
            let (server, native, _) = try await Self.serve(folder, data: data)
            for _ in 0..<2 {
                // Twice on the same folder: each run's users are its own.
                let result = try await CourierExecutable.run([
                    "bench", "--json", "--no-ceilings", "--connections", "4", "--messages", "10", "--server",
                    "127.0.0.1:\(native)", "--data", data.path, "--server-pid",
                    String(server.process.processIdentifier),
                ])
                #expect(result.status == 0, "\(result.output)")
                let line = try #require(result.output.split(separator: "\n").last { $0.hasPrefix("{") })
                let report = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                #expect(report["acknowledged"] as? Int == 40 && report["delivered"] as? Int == 40, "\(report)")
                #expect((report["server_cpu_seconds"] as? Double ?? 0) > 0)
            }
            #expect(await server.terminate() == 0)
            let mismatched = try await Self.courier("bench", "--data", data.path)
            #expect(mismatched.status != 0 && mismatched.output.contains("go with --server"), "\(mismatched)")
            let missing = try await Self.courier("bench", "--server", "127.0.0.1:\(native)")
            #expect(missing.status != 0 && missing.output.contains("needs --data"), "\(missing)")
        }
    }

    @Test("a crash leaves a backtrace in <data>/crashes/")
    func crashReport() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let data = folder.appendingPathComponent("data")
            let crashes = data.appendingPathComponent("crashes")
            let (server, _, _) = try await Self.serve(folder, data: data)
            #expect(try FileManager.default.contentsOfDirectory(atPath: crashes.path).isEmpty)
            // The Swift runtime's backtracer catches the SIGSEGV and writes the report (symbolicated: seconds in a
            // debug build), ending with "Backtrace took".
            kill(server.process.processIdentifier, SIGSEGV)
            let deadline = ContinuousClock.now + .seconds(120)
            var report = ""
            while !report.contains("Backtrace took"), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(200))
                let files = try FileManager.default.contentsOfDirectory(atPath: crashes.path)
                #expect(files.count <= 1 && files.allSatisfy { $0.hasPrefix("courier-") }, "\(files)")
                if let file = files.first {
                    report = (try? String(contentsOf: crashes.appendingPathComponent(file), encoding: .utf8)) ?? ""
                }
            }
            #expect(report.hasPrefix("*** Program crashed:") && report.contains("Thread 0"), "\(report.prefix(2000))")
            #expect(report.contains("Backtrace took"), "the report is incomplete after two minutes")
            // A signal sent with kill(2) does not fault again when the handler returns, so the process may carry on
            // (a real fault would end it): stop it.
            await server.kill()
        }
    }
}

/// A data folder with users, a `courier serve` for it on fixed free ports (so it can be stopped and started again),
/// and the client commands run against it with their own home folders.
struct CLIFixture {
    let folder: URL
    let data: URL
    let ports: (native: Int, compat: Int, http: Int)
    let home: [String: String]

    init(folder: URL, users: [String]) async throws {
        self.folder = folder
        self.data = folder.appendingPathComponent("data")
        try await CourierExecutable.addUsers(users, data: self.data)
        self.ports = (try await FreePort.pick(), try await FreePort.pick(), try await FreePort.pick())
        self.home = [
            "HOME": folder.path,
            "XDG_CONFIG_HOME": folder.appendingPathComponent("config").path,
            "XDG_DATA_HOME": folder.appendingPathComponent("share").path,
        ]
    }

    func serve(_ arguments: [String] = []) async throws -> ServerProcess {
        try await ServerProcess.start(
            data: self.data,
            native: self.ports.native,
            compat: self.ports.compat,
            http: self.ports.http,
            log: self.folder.appendingPathComponent("server.log"),
            arguments: arguments
        )
    }

    /// Runs `courier` with `--server` set to this server's native port.
    func run(
        _ arguments: [String],
        environment: [String: String] = [:]
    ) async throws -> (
        status: Int32, output: String
    ) {
        try await CourierExecutable.run(
            arguments + ["--server", "127.0.0.1:\(self.ports.native)"],
            environment: self.home.merging(environment) { $1 }
        )
    }
}
