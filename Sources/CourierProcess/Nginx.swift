public import Foundation
import NIOCore
import NIOPosix

/// nginx (Debian's package) run in the foreground for a benchmark or a test: its configuration, pid, temporary files
/// and logs in one folder, each request logged with the body bytes it sent.
public final class Nginx: @unchecked Sendable {
    /// nginx missing, or not starting.
    public struct Failure: Error, CustomStringConvertible {
        public var description: String

        init(_ description: String) {
            self.description = description
        }
    }

    public let folder: URL
    private let process: ChildProcess

    /// The nginx executable (`$COURIER_NGINX`, else Debian's path).
    public static var executable: String {
        ProcessInfo.processInfo.environment["COURIER_NGINX"] ?? "/usr/sbin/nginx"
    }

    /// Starts nginx with `servers` (the `server { … }` blocks, and any other `http` directives) and `stream` (the
    /// directives of a `stream` block: TCP proxying, with Debian's `libnginx-mod-stream`), and waits until every port
    /// in `ports` accepts connections.
    public static func start(
        servers: String = "",
        stream: String = "",
        ports: [Int],
        folder: URL,
        workers: String = "1"
    ) async throws -> Nginx {
        guard FileManager.default.isExecutableFile(atPath: Self.executable) else {
            throw Failure("nginx is not installed at \(Self.executable) (apt-get install nginx)")
        }
        guard stream.isEmpty || FileManager.default.fileExists(atPath: Self.streamModule) else {
            throw Failure(
                "nginx's stream module is not installed at \(Self.streamModule) (apt-get install libnginx-mod-stream)"
            )
        }
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let file = folder.appendingPathComponent("nginx.conf")
        try Self.configuration(servers: servers, stream: stream, folder: folder, workers: workers)
            .write(to: file, atomically: true, encoding: .utf8)
        let process = try ChildProcess(
            executable: Self.executable,
            arguments: ["-p", folder.path, "-c", file.path, "-e", folder.appendingPathComponent("error.log").path],
            standardOutput: .null,
            standardError: .null
        )
        let nginx = Nginx(folder: folder, process: process)
        let deadline = ContinuousClock.now + .seconds(60)
        var waiting = ports
        while ContinuousClock.now < deadline, process.isRunning {
            var still: [Int] = []
            for port in waiting where !(await PortProbe.accepts(port: port)) { still.append(port) }
            waiting = still
            if waiting.isEmpty { return nginx }
            try await Task.sleep(for: .milliseconds(20))
        }
        await nginx.stop()
        let log = (try? String(contentsOf: folder.appendingPathComponent("error.log"), encoding: .utf8)) ?? ""
        throw Failure("nginx did not start on ports \(ports): \(log)")
    }

    private init(folder: URL, process: ChildProcess) {
        self.folder = folder
        self.process = process
    }

    /// Stops nginx (fast shutdown: open connections are closed) and waits until it has exited.
    public func stop() async {
        guard self.process.isRunning else { return }
        self.process.terminate()
        await self.waitForExit()
    }

    /// Kills nginx's processes with SIGKILL: open connections are reset mid-response. The master is stopped first
    /// (so it cannot start new workers), then the workers are killed (found in /proc by their parent), then the
    /// master: a worker left behind would be orphaned, its listening sockets open.
    public func kill() async {
        let master = self.process.processIdentifier
        self.process.terminate(with: SIGSTOP)
        for _ in 0..<50 {
            let workers = Self.children(of: master)
            if workers.isEmpty { break }
            for worker in workers { Foundation.kill(worker, SIGKILL) }
            try? await Task.sleep(for: .milliseconds(10))
        }
        self.process.terminate(with: SIGKILL)
        await self.waitForExit()
    }

    private func waitForExit() async {
        let deadline = ContinuousClock.now + .seconds(30)
        while self.process.isRunning && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    /// One line of the access log.
    public struct Logged: Sendable, Hashable {
        /// The request's URI, with its query.
        public var uri: String
        public var status: Int
        /// The body bytes sent (headers not counted).
        public var bodyBytes: Int64
        /// The request's Range header, or "-".
        public var range: String
    }

    /// The requests logged so far in an access log of the folder (nginx writes a line when a response ends).
    public func log(_ name: String = "access.log") -> [Logged] {
        let text = (try? String(contentsOf: self.folder.appendingPathComponent(name), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            guard fields.count >= 4, let status = Int(fields[1]), let bytes = Int64(fields[2]) else { return nil }
            return Logged(uri: String(fields[0]), status: status, bodyBytes: bytes, range: String(fields[3]))
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

    /// Debian's build of nginx loads its stream module from here.
    static let streamModule = "/usr/lib/nginx/modules/ngx_stream_module.so"

    private static func configuration(servers: String, stream: String, folder: URL, workers: String) -> String {
        let user = getuid() == 0 ? "user root;" : ""
        let path = folder.path
        let streamBlock = stream.isEmpty ? "" : "stream {\n\(stream)\n}"
        return """
            \(stream.isEmpty ? "" : "load_module \(Self.streamModule);")
            \(user)
            daemon off;
            worker_processes \(workers);
            pid \(path)/nginx.pid;
            events { worker_connections 4096; }
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
            \(servers)
            }
            \(streamBlock)
            """
    }
}
