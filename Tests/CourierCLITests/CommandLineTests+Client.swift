import CourierPostgresTesting
import CourierProtocol
import CourierStorePostgres
import CourierTesting
import Foundation
import NIOSSL
import PostgresNIO
import Testing

@testable import courier

/// The `courier` command: the client commands: `login`, `send`, `history`, `media get`.
extension CommandLineTests {
    @Test("login, send and history round trip; a send while the server is away is queued and delivered once after")
    func clientCommands() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let cli = try await CLIFixture(folder: folder, users: ["alice", "bob"])
            let data = cli.data
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
            // Fixed from the first start on: the server is started again on them below.
            let ports = cli.ports

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
            #expect(result.output.contains("Usage: courier history"), "the command's usage: \(result)")
            // A mistyped flag is named as the unknown option it is, with the command's usage.
            for (arguments, unknown, command) in [
                (["send", "--as", "bob", "--too", "alice", "hi"], "--too", "send"),
                (["history", "--as", "bob", "--wiht", "alice"], "--wiht", "history"),
            ] {
                result = try await CourierExecutable.run(arguments)
                #expect(
                    result.status != 0 && result.output.contains("Unknown option '\(unknown)'")
                        && result.output.contains("Usage: courier \(command)"),
                    "\(result)"
                )
            }
            result = try await CourierExecutable.run([
                "send", "--as", "bob", "--server", "nohost", "--to", "alice", "hi",
            ])
            #expect(
                result.output.contains("--server nohost: expected HOST:PORT")
                    && result.output.contains("Usage: courier send"),
                "\(result)"
            )

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

    @Test(
        "a device token is kept in the token file alone: without it a wrong password is refused, not replaced by a token the store kept"
    )
    func tokenFileIsTheOnePlace() async throws {
        try await withTemporaryDirectory(prefix: "courier-cli") { folder in
            let cli = try await CLIFixture(folder: folder, users: ["alice", "carol"])
            let server = try await cli.serve()
            var result = try await cli.run(["login", "--as", "carol", "--password", "pw-carol"])
            #expect(result.status == 0, "\(result)")
            result = try await cli.run(["send", "--as", "carol", "--to", "alice", "早上好"])
            #expect(result.status == 0, "\(result)")
            let base = "127.0.0.1_\(cli.ports.native)"
            let tokenFile = folder.appendingPathComponent("config/courier/\(base)/carol.token")
            let storeFile = folder.appendingPathComponent("share/courier/\(base)/carol.sqlite")
            let token = try String(contentsOf: tokenFile, encoding: .utf8).trimmingCharacters(
                in: .whitespacesAndNewlines
            )
            // The client's store holds no token: the token's text is nowhere in it (nor in its write-ahead log).
            for file in [storeFile.path, storeFile.path + "-wal"] where FileManager.default.fileExists(atPath: file) {
                let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
                #expect(bytes.range(of: Data(token.utf8)) == nil, "the token is in \(file)")
            }
            // The token file gone, a wrong password is checked, and refused.
            try FileManager.default.removeItem(at: tokenFile)
            result = try await cli.run(["send", "--as", "carol", "--password", "not carol's", "--to", "alice", "hi"])
            #expect(result.status != 0 && result.output.contains("auth-failed"), "\(result)")
            // The right one gets in (and the token file is back).
            result = try await cli.run(["send", "--as", "carol", "--password", "pw-carol", "--to", "alice", "hi"])
            #expect(result.status == 0, "\(result)")
            #expect(FileManager.default.fileExists(atPath: tokenFile.path))
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
            // A text beside --file is its caption, in any script.
            let caption = "假期の海 🏖️ في البحر"
            result = try await client("alice", "send", "--to", "bob", "--file", photo.path, caption, "--id", "pic-2")
            #expect(result.status == 0 && result.output.contains("to @bob: seq 2"), "\(result)")
            result = try await client("alice", "send", "--to", "bob")
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
            let lines = try result.output.split(separator: "\n").map { text in
                try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any], "\(result)")
            }
            try #require(lines.count == 2, "\(result)")
            let line = lines[0]
            #expect((line["text"] as? String ?? "").isEmpty && lines[1]["text"] as? String == caption, "\(result)")
            #expect(lines[1]["sha256"] as? String == line["sha256"] as? String, "the same file, stored once")
            #expect(lines[1]["id"] as? String == "pic-2", "\(result)")
            #expect(line["kind"] as? String == "image" && line["mime"] as? String == "image/png")
            #expect(line["name"] as? String == "holiday.png" && line["size"] as? Int == bytes.count)
            let sha = try #require(line["sha256"] as? String)

            let copy = folder.appendingPathComponent("copy.png")
            result = try await client("bob", "media", "get", sha, "-o", copy.path)
            #expect(result.status == 0 && result.output.contains("wrote \(copy.path): 3.0 MB"), "\(result)")
            #expect(try Data(contentsOf: copy) == Data(bytes))
            let mode = (try FileManager.default.attributesOfItem(atPath: copy.path)[.posixPermissions] as? NSNumber)
            #expect(mode.map { $0.intValue & 0o777 } == 0o600, "the copy is its owner's alone")
            // carol is not in the conversation: the same answer as for media that does not exist.
            result = try await client("carol", "media", "get", sha, "-o", folder.appendingPathComponent("x").path)
            #expect(result.status == 1 && result.output.contains("unknown-media"), "\(result)")
            #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("x").path))
            result = try await client("bob", "media", "get", "abc", "-o", copy.path)
            #expect(result.status != 0 && result.output.contains("64 hex digits"), "\(result)")
            #expect(await server.terminate() == 0)
        }
    }
}
