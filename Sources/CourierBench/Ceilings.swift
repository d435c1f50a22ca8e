public import Foundation
import GRDB
import Glibc

/// What this machine allows, measured in the same run as the load, so the load's figures read as ratios.
public struct Ceilings: Sendable {
    /// Writing 4 KiB and fsync-ing it, in the data folder's file system.
    public var fsync: LatencyHistogram
    /// A bare GRDB insert of the rows the server writes per message (the message, and one event-log row for each
    /// member, sender included), with the server's durability (WAL, synchronous = FULL), in transactions of
    /// `batchMessages` messages.
    public var insertMessagesPerSecond: Double
    public var batchMessages: Int
    public var insertedMessages: Int
    /// What the insert ceiling is, in words.
    public var insertDescription: String

    /// Measures both in `folder` (files made there are removed).
    public static func measure(
        in folder: URL,
        fsyncs: Int = 200,
        messages: Int,
        batchMessages: Int,
        members: Int,
        messageBytes: Int
    ) throws -> Ceilings {
        Ceilings(
            fsync: try Self.fsyncLatency(in: folder, count: fsyncs),
            insertMessagesPerSecond: try Self.insertRate(
                in: folder,
                messages: messages,
                batch: batchMessages,
                members: members,
                bytes: messageBytes
            ),
            batchMessages: batchMessages,
            insertedMessages: messages,
            insertDescription: "bare GRDB, WAL, synchronous=FULL, \(batchMessages) messages a transaction"
        )
    }

    static func fsyncLatency(in folder: URL, count: Int) throws -> LatencyHistogram {
        let path = folder.appendingPathComponent("fsync-probe").path
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard descriptor >= 0 else { throw BenchError("cannot create \(path): \(String(cString: strerror(errno)))") }
        defer {
            close(descriptor)
            unlink(path)
        }
        var histogram = LatencyHistogram.latencies()
        let block = [UInt8](repeating: 0x5A, count: 4096)
        for index in 0..<count {
            let start = DispatchTime.now().uptimeNanoseconds
            _ = block.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, off_t(index % 256) * 4096) }
            guard Glibc.fsync(descriptor) == 0 else {
                throw BenchError("fsync failed: \(String(cString: strerror(errno)))")
            }
            histogram.record((DispatchTime.now().uptimeNanoseconds - start) / 1000)
        }
        return histogram
    }

    static func insertRate(in folder: URL, messages: Int, batch: Int, members: Int, bytes: Int) throws -> Double {
        let path = folder.appendingPathComponent("insert-probe.sqlite").path
        defer {
            for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
        }
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        let pool = try DatabasePool(path: path, configuration: configuration)
        try pool.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE messages (
                        conversation INTEGER NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL, sender INTEGER NOT NULL,
                        time_ms INTEGER NOT NULL, body BLOB NOT NULL, PRIMARY KEY (conversation, seq)
                    ) WITHOUT ROWID;
                    CREATE TABLE log (
                        user INTEGER NOT NULL, cursor INTEGER NOT NULL, conversation INTEGER NOT NULL,
                        seq INTEGER NOT NULL, PRIMARY KEY (user, cursor)
                    ) WITHOUT ROWID;
                    """
            )
        }
        let body = Data(repeating: 0x78, count: bytes)
        var cursors = [Int64](repeating: 0, count: members)
        let start = DispatchTime.now().uptimeNanoseconds
        var written = 0
        while written < messages {
            let count = min(batch, messages - written)
            try pool.write { db in
                let message = try db.makeStatement(sql: "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?)")
                let entry = try db.makeStatement(sql: "INSERT INTO log VALUES (?, ?, ?, ?)")
                for index in written..<(written + count) {
                    let seq = Int64(index + 1)
                    try message.execute(arguments: [1, seq, "m\(index)", index % members, seq, body])
                    for member in 0..<members {
                        cursors[member] += 1
                        try entry.execute(arguments: [member, cursors[member], 1, seq])
                    }
                }
            }
            written += count
        }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        return Double(messages) / seconds
    }
}
