internal import Foundation

/// Where a PostgreSQL database is: `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE` (`postgresql://` too; the port
/// defaults to 5432, and the user and password may be percent-encoded), the form the server's `--database` option
/// is to take.
///
/// The password never appears in ``description``, in a reflection (`dump`, the debugger's summary) nor in an error:
/// the location may be logged; its password may not.
public struct PostgresLocation: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    public var host: String
    public var port: Int
    public var user: String
    public var password: String?
    public var database: String

    public init(host: String, port: Int = 5432, user: String, password: String?, database: String) {
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.database = database
    }

    /// A URL that does not name a database fully.
    public struct Invalid: Error, CustomStringConvertible {
        public var description: String
    }

    /// Reads a `postgres://` URL.
    ///
    /// - Throws: ``Invalid`` (its description names what is missing, never the password).
    public init(url: String) throws {
        guard let components = URLComponents(string: url) else {
            throw Invalid(description: "not a URL; expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
        }
        guard let scheme = components.scheme?.lowercased(), scheme == "postgres" || scheme == "postgresql" else {
            throw Invalid(description: "the URL's scheme must be postgres:// or postgresql://")
        }
        guard let host = components.host, !host.isEmpty else {
            throw Invalid(description: "the URL names no host")
        }
        guard let user = components.percentEncodedUser?.removingPercentEncoding, !user.isEmpty else {
            throw Invalid(description: "the URL names no user (postgres://USER@HOST/DATABASE)")
        }
        let password = try components.percentEncodedPassword.flatMap { encoded -> String? in
            guard let password = encoded.removingPercentEncoding else {
                throw Invalid(description: "the URL's password is not percent-encoded properly")
            }
            // `user:@host` names no password.
            return password.isEmpty ? nil : password
        }
        let path = components.percentEncodedPath.drop { $0 == "/" }
        guard let database = String(path).removingPercentEncoding, !database.isEmpty, !database.contains("/") else {
            throw Invalid(description: "the URL names no database (postgres://USER@HOST/DATABASE)")
        }
        guard components.query == nil, components.fragment == nil else {
            throw Invalid(description: "the URL has options (?…), which are not supported")
        }
        let port = components.port ?? 5432
        guard (1...65535).contains(port) else { throw Invalid(description: "the URL's port is out of range") }
        // `[::1]` comes back from URLComponents with its brackets on some platforms.
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        self.init(host: bare, port: port, user: user, password: password, database: database)
    }

    /// The URL without its password.
    public var description: String {
        let host = self.host.contains(":") ? "[\(self.host)]" : self.host
        return "postgres://\(self.user)@\(host):\(self.port)/\(self.database)"
    }

    public var debugDescription: String { self.description }

    /// Everything but the password.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "host": self.host, "port": self.port, "user": self.user, "database": self.database,
                "password": self.password == nil ? "(none)" : "(hidden)",
            ]
        )
    }
}
