import CourierTesting
import Foundation
import NIOCore
import NIOPosix
import Testing

@testable import courier

extension CommandLineTests {
    @Test(
        "serve --print-config: the effective configuration, secrets hidden, without a port or the store; it reads back"
    )
    func printConfig() async throws {
        try await withTemporaryDirectory(prefix: "courier-config") { folder in
            // A port something already listens on: a serve that tried to bind it would fail.
            let taken = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .bind(host: "127.0.0.1", port: 0).get()
            let port = try #require(taken.localAddress?.port)
            let data = folder.appendingPathComponent("数据 📁 \"q\"")
            let (status, output) = try await CourierExecutable.run(
                [
                    "serve", "--print-config", "--data", data.path, "--port", String(port), "--limit",
                    "max-text-bytes=1K", "--limit", "idle-timeout=90s", "--limit", "health-probe-timeout=1500ms",
                    "--allow-origin", "https://chat.example",
                ],
                environment: ["COURIER_DATABASE": "postgres://courier:s3cr%C3%A9t@127.0.0.1:5/chat"]
            )
            try await taken.close()
            #expect(status == 0, "\(output)")
            #expect(!FileManager.default.fileExists(atPath: data.path), "the data folder is not made")
            #expect(!output.contains("s3cr"), "the password is hidden: \(output)")
            for line in [
                "port = \(port)", "data = \"\(folder.standardizedFileURL.path)/数据 📁 \\\"q\\\"\"",
                "database = \"postgres://courier@127.0.0.1:5/chat\"", "max-text-bytes = \"1024\"",
                "idle-timeout = \"90s\"", "health-probe-timeout = \"1500ms\"",
                "allow-origin = [\"https://chat.example\"]", "[limits]",
            ] {
                #expect(output.contains("\n" + line + "\n"), "\(line) in \(output)")
            }
            // Every limit once, after [limits].
            let limits = try #require(output.components(separatedBy: "\n[limits]\n").last)
            let named = limits.split(separator: "\n").compactMap { $0.split(separator: " = ").first.map(String.init) }
            #expect(named == LimitOption.all.map(\.name), "\(named)")

            // Given back as --limit, each value is read as the same value: the same configuration again.
            let assignments = limits.split(separator: "\n").flatMap { line -> [String] in
                let parts = line.split(separator: " = ", maxSplits: 1)
                return ["--limit", "\(parts[0])=\(parts[1].dropFirst().dropLast())"]
            }
            let again = try await CourierExecutable.run(
                [
                    "serve", "--print-config", "--data", data.path, "--port", String(port), "--allow-origin",
                    "https://chat.example",
                ] + assignments,
                environment: ["COURIER_DATABASE": "postgres://courier:s3cr%C3%A9t@127.0.0.1:5/chat"]
            )
            #expect(again.status == 0 && again.output == output, "\(again.output)")
        }
    }
}

extension CommandLineTests {
    /// Writes a configuration file into `folder`, with these permissions.
    static func configFile(_ folder: URL, _ text: String, mode: Int = 0o600) throws -> String {
        let path = folder.appendingPathComponent("courier 配置.toml").path
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
        return path
    }

