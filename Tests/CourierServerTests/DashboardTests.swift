import CourierServerTesting
import CourierTesting
import Foundation
import Testing

/// contrib/grafana/courier.json, the dashboard for `/metrics`: every metric it plots is one the server exports, and
/// every metric the server exports is plotted.
@Suite("The Grafana dashboard")
struct DashboardTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The series names a query selects, outside its quoted strings (a label's value is not a metric).
    static func names(in expression: String) -> Set<String> {
        let unquoted = expression.replacing(/"[^"]*"/, with: "\"\"")
        return Set(unquoted.matches(of: /courier_[a-z_]+/).map { String($0.output) })
    }

    /// The labels a query groups by (`sum by (le, hop)`).
    static func groupedLabels(in expression: String) -> Set<String> {
        var labels: Set<String> = []
        for match in expression.matches(of: /by \(([a-z_, ]*)\)/) {
            for label in match.output.1.split(separator: ",") {
                labels.insert(label.trimmingCharacters(in: .whitespaces))
            }
        }
        return labels
    }

    /// The metric family of a series name (`_bucket`, `_sum` and `_count` are a histogram's).
    static func family(of name: String) -> String {
        for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
            return String(name.dropLast(suffix.count))
        }
        return name
    }

    /// The series of a Prometheus text exposition: each sample's name, and the labels it carries.
    static func series(_ exposition: String) -> [String: Set<String>] {
        var series: [String: Set<String>] = [:]
        for line in exposition.split(separator: "\n") where !line.hasPrefix("#") && !line.isEmpty {
            let name = String(line.prefix { $0 != "{" && $0 != " " })
            var labels: Set<String> = []
            if let open = line.firstIndex(of: "{"), let close = line.lastIndex(of: "}") {
                for pair in line[line.index(after: open)..<close].split(separator: ",") {
                    labels.insert(String(pair.prefix { $0 != "=" }))
                }
            }
            series[name, default: []].formUnion(labels)
        }
        return series
    }

    @Test("every metric the dashboard plots exists on a running server's /metrics, and every one there is plotted")
    func metricsExist() async throws {
        let data = try Data(contentsOf: Self.root.appendingPathComponent("contrib/grafana/courier.json"))
        let dashboard = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let panels = try #require(dashboard["panels"] as? [[String: Any]])
        #expect(!panels.isEmpty)
        /// Each query, with what it names.
        var queries: [(title: String, expression: String)] = []
        var ids: Set<Int> = []
        for panel in panels {
            let id = try #require(panel["id"] as? Int)
            #expect(ids.insert(id).inserted, "panel ids are unique: \(id)")
            let title = panel["title"] as? String ?? ""
            let targets = try #require(panel["targets"] as? [[String: Any]], "\(title)")
            #expect(!targets.isEmpty, "\(title) plots something")
            for target in targets {
                let expression = try #require(target["expr"] as? String, "\(title)")
                #expect(!Self.names(in: expression).isEmpty, "\(title): \(expression) names a metric")
                queries.append((title, expression))
            }
        }
        let plotted = queries
        try await ServerFixture.with { fixture in
            let metrics = try await ExternalProgram.curl(["http://127.0.0.1:\(fixture.ports.http)/metrics"])
            let series = Self.series(metrics)
            let exported = Set(
                metrics.split(separator: "\n").filter { $0.hasPrefix("# TYPE courier_") }.map {
                    String($0.split(separator: " ")[2])
                }
            )
            #expect(exported.count >= 12, "\(metrics)")
            var families: Set<String> = []
            for (title, expression) in plotted {
                var labels: Set<String> = []
                for name in Self.names(in: expression) {
                    // The series itself, as exported: a histogram only by its _bucket, _sum or _count.
                    #expect(series[name] != nil, "\(title): \(name) is not a series of /metrics")
                    labels.formUnion(series[name] ?? [])
                    families.insert(Self.family(of: name))
                }
                let grouped = Self.groupedLabels(in: expression)
                #expect(grouped.isSubset(of: labels), "\(title): \(expression) groups by a label no series has")
            }
            #expect(
                exported.subtracting(families).isEmpty,
                "exported but not plotted: \(exported.subtracting(families))"
            )
        }
    }

    @Test("a query's series are read outside its strings; a histogram's suffixes name its family; by-labels are read")
    func queryParts() {
        #expect(
            Self.names(in: "histogram_quantile(0.99, sum by (le) (rate(courier_commit_duration_seconds_bucket[5m])))")
                == ["courier_commit_duration_seconds_bucket"]
        )
        #expect(Self.names(in: #"up{job="courier_pushes_total"}"#).isEmpty)
        #expect(Self.family(of: "courier_commit_duration_seconds_bucket") == "courier_commit_duration_seconds")
        #expect(Self.family(of: "courier_messages_in_total") == "courier_messages_in_total")
        #expect(Self.groupedLabels(in: "sum by (le, hop) (rate(x[1m]))") == ["le", "hop"])
        let exposition = """
            # TYPE courier_pushes_total counter
            courier_pushes_total{outcome="sent"} 3
            courier_commit_duration_seconds_bucket{le="0.001"} 1
            courier_connections_open 0
            """
        #expect(
            Self.series(exposition) == [
                "courier_pushes_total": ["outcome"], "courier_commit_duration_seconds_bucket": ["le"],
                "courier_connections_open": [],
            ]
        )
    }
}
