import Foundation
import Histogram

/// The load run again during a login storm (`--storm`), and what the storm got.
public struct StormResult: Sendable {
    public var workers: Int
    public var tally: LoginStorm.Tally
    public var seconds: Double
    public var during: BenchResult
}

/// The bench's report: text for people, JSON for scripts and tests.
public enum BenchReport {
    static func milliseconds(_ microseconds: UInt64) -> String {
        String(format: "%.2f", Double(microseconds) / 1000)
    }

    static func percentiles(_ histogram: LatencyHistogram) -> String {
        guard histogram.totalCount > 0 else { return "none" }
        return "p50 \(Self.milliseconds(histogram.valueAtPercentile(50))) ms, "
            + "p99 \(Self.milliseconds(histogram.valueAtPercentile(99))) ms, "
            + "p99.9 \(Self.milliseconds(histogram.valueAtPercentile(99.9))) ms, "
            + "max \(Self.milliseconds(histogram.max)) ms"
    }

    static func mebibytes(_ bytes: Int?) -> String {
        bytes.map { String(format: "%.1f MiB", Double($0) / 1_048_576) } ?? "unknown"
    }

    public static func text(
        _ result: BenchResult,
        ceilings: Ceilings?,
        storm: StormResult? = nil,
        nativePeer: BenchResult? = nil
    ) -> String {
        let configuration = result.configuration
        let seconds = max(result.seconds, 1e-9)
        var lines = [
            "courier bench: \(configuration.connections) \(configuration.transport == .websocket ? "WebSocket " : "")"
                + "connections, \(configuration.pattern), "
                + (configuration.pattern == .idle
                    ? "held \(configuration.settle)"
                    : "\(configuration.messagesPerConnection) messages of \(configuration.messageBytes) B each, "
                        + (configuration.rate.map { "open loop at \(Int($0)) msg/s" }
                            ?? "closed loop, window \(configuration.window)"))
        ]
        lines.append("connected:     \(result.connected)")
        if configuration.pattern == .idle {
            if let before = result.serverRSSBefore, let after = result.serverRSSAfter {
                let perConnection = Double(after - before) / Double(max(1, result.connected))
                lines.append(
                    "server RSS:    \(Self.mebibytes(before)) before, \(Self.mebibytes(after)) after settling: "
                        + String(format: "%.1f KiB per connection", perConnection / 1024)
                )
            }
        } else {
            lines += [
                "sent:          \(result.sent) (\(Int(Double(result.sent) / seconds)) msg/s)",
                "acknowledged:  \(result.acknowledged) (\(Int(Double(result.acknowledged) / seconds)) msg/s)",
                "delivered:     \(result.delivered) of \(configuration.expectedDeliveries) "
                    + "(\(Int(Double(result.delivered) / seconds)) msg/s)",
                "duration:      \(String(format: "%.2f", result.seconds)) s",
                "ack latency:   \(Self.percentiles(result.acknowledgement))",
                "end to end:    \(Self.percentiles(result.endToEnd))",
            ]
        }
        if let cpu = result.serverCPUSeconds {
            lines.append(
                "server CPU:    \(String(format: "%.1f", cpu)) s (\(String(format: "%.2f", cpu / seconds)) cores busy)"
            )
        }
        lines.append("server peak RSS: \(Self.mebibytes(result.serverPeakRSS))")
        if let hops = result.clusterHops {
            lines.append("cross-node hops (the nodes' /metrics, all nodes):")
            lines += hops.lines
        }
        if let ceilings {
            let ratio = Double(result.acknowledged) / seconds / ceilings.insertMessagesPerSecond
            lines += [
                "ceiling fsync: \(Self.percentiles(ceilings.fsync)) (4 KiB write + fsync)",
                "ceiling insert: \(Int(ceilings.insertMessagesPerSecond)) msg/s (\(ceilings.insertDescription)); "
                    + "acknowledged/ceiling = " + String(format: "%.2f", ratio),
            ]
        }
        if result.failures > 0 {
            lines.append("failures:      \(result.failures); the first: \(result.firstFailure ?? "")")
        }
        if let peer = nativePeer {
            lines += Self.comparison(result, native: peer)
        }
        if let storm {
            let tally = storm.tally
            let quiet = Double(result.endToEnd.valueAtPercentile(99))
            let stormy = Double(storm.during.endToEnd.valueAtPercentile(99))
            lines += [
                "login storm:   \(storm.workers) connections at once, \(tally.attempts) logins "
                    + "(\(Int(Double(tally.attempts) / max(storm.seconds, 1e-9)))/s): \(tally.throttled) throttled "
                    + "before any hash, \(tally.authFailed) password checks, \(tally.other) other",
                "during it:     acknowledged \(storm.during.acknowledged), delivered \(storm.during.delivered); "
                    + "end to end \(Self.percentiles(storm.during.endToEnd)); server CPU "
                    + String(format: "%.2f", (storm.during.serverCPUSeconds ?? 0) / max(storm.during.seconds, 1e-9))
                    + " cores busy",
                "p99 end to end, storm/quiet = " + String(format: "%.2f", stormy / max(quiet, 1)),
            ]
        }
        return lines.joined(separator: "\n")
    }