    @Test(
        "serve --config: --print-config's output is a configuration file that gives the same configuration; a flag wins over its variable, which wins over the file"
    )
    func configFileRoundTrip() async throws {
        try await withTemporaryDirectory(prefix: "courier-config") { folder in
            let data = folder.appendingPathComponent("数据 📁 \"q\"")
            let flags = [
                "serve", "--print-config", "--data", data.path, "--port", "7001", "--http-port", "7003",
                "--registration", "invite", "--no-web-socket", "--allow-origin", "https://聊天.example",
                "--allow-origin", "https://chat.example", "--log-level", "debug", "--push-contact",
                "mailto:ops@example.com",
                "--fanout", "poll", "--node", "节点-1", "--forward-host", "10.0.0.2", "--allow-private-targets",
                "--trusted-proxy", "127.0.0.1", "--trusted-proxy", "10.0.0.0/8", "--otlp-endpoint",
                "http://127.0.0.1:4318",
                "--limit", "max-text-bytes=1K", "--limit", "idle-timeout=90s", "--limit", "search-index-deferred=1",
            ]
            let printed = try await CourierExecutable.run(flags)
            #expect(printed.status == 0, "\(printed.output)")
            let path = try Self.configFile(folder, printed.output)
            // Read back with nothing else: the same text.
            let again = try await CourierExecutable.run(["serve", "--print-config", "--config", path])
            #expect(again.status == 0 && again.output == printed.output, "\(again.output)")
            // Through $COURIER_CONFIG too.
            let byVariable = try await CourierExecutable.run(
                ["serve", "--print-config"],
                environment: ["COURIER_CONFIG": path]
            )
            #expect(byVariable.output == printed.output, "\(byVariable.output)")

            // A flag wins over its variable, which wins over the file; a limit given as a flag over the file's.
            let layered = try await CourierExecutable.run(
                [
                    "serve", "--print-config", "--config", path, "--http-port", "7013", "--limit", "idle-timeout=5s",
                ],
                environment: ["COURIER_PORT": "7011", "COURIER_HTTP_PORT": "7012"]
            )
            #expect(layered.status == 0, "\(layered.output)")
            for line in ["port = 7011", "http-port = 7013", "idle-timeout = \"5s\"", "max-text-bytes = \"1024\""] {
                #expect(layered.output.contains("\n" + line + "\n"), "\(line) in \(layered.output)")
            }
            #expect(!FileManager.default.fileExists(atPath: data.path), "the data folder is not made")

            // A number, a boolean and a float read as --limit reads them.
            let typed = try Self.configFile(
                folder,
                "[limits]\nmax-text-bytes = 2048\nsearch-index-deferred = false\nsends-per-second = 2.5\n"
            )
            let read = try await CourierExecutable.run(["serve", "--print-config", "--config", typed])
            for line in ["max-text-bytes = \"2048\"", "search-index-deferred = \"0\"", "sends-per-second = \"2.5\""] {
                #expect(read.output.contains("\n" + line + "\n"), "\(line) in \(read.output)")
            }
        }
    }

    @Test(
        "serve --config: a mistyped key or limit, a value of the wrong type, a bad limit value and bad TOML are errors that name them; nothing is made"
    )
    func configFileErrors() async throws {
        try await withTemporaryDirectory(prefix: "courier-config") { folder in
            let data = folder.appendingPathComponent("data")
            let cases: [(text: String, says: String)] = [
                ("hots = \"0.0.0.0\"\n", "unknown key \"hots\" (did you mean \"host\"?)"),
                (
                    "[limits]\nmax-text-byte = 10\n",
                    "unknown limit \"max-text-byte\" in [limits] (did you mean \"max-text-bytes\"?)"
                ),
                ("\"名前 🔑\" = 1\n", "unknown key \"名前 🔑\""),
                ("port = \"6970\"\n", "port must be a port number"),
                ("port = 70000\n", "port must be a port number"),
                ("web-socket = \"no\"\n", "web-socket must be true or false"),
                ("allow-origin = \"https://a.example\"\n", "allow-origin must be an array of strings"),
                ("limits = 3\n", "limits must be a table"),
                ("[limits]\nidle-timeout = \"soon\"\n", "[limits] idle-timeout=soon:"),
                ("host = \"unterminated\n", "line 1, column"),
                ("trusted-proxy = [\"10.0.0.0/33\"]\n", "trusted-proxy: 10.0.0.0/33: the prefix length"),
                ("otlp-endpoint = \"collector:4318\"\n", "otlp-endpoint: \"collector:4318\" is not an http"),
                (
                    "otlp-endpoint = \"https://courier:s3cret@采集.example:4318/?a=1\"\n",
                    "otlp-endpoint: \"https://courier:hidden@",
                ),
                // Not even a URL Foundation reads (an unclosed bracket): the password is still hidden.
                ("otlp-endpoint = \"http://courier:s3cret@[::1:4318\"\n", "\"http://courier:hidden@[::1:4318\""),
                ("registration = \"everyone\"\n", "registration: \"everyone\" is not one of closed, invite, open"),
                ("allow-origin = [\"chat.example\"]\n", "allow-origin: chat.example is not scheme://host"),
            ]
            for (text, says) in cases {
                let path = try Self.configFile(folder, text)
                let result = try await CourierExecutable.run(["serve", "--config", path, "--data", data.path])
                #expect(result.status != 0, "\(text)")
                #expect(result.output.contains(says), "\(says) in \(result.output)")
                #expect(result.output.contains(path), "the file is named: \(result.output)")
                #expect(!result.output.contains("s3cret"), "a password is never shown: \(result.output)")
                // The admin commands check the whole file too.
                let admin = try await CourierExecutable.run(["user", "list", "--config", path, "--data", data.path])
                #expect(admin.status != 0 && admin.output.contains(says), "\(admin.output)")
            }
            #expect(!FileManager.default.fileExists(atPath: data.path), "nothing is made")
            let missing = try await CourierExecutable.run(
                ["serve", "--print-config", "--config", folder.appendingPathComponent("none.toml").path]
            )
            #expect(missing.status != 0 && missing.output.contains("cannot read the configuration file"))
        }
    }

