import CourierProcess
import CourierTesting
import Foundation

/// nginx (Debian's package) on 127.0.0.1 as an origin for the media cache's tests and benchmark, serving a folder,
/// each request logged with the bytes it sent.
///
/// Locations over the same folder: `/files/` (plain), `/slow/` (`limit_rate`), `/nostore/` (`Cache-Control:
/// no-store`), `/chunked/` (a chunked body without length that ignores Range: nginx's SSI filter drops both),
/// `/norange/` (`max_ranges 0`: Range ignored, 200 with the whole file), `/moved/` (a 302 to `/files/`),
/// `/loop` (a redirect to itself), plus whatever `extra` adds inside the server block (`{root}` in it is replaced
/// by the served folder).
final class NginxOrigin: Sendable {
    let root: URL
    let port: Int
    let nginx: Nginx

    /// Starts nginx serving `root`, its configuration and logs in `folder`, and waits until it accepts connections.
    static func start(
        root: URL,
        folder: URL,
        port: Int? = nil,
        limitRate: String = "2m",
        extra: String = ""
    ) async throws -> NginxOrigin {
        var lastError: (any Error)?
        for _ in 0..<5 {
            let chosen: Int
            if let port { chosen = port } else { chosen = try await FreePort.pick() }
            do {
                let nginx = try await Nginx.start(
                    servers: Self.server(root: root, port: chosen, limitRate: limitRate, extra: extra),
                    ports: [chosen],
                    folder: folder
                )
                return NginxOrigin(root: root, port: chosen, nginx: nginx)
            } catch {
                lastError = error
                if port != nil { break }
            }
        }
        throw lastError ?? ExternalProgram.Failure(description: "nginx did not start")
    }

    private init(root: URL, port: Int, nginx: Nginx) {
        self.root = root
        self.port = port
        self.nginx = nginx
    }

    /// The origin URL of a file under a location (`files`, `slow`, `nostore`, `chunked`, `norange`, `moved`).
    func url(_ name: String, location: String = "files") -> URL {
        URL(string: "http://127.0.0.1:\(self.port)/\(location)/\(name)")!
    }

    /// Stops nginx (fast shutdown: open connections are closed) and waits until it has exited.
    func stop() async {
        await self.nginx.stop()
    }

    /// Kills nginx's processes with SIGKILL: open connections are reset mid-response.
    func kill() async {
        await self.nginx.kill()
    }

    /// The requests logged so far.
    func log() -> [Nginx.Logged] {
        self.nginx.log()
    }

    private static func server(root: URL, port: Int, limitRate: String, extra: String) -> String {
        let rootPath = root.path
        return """
                server {
                    listen 127.0.0.1:\(port);
                    location /files/ { alias \(rootPath)/; }
                    location /slow/ { alias \(rootPath)/; limit_rate \(limitRate); }
                    location /nostore/ { alias \(rootPath)/; add_header Cache-Control no-store; }
                    location /chunked/ { alias \(rootPath)/; ssi on; ssi_types *; }
                    location /norange/ { alias \(rootPath)/; max_ranges 0; }
                    location /moved/ { rewrite ^/moved/(.*)$ /files/$1 redirect; }
                    location = /loop { return 302 /loop; }
            \(extra.replacingOccurrences(of: "{root}", with: rootPath))
                }
            """
    }
}