    /// The WebSocket run beside its native peer: the peer's figures, and the ratios the issue's aims are about.
    static func comparison(_ result: BenchResult, native peer: BenchResult) -> [String] {
        if result.configuration.pattern == .idle {
            let web = Self.perConnection(result)
            let native = Self.perConnection(peer)
            return [
                "native peer:   " + (native.map { String(format: "%.1f KiB per connection", $0 / 1024) } ?? "unknown")
                    + " (\(peer.connected) connected)",
                "WebSocket/native memory per idle connection = "
                    + (web.flatMap { web in native.map { String(format: "%.2f", web / max($0, 1)) } } ?? "unknown"),
            ]
        }
        let rate = Double(result.acknowledged) / max(result.seconds, 1e-9)
        let peerRate = Double(peer.acknowledged) / max(peer.seconds, 1e-9)
        return [
            "native peer:   acknowledged \(Int(peerRate)) msg/s, ack latency \(Self.percentiles(peer.acknowledgement)), "
                + "server CPU " + String(format: "%.2f", (peer.serverCPUSeconds ?? 0) / max(peer.seconds, 1e-9))
                + " cores busy",
            "WebSocket/native acknowledged msg/s = " + String(format: "%.2f", rate / max(peerRate, 1e-9)),
        ]
    }

    /// The server's memory per connection after an idle run settled.
    static func perConnection(_ result: BenchResult) -> Double? {
        guard let before = result.serverRSSBefore, let after = result.serverRSSAfter else { return nil }
        return Double(after - before) / Double(max(1, result.connected))
    }

    public static func json(
        _ result: BenchResult,
        ceilings: Ceilings?,
        storm: StormResult? = nil,
        nativePeer: BenchResult? = nil
    ) throws -> String {
        func latency(_ histogram: LatencyHistogram) -> [String: Double] {
            [
                "p50_ms": Double(histogram.valueAtPercentile(50)) / 1000,
                "p99_ms": Double(histogram.valueAtPercentile(99)) / 1000,
                "p999_ms": Double(histogram.valueAtPercentile(99.9)) / 1000,
                "max_ms": Double(histogram.max) / 1000,
                "count": Double(histogram.totalCount),
            ]
        }
        var object: [String: Any] = [
            "connections": result.configuration.connections,
            "pattern": "\(result.configuration.pattern)",
            "connected": result.connected,
            "sent": result.sent,
            "acknowledged": result.acknowledged,
            "delivered": result.delivered,
            "expected_deliveries": result.configuration.expectedDeliveries,
            "failures": result.failures,
            "seconds": result.seconds,
            "ack_latency": latency(result.acknowledgement),
            "end_to_end_latency": latency(result.endToEnd),
        ]
        object["server_cpu_seconds"] = result.serverCPUSeconds
        if let hops = result.clusterHops {
            object["cluster_hops"] = hops.hops.map { hop -> [String: Any] in
                [
                    "hop": hop.hop, "count": hop.count, "mean_ms": hop.meanMs,
                    "p50_at_most_ms": hop.p50AtMostMs.isFinite ? hop.p50AtMostMs : -1,
                    "p99_at_most_ms": hop.p99AtMostMs.isFinite ? hop.p99AtMostMs : -1,
                ]
            }
        }
        object["server_peak_rss_bytes"] = result.serverPeakRSS
        object["server_rss_before_bytes"] = result.serverRSSBefore
        object["server_rss_after_bytes"] = result.serverRSSAfter
        object["first_failure"] = result.firstFailure
        if let ceilings {
            object["ceiling_fsync"] = latency(ceilings.fsync)
            object["ceiling_insert_messages_per_second"] = ceilings.insertMessagesPerSecond
        }
        object["transport"] = result.configuration.transport.rawValue
        if let peer = nativePeer {
            object["native_peer"] =
                [
                    "connected": peer.connected,
                    "acknowledged": peer.acknowledged,
                    "seconds": peer.seconds,
                    "ack_latency": latency(peer.acknowledgement),
                    "server_cpu_seconds": peer.serverCPUSeconds ?? 0,
                    "server_rss_before_bytes": peer.serverRSSBefore ?? 0,
                    "server_rss_after_bytes": peer.serverRSSAfter ?? 0,
                ] as [String: Any]
        }
        if let storm {
            object["storm"] =
                [
                    "workers": storm.workers,
                    "seconds": storm.seconds,
                    "attempts": storm.tally.attempts,
                    "throttled": storm.tally.throttled,
                    "password_checks": storm.tally.authFailed,
                    "other": storm.tally.other,
                    "acknowledged": storm.during.acknowledged,
                    "delivered": storm.during.delivered,
                    "failures": storm.during.failures,
                    "end_to_end_latency": latency(storm.during.endToEnd),
                    "server_cpu_seconds": storm.during.serverCPUSeconds ?? 0,
                ] as [String: Any]
        }
        let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }
}
