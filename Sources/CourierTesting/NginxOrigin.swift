public import Foundation

/// nginx (Debian's package) on 127.0.0.1 as an origin for the media cache's tests and benchmark, serving a folder,
/// each request logged with the bytes it sent.
///
/// Locations over the same folder: `/files/` (plain), `/slow/` (`limit_rate`), `/nostore/` (`Cache-Control:
/// no-store`), `/chunked/` (a chunked body without length that ignores Range: nginx's SSI filter drops both),
/// `/norange/` (`max_ranges 0`: Range ignored, 200 with the whole file), `/moved/` (a 302 to `/files/`),
/// `/loop` (a redirect to itself), plus whatever `extra` adds inside the server block (`{root}` in it is replaced
/// by the served folder).
public final class NginxOrigin: @unchecked Sendable {
    public let root: URL
    public let port: Int
    public let folder: URL
    private let process: Process
    private let configuration: String

    /// The nginx executable (`$COURIER_NGINX`, else Debian's path).
    public static var executable: String {
        ProcessInfo.processInfo.environment["COURIER_NGINX"] ?? "/usr/sbin/nginx"
    }

    /// Starts nginx serving `root`, its configuration and logs in `folder`, and waits until it accepts connections.
    public static func start(
        root: URL,
        folder: URL,
        port: Int? = nil,
        limitRate: String = "2m",
        extra: String = ""
    ) async throws -> NginxOrigin {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        var lastError: (any Error)?
        for _ in 0..<5 {
            let chosen: Int
            if let port { chosen = port } else { chosen = try await FreePort.pick() }
            let configuration = Self.configuration(
                root: root,
                folder: folder,
                port: chosen,
                limitRate: limitRate,
                extra: extra
            )
            do {
                return try await NginxOrigin(root: root, folder: folder, port: chosen, configuration: configuration)
            } catch {
                lastError = error
                if port != nil { break }
            }
        }
        throw lastError ?? ExternalProgram.Failure(description: "nginx did not start")
    }

    private init(root: URL, folder: URL, port: Int, configuration: String) async throws {
        self.root = root
        self.folder = folder
        self.port = port
        self.configuration = configuration
        let file = folder.appendingPathComponent("nginx.conf")
        try configuration.write(to: file, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable)
        process.arguments = ["-p", folder.path, "-c", file.path, "-e", folder.appendingPathComponent("error.log").path]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        self.process = process
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if let connection = try? await RawConnection.connect(port: port) {
                await connection.close()
                return
            }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        if process.isRunning { process.terminate() }
        let log = (try? String(contentsOf: folder.appendingPathComponent("error.log"), encoding: .utf8)) ?? ""
        throw ExternalProgram.Failure(description: "nginx did not start on port \(port): \(log)")
    }

    /// The origin URL of a file under a location (`files`, `slow`, `nostore`, `chunked`, `norange`, `moved`).
    public func url(_ name: String, location: String = "files") -> URL {
        URL(string: "http://127.0.0.1:\(self.port)/\(location)/\(name)")!
    }

    /// Stops nginx (fast shutdown: open connections are closed) and waits until it has exited.
    public func stop() async {
        guard self.process.isRunning else { return }
        self.process.terminate()
        await self.waitForExit()
    }

    /// Kills nginx's processes with SIGKILL: open connections are reset mid-response. The master is stopped first
    /// (so it cannot start new workers), then the workers are killed (found in /proc by their parent), then the
    /// master: a worker left behind would keep the master's pipe to this process open, and Foundation would never
    /// see the master end.
    public func kill() async {
        let master = self.process.processIdentifier
        Foundation.kill(master, SIGSTOP)
        for _ in 0..<50 {
            let workers = Self.children(of: master)
            if workers.isEmpty { break }
            for worker in workers { Foundation.kill(worker, SIGKILL) }
            try? await Task.sleep(for: .milliseconds(10))
        }
        Foundation.kill(master, SIGKILL)
        await self.waitForExit()
    }

    private func waitForExit() async {
        let deadline = ContinuousClock.now + .seconds(30)
        while self.process.isRunning && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    /// The processes whose parent is `parent` (Linux: /proc/PID/stat).
    static func children(of parent: Int32) -> [Int32] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return names.compactMap { name -> Int32? in
            guard let pid = Int32(name),
                let stat = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return nil }
            // After "pid (comm) state ppid …": the comm may hold spaces, so split after its closing parenthesis.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 1 && Int32(fields[1]) == parent ? pid : nil
        }
    }

    /// One line of the access log.
    public struct Logged: Sendable, Hashable {
        public var uri: String
        public var status: Int
        /// The body bytes sent (headers not counted).
        public var bodyBytes: Int64
        public var range: String
    }

    /// The requests logged so far (nginx writes a line when a response ends).
    public func log() -> [Logged] {
        let text = (try? String(contentsOf: self.folder.appendingPathComponent("access.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            guard fields.count >= 4, let status = Int(fields[1]), let bytes = Int64(fields[2]) else { return nil }
            return Logged(uri: String(fields[0]), status: status, bodyBytes: bytes, range: String(fields[3]))
        }
    }

    private static func configuration(root: URL, folder: URL, port: Int, limitRate: String, extra: String) -> String {
        let user = getuid() == 0 ? "user root;" : ""
        let path = folder.path
        let rootPath = root.path
        return """
            \(user)
            daemon off;
            worker_processes 1;
            pid \(path)/nginx.pid;
            events { worker_connections 1024; }
            http {
                types {
                    video/mp4 mp4;
                    application/vnd.apple.mpegurl m3u8;
                    video/mp2t ts;
                    text/plain txt;
                }
                default_type application/octet-stream;
                log_format sent '$request_uri\\t$status\\t$body_bytes_sent\\t$http_range';
                access_log \(path)/access.log sent;
                client_body_temp_path \(path)/body;
                proxy_temp_path \(path)/proxy;
                fastcgi_temp_path \(path)/fastcgi;
                uwsgi_temp_path \(path)/uwsgi;
                scgi_temp_path \(path)/scgi;
                sendfile on;
                keepalive_requests 100000;
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
            }
            """
    }
}
