import ArgumentParser
import CourierServer
import Foundation
import Logging
import TOMLKit

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A configuration file (`--config FILE`, or `$COURIER_CONFIG`): `courier serve`'s settings in TOML, in the form
/// `courier serve --print-config` prints, so that its output is a file to start from.
///
/// A flag wins over its environment variable, which wins over the file, which wins over the default. Every key is
/// checked as the file is read: an unknown one, a limit `--limit` does not take, or a value of the wrong type is an
/// error that names it (with the key it was likely meant to be). The admin commands read the same file for `data` and
/// `database`, and check the rest of it as `serve` would.
struct ConfigFile: Sendable, Equatable {
    /// A setting's value, as the file gave it.
    enum Value: Sendable, Equatable {
        case string(String)
        case integer(Int)
        case boolean(Bool)
        case strings([String])
    }

    /// What each top-level key takes.
    enum Kind: Sendable {
        case string, port, boolean, strings

        var name: String {
            switch self {
            case .string: "a string"
            case .port: "a port number (an integer from 0 to 65535)"
            case .boolean: "true or false"
            case .strings: "an array of strings"
            }
        }
    }

    /// The keys a file may hold besides `[limits]`: `serve`'s flags, by their long names.
    static let keys: [String: Kind] = [
        "host": .string, "port": .port, "compat-port": .port, "http-port": .port, "data": .string,
        "database": .string, "tls-cert": .string, "tls-key": .string, "registration": .string,
        "allow-origin": .strings, "trusted-proxy": .strings, "web-socket": .boolean, "web-chat": .boolean,
        "web-root": .string,
        "push-contact": .string, "fanout": .string, "log-level": .string, "node": .string, "forward-host": .string,
        "forward-advertise-host": .string, "allow-private-targets": .boolean, "otlp-endpoint": .string,
    ]

    /// The file read.
    var path: String
    /// Its settings, by key (the keys of ``keys``).
    var values: [String: Value] = [:]
    /// Its `[limits]`, as `--limit` takes them (`NAME=VALUE`), in the order of their names.
    var limits: [String] = []

    /// The most bytes a configuration file may hold.
    static let maxBytes = 1 << 20

    /// The path `--config` gives, else `$COURIER_CONFIG`; nil for none.
    static func path(flag: String?, environment: [String: String]) -> String? {
        guard let path = flag ?? environment["COURIER_CONFIG"], !path.isEmpty else { return nil }
        return path
    }

    /// Reads and checks a file.
    static func read(path: String) throws -> ConfigFile {
        let data: Data
        do {
            let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
            defer { try? handle.close() }
            data = try handle.read(upToCount: Self.maxBytes + 1) ?? Data()
        } catch {
            throw ValidationError("cannot read the configuration file \(path): \(Self.reason(error))")
        }
        guard data.count <= Self.maxBytes else {
            throw ValidationError("the configuration file \(path) is over \(Self.maxBytes) bytes")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw ValidationError("the configuration file \(path) is not UTF-8")
        }
        var file = try ConfigFile(path: path, text: text)
        try file.checkSecrets()
        return file
    }

    /// Checks a file's text (no file is read: ``read(path:)`` does that).
    init(path: String, text: String) throws {
        self.path = path
        let table: TOMLTable
        do {
            table = try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            throw ValidationError(
                "\(path): line \(error.source.begin.line), column \(error.source.begin.column): \(error.description)"
            )
        }
        for key in table.keys.sorted() {
            guard let value = table[key] else { continue }
            if key == "limits" {
                guard let limits = value.table else {
                    throw ValidationError("\(path): limits must be a table ([limits]), not \(value.type)")
                }
                try self.readLimits(limits)
                continue
            }
            guard let kind = Self.keys[key] else {
                throw ValidationError(
                    "\(path): unknown key \(Self.quoted(key))"
                        + Self.suggestion(for: key, among: Array(Self.keys.keys) + ["limits"])
                )
            }
            self.values[key] = try Self.value(of: value, as: kind, key: key, path: path)
        }
        try self.checkValues()
    }

