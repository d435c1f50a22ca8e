import CourierPostgresTesting
import CourierProtocol
import CourierServer
import CourierStorePostgres
import CourierTesting
import Foundation
import NIOSSL
import PostgresNIO
import Testing

@testable import courier

/// The `courier` command: `serve`: its flags, its environment, and crash reports.
extension CommandLineTests {
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
            result = try await Self.courier("serve", "--data", data.path, "--limit", "foo=1")
            #expect(
                result.output.contains("expected NAME=VALUE") && result.output.contains("Usage: courier serve"),
                "\(result)"
            )
            for (limit, said) in [
                ("login-window=0s", "is not longer than zero"),
                ("token-lifetime=500ms", "not a whole number of seconds"),
                ("max-chunk-bytes=2M", "must be at most 1048576"), ("max-answer-bytes=1M", "must be at most"),
                ("max-handed-events=-1", "is not 0 or more"),
                // Values past any limit, which the server's arithmetic on them would overflow.
                ("max-connections=9223372036854775807", "at most 1000000000"),
                ("max-unacked-sends=4611686018427387904", "at most 1000000000"),
                ("sends-per-second=1e300", "at most 1000000000"), ("outbound-buffer-bytes=2048T", "at most 1024T"),
                // A bound of its own: threads the server would start.
                ("password-threads=100000", "at most 64"),
                // A page cost PostgreSQL would take, or 0 for its own; nothing negative or absurd.
                ("postgres-random-page-cost=-1", "is not a page cost"),
                ("postgres-random-page-cost=1e9", "is not a page cost"),
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
            // The page cost: 0 is the database's own (none sent), another number is sent as it is.
            var configuration = ServerConfiguration()
            try LimitOption.apply(["postgres-random-page-cost=0"], to: &configuration)
            #expect(configuration.store.postgresRandomPageCost == nil)
            try LimitOption.apply(["postgres-random-page-cost=2.5"], to: &configuration)
            #expect(configuration.store.postgresRandomPageCost == 2.5)
            // Every limit docs/PROTOCOL.md lists is a --limit name, and every --limit name is listed there.
            #expect(Set(LimitOption.all.map(\.name)) == Set(try Self.documentedLimits()))
            // The push contact is a mailto: or https: URL, nothing else.
            for contact in ["javascript:alert(1)", "mailto:", "ops@example.com", "https://ex ample.com"] {
                result = try await CourierExecutable.run(["serve", "--data", data.path, "--push-contact", contact])
                #expect(
                    result.status != 0 && result.output.contains("--push-contact takes a mailto: or https: URL"),
                    "\(contact): \(result)"
                )
            }
            // No help says a default twice (ours in the text, then ArgumentParser's).
            for command in [["serve"], ["proxy", "serve"], ["send"], ["history"], ["bench"], ["backup"]] {
                let help = try await CourierExecutable.run(command + ["--help"])
                let flat = help.output.split(whereSeparator: \.isWhitespace).joined(separator: " ")
                #expect(flat.firstMatch(of: /\(default: [^)]*\)\.? \(default:/) == nil, "\(command): \(flat)")
            }
            // A port in use is named, with the flag that changes it; a data folder that cannot be one is said so.
            let taken = try await FreePort.hold()
            let fresh = folder.appendingPathComponent("never-served")
            try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
            for (flag, name) in [("--port", "native"), ("--compat-port", "compat"), ("--http-port", "http")] {
                for served in [data, fresh] {
                    var arguments = [
                        "serve", "--data", served.path, "--port", "0", "--compat-port", "0", "--http-port", "0",
                    ]
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
                // A folder this start made is not left behind; one that was there stays.
                #expect(!FileManager.default.fileExists(atPath: fresh.path), "\(flag)")
                #expect(FileManager.default.fileExists(atPath: data.path))
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
            // A command that reads finds no data there; one that may make it says why it cannot.
            result = try await Self.courier("user", "list", "--data", aFile.appendingPathComponent("data").path)
            #expect(result.status != 0 && result.output.contains("no Courier data in"), "\(result)")
            result = try await Self.courier(
                "user",
                "add",
                "alice",
                "--password",
                "pw-alice",
                "--data",
                aFile.appendingPathComponent("data").path
            )
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
            // A client that forgets --tls is told the server speaks TLS, and how to speak it too.
            result = try await CourierExecutable.run(
                [
                    "send", "--as", "alice", "--password", "pw-alice", "--to", "bob", "hi", "--server",
                    "127.0.0.1:\(native)",
                ],
                environment: [
                    "HOME": folder.path, "XDG_CONFIG_HOME": folder.appendingPathComponent("config").path,
                    "XDG_DATA_HOME": folder.appendingPathComponent("share").path,
                ]
            )
            #expect(
                result.status != 0 && result.output.contains("speaks TLS") && result.output.contains("--tls"),
                "\(result)"
            )
            #expect(!result.output.contains("0x15, not"), "\(result)")
            await alice.close()
            #expect(await server.terminate() == 0)
        }
    }

    @Test("a command's failure shows a server's control characters as caret notation, in any script")
    func failuresArePrintable() {
        let said = CommandFailure(description: "login refused: 登录\u{1B}]0;owned\u{07} مرحبا 👋\nnext line").description
        #expect(said == "login refused: 登录^[]0;owned^G مرحبا 👋\nnext line")
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
            // A clean stop leaves the database one whole file: no write-ahead log beside it.
            let left = try FileManager.default.contentsOfDirectory(atPath: data.path)
            #expect(left.contains("courier.sqlite") && !left.contains { $0.hasSuffix("-wal") || $0.hasSuffix("-shm") })

            let result = try await CourierExecutable.run(["serve"], environment: ["COURIER_PORT": "seventy"])
            #expect(result.status != 0 && result.output.contains("COURIER_PORT=seventy is not a port number"))
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
