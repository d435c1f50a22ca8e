import CourierServer
import CourierStorePostgres
import Foundation

/// `courier serve --print-config`: the configuration as a file for `--config`.
extension Serve {
    /// The effective configuration as `--print-config` shows it, in TOML: the addresses, the data and database (the
    /// password hidden), TLS, the web chat's switches, then `[limits]` with every limit as `--limit` takes it.
    func configurationText(_ configuration: ServerConfiguration, environment: [String: String]) throws -> String {
        func quoted(_ text: String) -> String {
            var escaped = "\""
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": escaped += "\\\""
                case "\\": escaped += "\\\\"
                case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                    escaped += String(format: "\\u%04X", scalar.value)
                default: escaped.unicodeScalars.append(scalar)
                }
            }
            return escaped + "\""
        }
        let tls = (
            self.tlsCertificate ?? environment["COURIER_TLS_CERT"], self.tlsKey ?? environment["COURIER_TLS_KEY"]
        )
        var lines = [
            "# courier serve --print-config: what these flags, environment variables and configuration file give",
            "# (the password hidden); a file for --config",
            "host = \(quoted(configuration.host))",
            "port = \(configuration.nativePort)",
            "compat-port = \(configuration.compatPort)",
            "http-port = \(configuration.httpPort)",
            "data = \(quoted(configuration.dataFolder.standardizedFileURL.path))",
            // A location's description never holds its password.
            "database = \(quoted(try self.data.postgres().map { "\($0)" } ?? "sqlite"))",
            "tls-cert = \(quoted(tls.0 ?? ""))",
            "tls-key = \(quoted(tls.1 ?? ""))",
            "registration = \(quoted(configuration.accounts.registration.rawValue))",
            "allow-origin = [\(configuration.webSocket.allowedOrigins.map(quoted).joined(separator: ", "))]",
            "trusted-proxy = [\(configuration.trustedProxies.specifications.map(quoted).joined(separator: ", "))]",
            "web-socket = \(configuration.webSocket.enabled)",
            "web-chat = \(configuration.web.enabled)",
            "web-root = \(quoted(configuration.web.root ?? ""))",
            "push-contact = \(quoted(configuration.push.subject))",
            "fanout = \(quoted(self.fanout ?? PostgresFeed.Mode.notify.rawValue))",
            "node = \(quoted(self.node ?? environment["COURIER_NODE"] ?? ""))",
            "forward-host = \(quoted(configuration.cluster.forwardHost))",
            "forward-advertise-host = \(quoted(configuration.cluster.forwardAdvertisedHost ?? ""))",
            "allow-private-targets = \(configuration.push.allowPrivateTargets)",
            "otlp-endpoint = \(quoted(self.otlpEndpoint.map(CourierTracing.shown) ?? ""))",
            "log-level = \(quoted(self.logLevel ?? "info"))",
            "",
            "[limits]",
        ]
        for limit in LimitOption.all {
            lines.append("\(limit.name) = \(quoted(limit.show(configuration)))")
        }
        return lines.joined(separator: "\n")
    }
}