    /// The values `serve` would refuse, refused as the file is read, with its name (the admin commands check them
    /// too).
    private func checkValues() throws {
        func refuse(_ key: String, _ why: String) -> ValidationError {
            ValidationError("\(self.path): \(key): \(why)")
        }
        if let proxies = self.strings("trusted-proxy") {
            do { _ = try TrustedProxies(proxies) } catch { throw refuse("trusted-proxy", "\(error)") }
        }
        if let endpoint = self.given("otlp-endpoint"), !CourierTracing.isEndpoint(endpoint) {
            // Named with its password hidden: the error goes to the terminal and the journal.
            throw refuse(
                "otlp-endpoint",
                "\(Self.quoted(CourierTracing.shown(endpoint))) is not an http:// or https:// URL (no query)"
            )
        }
        for origin in self.strings("allow-origin") ?? [] where !ServerConfiguration.WebSocket.isOrigin(origin) {
            throw refuse("allow-origin", "\(origin) is not scheme://host[:port] (http or https, no path)")
        }
        let choices: [(String, [String])] = [
            ("registration", ServerConfiguration.Accounts.Registration.allCases.map(\.rawValue)),
            ("fanout", ["notify", "poll"]),
            ("log-level", Logger.Level.allCases.map(\.rawValue)),
        ]
        for (key, allowed) in choices {
            if let value = self.string(key), !allowed.contains(value) {
                throw refuse(key, "\(Self.quoted(value)) is not one of \(allowed.joined(separator: ", "))")
            }
        }
    }

    private mutating func readLimits(_ table: TOMLTable) throws {
        let names = LimitOption.all.map(\.name)
        let switches = Set(LimitOption.all.filter(\.isSwitch).map(\.name))
        for name in table.keys.sorted() {
            guard let value = table[name] else { continue }
            guard names.contains(name) else {
                throw ValidationError(
                    "\(self.path): unknown limit \(Self.quoted(name)) in [limits]"
                        + Self.suggestion(for: name, among: names)
                )
            }
            // As --limit takes it: a string as it is (30s, 64MiB, auto), numbers and booleans as they read.
            let text: String
            switch value.type {
            case .string: text = value.string ?? ""
            case .int: text = String(value.int ?? 0)
            case .double: text = String(value.double ?? 0)
            case .bool where switches.contains(name): text = value.bool == true ? "1" : "0"
            case .bool:
                throw ValidationError("\(self.path): [limits] \(name) is a number or a size, not true or false")
            default:
                throw ValidationError(
                    "\(self.path): [limits] \(name) must be a string, a number or true or false, not \(value.type)"
                )
            }
            self.limits.append("\(name)=\(text)")
        }
        // Each value is read as --limit reads it, so that a bad one is said with the file's name.
        var check = ServerConfiguration()
        try LimitOption.apply(self.limits, to: &check, from: "\(self.path): [limits]")
    }

    /// A key as an error names it: in quotes, its control characters escaped.
    static func quoted(_ key: String) -> String {
        "\""
            + key.unicodeScalars.map {
                $0.properties.generalCategory == .control ? $0.escaped(asASCII: true) : String($0)
            }
            .joined() + "\""
    }

    private static func value(
        of value: any TOMLValueConvertible,
        as kind: Kind,
        key: String,
        path: String
    ) throws
        -> Value
    {
        switch kind {
        case .string:
            if let text = value.string { return .string(text) }
        case .port:
            if let number = value.int, (0...65535).contains(number) { return .integer(number) }
        case .boolean:
            if let flag = value.bool { return .boolean(flag) }
        case .strings:
            if let array = value.array {
                let texts = array.compactMap { $0.string }
                if texts.count == array.count { return .strings(texts) }
            }
        }
        throw ValidationError("\(path): \(key) must be \(kind.name)")
    }

    /// A database URL with a password, in a file other users of the machine may read, is refused (as ssh refuses a
    /// key others can read): the password goes in `$COURIER_DATABASE`, or the file is made private.
    private mutating func checkSecrets() throws {
        guard case .string(let url)? = self.values["database"], url != "sqlite",
            URLComponents(string: url)?.password != nil
        else { return }
        var status = stat()
        guard stat(self.path, &status) == 0 else { return }
        guard status.st_mode & S_IROTH != 0 else { return }
        throw ValidationError(
            "\(self.path) holds the database's password and any user of the machine can read it (mode "
                + "\(String(status.st_mode & 0o777, radix: 8))): run chmod o-r on it, or give the URL in "
                + "$COURIER_DATABASE instead"
        )
    }

