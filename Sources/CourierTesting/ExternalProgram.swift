public import Foundation
public import NIOSSL
import Synchronization

/// A program nobody here wrote (curl, openssl), run to completion for a test.
public enum ExternalProgram {
    /// What a run printed and how it ended.
    public struct Result: Sendable {
        public var status: Int32
        public var output: String
        public var errors: String
    }

    /// A run that ended with a status other than the one expected.
    public struct Failure: Error, CustomStringConvertible {
        public var description: String

        public init(description: String) {
            self.description = description
        }
    }

    /// Runs `path` with `arguments` and returns its status and output. The wait happens on a thread of its own:
    /// not on the few threads of Swift's cooperative pool that a server under test needs, nor on Dispatch's, which
    /// on Linux share a limit with them (a few blocked Dispatch threads stall every task until the pool grows, once
    /// a second).
    public static func run(_ path: String, _ arguments: [String]) async throws -> Result {
        try await withCheckedThrowingContinuation { continuation in
            onOwnThread {
                continuation.resume(
                    with: Swift.Result {
                        let output = Pipe()
                        let errors = Pipe()
                        let process = try ChildProcess(
                            executable: path,
                            arguments: arguments,
                            standardOutput: .pipe(output),
                            standardError: .pipe(errors)
                        )
                        // Read stderr on another thread so neither pipe can fill and stall the program.
                        let errorData = Mutex<Data>(Data())
                        let group = DispatchGroup()
                        group.enter()
                        onOwnThread {
                            let data = errors.fileHandleForReading.readDataToEndOfFile()
                            errorData.withLock { $0 = data }
                            group.leave()
                        }
                        let data = output.fileHandleForReading.readDataToEndOfFile()
                        group.wait()
                        return Result(
                            status: process.waitUntilExit(),
                            output: String(decoding: data, as: UTF8.self),
                            errors: String(decoding: errorData.withLock { $0 }, as: UTF8.self)
                        )
                    }
                )
            }
        }
    }

    /// Runs curl quietly (errors shown, at most ten seconds) and returns what it printed.
    public static func curl(_ arguments: [String]) async throws -> String {
        try await Self.output("/usr/bin/curl", ["--silent", "--show-error", "--max-time", "60"] + arguments)
    }

    /// Runs `path` and returns its output, throwing ``Failure`` unless it exits with 0.
    public static func output(_ path: String, _ arguments: [String]) async throws -> String {
        let result = try await Self.run(path, arguments)
        guard result.status == 0 else {
            throw Failure(description: "\(path) \(arguments) exited with \(result.status): \(result.errors)")
        }
        return result.output
    }
}

/// Runs blocking work (waiting for a process) on a new thread.
package func onOwnThread(_ work: @escaping @Sendable () -> Void) {
    let thread = Thread { work() }
    thread.stackSize = 1 << 20
    thread.start()
}

/// A self-signed certificate (by default for 127.0.0.1 and localhost), made by the `openssl` program, with its key.
public struct TestCertificate: Sendable {
    /// The certificate (PEM): the server's chain, and the clients' trust root.
    public let certificateFile: String
    /// The private key (PEM).
    public let keyFile: String

    /// A client configuration that trusts this certificate (and nothing else).
    public var trustingClient: TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.trustRoots = .file(self.certificateFile)
        return configuration
    }

    /// Makes a new P-256 key and a certificate valid for a day, in `folder`, under file names starting with `name`.
    /// `subjectAltNames` is openssl's list, such as `IP:127.0.0.1,DNS:localhost`.
    public static func make(
        in folder: URL,
        name: String = "server",
        subjectAltNames: String = "IP:127.0.0.1,DNS:localhost"
    ) async throws -> TestCertificate {
        let certificate = folder.appendingPathComponent("\(name).crt").path
        let key = folder.appendingPathComponent("\(name).key").path
        _ = try await ExternalProgram.output(
            "/usr/bin/openssl",
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", key, "-out", certificate, "-days", "1", "-subj", "/CN=courier-test-\(name)",
                "-addext", "subjectAltName=\(subjectAltNames)",
            ]
        )
        return TestCertificate(certificateFile: certificate, keyFile: key)
    }
}
