import Foundation

/// How long the hops of deliveries between nodes took in a run, from the nodes' `/metrics` after it
/// (`courier_cluster_hop_seconds`, summed over the nodes): the news of a commit published by its node, received by
/// another (by the two wall clocks: one machine here), and its events read and handed to that node's connections.
public struct ClusterHops: Sendable, Codable, Hashable {
    public struct Hop: Sendable, Codable, Hashable {
        public var hop: String
        public var count: Int
        public var meanMs: Double
        /// The upper bounds of the histogram's buckets where half and 99 % of the hops had ended (a bucket's bound,
        /// not an interpolation: the figure is at most this).
        public var p50AtMostMs: Double
        public var p99AtMostMs: Double
    }

    public var hops: [Hop]

    static let metric = "courier_cluster_hop_seconds"

    /// Reads the hops out of the nodes' exposition texts.
    static func parse(_ texts: [String]) -> ClusterHops {
        var buckets: [String: [Double: Double]] = [:]
        var sums: [String: Double] = [:]
        var counts: [String: Double] = [:]
        for text in texts {
            for line in text.split(separator: "\n") where line.hasPrefix(Self.metric) {
                let rest = line.dropFirst(Self.metric.count)
                guard let open = rest.firstIndex(of: "{"), let close = rest.firstIndex(of: "}"),
                    let value = Double(rest[close...].dropFirst().trimmingCharacters(in: .whitespaces))
                else { continue }
                var labels: [String: String] = [:]
                for pair in rest[rest.index(after: open)..<close].split(separator: ",") {
                    let parts = pair.split(separator: "=", maxSplits: 1)
                    guard parts.count == 2 else { continue }
                    labels[String(parts[0])] = parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\""))
                }
                guard let hop = labels["hop"] else { continue }
                switch rest[..<open] {
                case "_bucket":
                    guard let bound = labels["le"].flatMap({ $0 == "+Inf" ? Double.infinity : Double($0) }) else {
                        continue
                    }
                    buckets[hop, default: [:]][bound, default: 0] += value
                case "_sum": sums[hop, default: 0] += value
                case "_count": counts[hop, default: 0] += value
                default: continue
                }
            }
        }
        let hops = counts.keys.sorted().compactMap { hop -> Hop? in
            guard let count = counts[hop], count.isFinite, count > 0 else { return nil }
            let cumulative = (buckets[hop] ?? [:]).sorted { $0.key < $1.key }
            func bound(_ quantile: Double) -> Double {
                let wanted = quantile * count
                return cumulative.first { $0.value >= wanted }.map { $0.key * 1_000 } ?? .infinity
            }
            return Hop(
                hop: hop,
                count: Int(count),
                meanMs: (sums[hop] ?? 0) / count * 1_000,
                p50AtMostMs: bound(0.5),
                p99AtMostMs: bound(0.99)
            )
        }
        return ClusterHops(hops: hops)
    }

    /// The hops of the nodes listening on these HTTP ports; nil when none could be read.
    static func fetch(httpPorts: [Int], within timeout: Duration = .seconds(10)) async -> ClusterHops? {
        var texts: [String] = []
        for port in httpPorts {
            // A node that never answers costs the report its figures, not the bench its end.
            let result = await withTaskGroup(of: HTTPTiming.Result?.self) { group in
                group.addTask { try? await HTTPTiming.get(port: port, path: "/metrics", keepingBody: true) }
                group.addTask {
                    try? await Task.sleep(for: timeout)
                    return nil
                }
                defer { group.cancelAll() }
                return await group.next() ?? nil
            }
            guard let result, result.status == 200 else { continue }
            texts.append(String(decoding: result.body, as: UTF8.self))
        }
        guard !texts.isEmpty else { return nil }
        let hops = Self.parse(texts)
        return hops.hops.isEmpty ? nil : hops
    }

    /// A line per hop, for the report.
    var lines: [String] {
        self.hops.map { hop in
            "  \(hop.hop.padding(toLength: 8, withPad: " ", startingAt: 0)) \(hop.count) hops, mean "
                + String(format: "%.2f", hop.meanMs) + " ms, p50 ≤ " + Self.bound(hop.p50AtMostMs) + ", p99 ≤ "
                + Self.bound(hop.p99AtMostMs)
        }
    }

    private static func bound(_ ms: Double) -> String {
        ms.isFinite ? (ms < 1 ? String(format: "%.2f ms", ms) : String(format: "%g ms", ms)) : "over 1 s"
    }
}