    func string(_ key: String) -> String? {
        if case .string(let text)? = self.values[key] { text } else { nil }
    }

    /// A string setting that is not empty (an empty one, as `--print-config` writes for none, is none).
    func given(_ key: String) -> String? {
        self.string(key).flatMap { $0.isEmpty ? nil : $0 }
    }

    func integer(_ key: String) -> Int? {
        if case .integer(let number)? = self.values[key] { number } else { nil }
    }

    func boolean(_ key: String) -> Bool? {
        if case .boolean(let flag)? = self.values[key] { flag } else { nil }
    }

    func strings(_ key: String) -> [String]? {
        if case .strings(let texts)? = self.values[key] { texts } else { nil }
    }

    /// " (did you mean …?)" when one of `names` is within two edits of `key`, else nothing.
    static func suggestion(for key: String, among names: [String]) -> String {
        let scored = names.map { (name: $0, distance: Self.distance(key, $0)) }.filter { $0.distance <= 2 }
        guard let best = scored.min(by: { ($0.distance, $0.name) < ($1.distance, $1.name) }) else { return "" }
        return " (did you mean \(Self.quoted(best.name))?)"
    }

    /// The edit distance between two strings, by characters.
    static func distance(_ first: String, _ second: String) -> Int {
        let a = Array(first)
        let b = Array(second)
        guard !a.isEmpty else { return b.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in stride(from: 1, through: b.count, by: 1) {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }

    private static func reason(_ error: any Error) -> String {
        let error = error as NSError
        if let underlying = error.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(underlying.code)))
        }
        return error.localizedDescription
    }
}

extension Serve {
    /// Takes a configuration file's settings where neither a flag nor its environment variable gives one. A switch
    /// the file turns off stays off (a flag only turns one off); the file's limits come before the flags', which
    /// win.
    mutating func take(_ file: ConfigFile, environment: [String: String]) {
        func unset(_ variable: String) -> Bool { environment[variable] ?? "" == "" }
        if self.host == nil, unset("COURIER_HOST") { self.host = file.given("host") }
        if self.port == nil, unset("COURIER_PORT") { self.port = file.integer("port") }
        if self.compatPort == nil, unset("COURIER_COMPAT_PORT") { self.compatPort = file.integer("compat-port") }
        if self.httpPort == nil, unset("COURIER_HTTP_PORT") { self.httpPort = file.integer("http-port") }
        if self.tlsCertificate == nil, unset("COURIER_TLS_CERT") { self.tlsCertificate = file.given("tls-cert") }
        if self.tlsKey == nil, unset("COURIER_TLS_KEY") { self.tlsKey = file.given("tls-key") }
        if self.node == nil, unset("COURIER_NODE") { self.node = file.given("node") }
        self.fanout = self.fanout ?? file.given("fanout")
        self.forwardHost = self.forwardHost ?? file.given("forward-host")
        self.forwardAdvertiseHost = self.forwardAdvertiseHost ?? file.given("forward-advertise-host")
        self.pushContact = self.pushContact ?? file.given("push-contact")
        self.registration = self.registration ?? file.given("registration")
        self.webRoot = self.webRoot ?? file.given("web-root")
        self.logLevel = self.logLevel ?? file.given("log-level")
        self.otlpEndpoint = self.otlpEndpoint ?? file.given("otlp-endpoint")
        if self.allowedOrigins.isEmpty { self.allowedOrigins = file.strings("allow-origin") ?? [] }
        if self.trustedProxies.isEmpty { self.trustedProxies = file.strings("trusted-proxy") ?? [] }
        if file.boolean("web-socket") == false { self.noWebSocket = true }
        if file.boolean("web-chat") == false { self.noWebChat = true }
        if file.boolean("allow-private-targets") == true { self.allowPrivateTargets = true }
        self.limits = file.limits + self.limits
    }
}
