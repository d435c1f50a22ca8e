import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Reads a process's CPU time and memory from Linux's /proc (nil elsewhere, or for a process that is gone).
public enum ProcessMonitor {
    /// User plus system CPU seconds.
    public static func cpuSeconds(of pid: Int32) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        // Fields after the command name: state is field 3; utime and stime are 14 and 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    public static func residentBytes(of pid: Int32) -> Int? { Self.status(pid, "VmRSS:") }
    public static func peakResidentBytes(of pid: Int32) -> Int? { Self.status(pid, "VmHWM:") }

    private static func status(_ pid: Int32, _ field: String) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field) })
        else { return nil }
        return line.split(separator: " ").dropFirst().first.flatMap { Int($0) }.map { $0 * 1024 }
    }
}
