public import CourierProcess
public import Foundation

/// The `courier serve` and `courier proxy` a bench measures: the given executable (the `courier` running the bench),
/// on free ports, logging to files in the bench's folder.
public enum BenchServers {
    /// Starts `courier serve` on `data` with `--limit`s, on free ports.
    ///
    /// - Returns: The server, its native port and its HTTP port.
    ///
    /// - Parameters:
    ///   - database: A PostgreSQL URL the server runs on (passed in its environment, `COURIER_DATABASE`, so that its
    ///     password is in no process listing), or nil for SQLite in `data`.
    ///   - node: The node's name, with `database`.
    public static func serve(
        executable: URL,
        data: URL,
        folder: URL,
        limits: [String],
        database: String? = nil,
        node: String? = nil,
        arguments extra: [String] = []
    ) async throws -> (server: ServerProcess, port: Int, http: Int) {
        let (server, native, http) = try await ServerProcess.start(
            executable: executable,
            data: data,
            logFolder: folder,
            arguments: ["--log-level", "warning"] + limits.flatMap { ["--limit", $0] }
                + (node.map { ["--node", $0] } ?? []) + extra,
            environment: database.map { ["COURIER_DATABASE": $0] } ?? [:]
        )
        return (server, native, http)
    }

    /// Starts `courier proxy` over a cache in `folder`, capped at `maxBytes`, on a free port.
    static func proxy(executable: URL, folder: URL, maxBytes: Int64) async throws -> (server: ServerProcess, port: Int)
    {
        var attempt = 1
        while true {
            let port = try await FreePort.pick()
            do {
                let proxy = try await ServerProcess.start(
                    executable: executable,
                    arguments: [
                        "proxy", "--port", String(port), "--cache-dir",
                        folder.appendingPathComponent("courier-cache").path, "--max-bytes", String(maxBytes),
                        "--log-level", "warning",
                    ],
                    readyPort: port,
                    log: folder.appendingPathComponent("proxy.log")
                )
                return (proxy, port)
            } catch let error as ServerProcess.ServerDidNotStart where error.exited && attempt < 3 {
                // Its port taken meanwhile: another.
                attempt += 1
            }
        }
    }
}
