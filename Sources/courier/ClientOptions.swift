import ArgumentParser
import CourierChat
import CourierClient
import Foundation
import Logging
import NIOSSL

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// What every client command takes: which server, as whom, and how to log in.
struct ClientOptions: ParsableArguments {
    /// The server used when neither `--server` nor `COURIER_SERVER` names one.
    static let defaultServer = "127.0.0.1:6970"

    @Option(
        help: ArgumentHelp(
            "The server's native port (default: $COURIER_SERVER, else \(ClientOptions.defaultServer)).",
            valueName: "host:port"
        )
    )
    var server: String?

    @Option(name: .customLong("as"), help: ArgumentHelp("The user to act as.", valueName: "name"))
    var user: String

    @Option(
        help: """
            The password, needed when no saved token works (default: $COURIER_PASSWORD, else a prompt on a \
            terminal).
            """
    )
    var password: String?

    @Flag(help: "Speak TLS, trusting the system's certificate authorities.")
    var tls = false

    @Option(
        name: .customLong("tls-ca"),
        help: ArgumentHelp(
            "Speak TLS, trusting the certificates in this PEM file (default: $COURIER_TLS_CA).",
            valueName: "file"
        )
    )
    var tlsCA: String?

    /// The server as given: `--server`, else `COURIER_SERVER`, else the default.
    func serverText() -> String {
        self.server ?? ProcessInfo.processInfo.environment["COURIER_SERVER"] ?? Self.defaultServer
    }

    /// Checks `--server` (or `COURIER_SERVER`) while parsing: a wrong one is said with the command's usage.
    func validate() throws {
        _ = try self.address()
    }

    /// The server's host and port.
    func address() throws -> (host: String, port: Int) {
        try Self.address(self.serverText())
    }

    /// Parses HOST:PORT (an IPv6 host in brackets), the form of every flag that names where to connect.
    static func address(_ text: String, flag: String = "--server") throws -> (host: String, port: Int) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (1...65535).contains(port), colon > text.startIndex
        else {
            throw ValidationError("\(flag) \(text): expected HOST:PORT, such as 127.0.0.1:6970 or [::1]:6970")
        }
        var host = String(text[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host, port)
    }

    /// Where this user's token and local store live, for this server.
    func paths() throws -> ClientPaths {
        let (host, port) = try self.address()
        return ClientPaths(server: "\(host):\(port)", user: self.user)
    }

    /// The TLS configuration the flags ask for, or nil for plain TCP.
    func tlsConfiguration() -> TLSConfiguration? {
        let authority = self.tlsCA ?? ProcessInfo.processInfo.environment["COURIER_TLS_CA"]
        guard self.tls || authority != nil else { return nil }
        var configuration = TLSConfiguration.makeClientConfiguration()
        if let authority { configuration.trustRoots = .file(authority) }
        return configuration
    }

    /// The password: `--password`, else `COURIER_PASSWORD`, else asked for on the terminal without echo.
    func resolvePassword() throws -> String {
        if let password = self.password ?? ProcessInfo.processInfo.environment["COURIER_PASSWORD"] {
            return password
        }
        guard let password = Terminal.readSecret(prompt: "password for \(self.user): ") else {
            throw CommandFailure(
                description:
                    "no password for \(self.user): pass --password, set COURIER_PASSWORD, or run on a terminal"
            )
        }
        return password
    }
}

/// A user's files for one server, in the XDG folders: the device token (config) and the local store (data).
struct ClientPaths {
    /// The token: `$XDG_CONFIG_HOME/courier/SERVER/USER.token` (default `~/.config`), readable by the user alone.
    let tokenFile: URL
    /// The SDK's store (outbox, messages): `$XDG_DATA_HOME/courier/SERVER/USER.sqlite` (default `~/.local/share`).
    let storeFile: URL
    /// What the chat keeps between runs (closed conversations): beside the store, `USER.chat.json`.
    var chatSettingsFile: URL {
        self.storeFile.deletingPathExtension().appendingPathExtension("chat.json")
    }

    init(server: String, user: String) {
        let environment = ProcessInfo.processInfo.environment
        let home =
            environment["HOME"].map { URL(fileURLWithPath: $0, isDirectory: true) }
            ?? FileManager.default.homeDirectoryForCurrentUser
        func base(_ variable: String, _ fallback: String) -> URL {
            // The XDG specification ignores relative paths.
            if let path = environment[variable], path.hasPrefix("/") { return URL(fileURLWithPath: path) }
            return home.appendingPathComponent(fallback)
        }
        let server = Self.fileName(server)
        let user = Self.fileName(user.lowercased())
        self.tokenFile = base("XDG_CONFIG_HOME", ".config")
            .appendingPathComponent("courier").appendingPathComponent(server).appendingPathComponent("\(user).token")
        self.storeFile = base("XDG_DATA_HOME", ".local/share")
            .appendingPathComponent("courier").appendingPathComponent(server).appendingPathComponent("\(user).sqlite")
    }

    /// A name safe as one path component: letters, digits, '.', '-' and '_' kept, anything else '_'.
    static func fileName(_ text: String) -> String {
        String(text.map { $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) ? $0 : "_" })
    }

    /// The saved token, if any.
    func savedToken() -> String? {
        guard let data = FileManager.default.contents(atPath: self.tokenFile.path) else { return nil }
        let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return token.isEmpty ? nil : token
    }

    /// Saves a token, readable and writable by the user alone (0600, in a 0700 folder).
    func save(token: String) throws {
        let folder = self.tokenFile.deletingLastPathComponent()
        try FileManager.default.createDirectory(
            at: folder,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
        _ = FileManager.default.createFile(
            atPath: self.tokenFile.path,
            contents: Data((token + "\n").utf8),
            attributes: [.posixPermissions: 0o600]
        )
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: self.tokenFile.path)
    }

    func removeToken() {
        try? FileManager.default.removeItem(at: self.tokenFile)
    }
}

/// The rule for port flags.
enum PortNumber {
    /// Checks a port flag's value: 1 to 65535, or 0 too where 0 picks a free port.
    static func check(_ port: Int, flag: String, allowsZero: Bool) throws {
        let range = allowsZero ? 0...65535 : 1...65535
        guard range.contains(port) else {
            throw ValidationError(
                "\(flag) \(port) is not a port number: \(range.lowerBound) to 65535"
                    + (allowsZero ? " (0 picks a free one)" : "")
            )
        }
    }
}