    @Test(
        "a configuration file with the database's password is refused while any user can read it; private, it is read, and --print-config hides the password"
    )
    func configFileSecret() async throws {
        try await withTemporaryDirectory(prefix: "courier-config") { folder in
            let text = "database = \"postgres://courier:s3cr%C3%A9t@127.0.0.1:5/chat\"\n"
            let open = try Self.configFile(folder, text, mode: 0o644)
            let refused = try await CourierExecutable.run(["serve", "--print-config", "--config", open])
            #expect(refused.status != 0 && refused.output.contains("chmod o-r"), "\(refused.output)")
            #expect(!refused.output.contains("s3cr"))
            let closed = try Self.configFile(folder, text, mode: 0o640)
            let read = try await CourierExecutable.run(
                ["serve", "--print-config", "--config", closed],
                environment: ["COURIER_DATABASE": ""]
            )
            #expect(read.status == 0, "\(read.output)")
            #expect(read.output.contains("\ndatabase = \"postgres://courier@127.0.0.1:5/chat\"\n"), "\(read.output)")
            #expect(!read.output.contains("s3cr"))
            // Without a password, any mode will do.
            let plain = try Self.configFile(folder, "database = \"postgres://courier@127.0.0.1:5/chat\"\n", mode: 0o644)
            #expect(try await CourierExecutable.run(["serve", "--print-config", "--config", plain]).status == 0)
        }
    }

    @Test("serve --config starts on the file's ports and data folder; an admin command finds the data through it")
    func configFileServes() async throws {
        try await withTemporaryDirectory(prefix: "courier-config") { folder in
            let data = folder.appendingPathComponent("数据")
            let (native, compat, http) = (
                try await FreePort.pick(), try await FreePort.pick(), try await FreePort.pick()
            )
            let path = try Self.configFile(
                folder,
                """
                # Courier on this machine
                host = "127.0.0.1"
                port = \(native)
                compat-port = \(compat)
                http-port = \(http)
                data = "\(data.path)"
                registration = "open"

                [limits]
                max-text-bytes = "2K"
                """
            )
            let added = try await CourierExecutable.run([
                "user", "add", "wang", "--password", "pw-王小明-1234", "--config", path,
            ])
            #expect(added.status == 0, "\(added.output)")
            #expect(FileManager.default.fileExists(atPath: data.appendingPathComponent("courier.sqlite").path))
            let server = try await ServerProcess.start(
                executable: CourierExecutable.url,
                arguments: ["serve", "--config", path],
                readyPort: native,
                log: folder.appendingPathComponent("server.log")
            )
            let (client, _) = try await NativeTestClient.login(port: native, "wang", password: "pw-王小明-1234")
            // The file's limit holds: 2 KiB of text is taken, a byte more is not.
            let fits = try await client.sendText(String(repeating: "x", count: 2048), to: .user("wang"), id: "a")
            #expect(fits.error.code.isEmpty, "\(fits)")
            let over = try await client.sendText(String(repeating: "x", count: 2049), to: .user("wang"), id: "b")
            #expect(over.error.code == "text-too-large", "\(over)")
            await client.close()
            let health = try await ExternalProgram.curl(["--silent", "http://127.0.0.1:\(http)/health"])
            #expect(health.contains("\"status\":\"ok\""), "\(health)")
            #expect(await server.terminate() == 0)
        }
    }
}
