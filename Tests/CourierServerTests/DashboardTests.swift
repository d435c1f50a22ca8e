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

    /// The metric families a query names (`_bucket`, `_sum` and `_count` are a histogram's).
    static func families(in expression: String) -> Set<String> {
        Set(
            expression.matches(of: /courier_[a-z_]+/).map { match in
                var name = String(match.output)
                for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
                    name.removeLast(suffix.count)
                }
                return name
            }
        )
    }

    @Test("every metric the dashboard plots exists on a running server's /metrics, and every one there is plotted")
    func metricsExist() async throws {
        let data = try Data(contentsOf: Self.root.appendingPathComponent("contrib/grafana/courier.json"))
        let dashboard = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let panels = try #require(dashboard["panels"] as? [[String: Any]])
        #expect(!panels.isEmpty)
        var plotted: Set<String> = []
        var ids: Set<Int> = []
        for panel in panels {
            let id = try #require(panel["id"] as? Int)
            #expect(ids.insert(id).inserted, "panel ids are unique: \(id)")
            let title = panel["title"] as? String ?? ""
            let targets = try #require(panel["targets"] as? [[String: Any]], "\(title)")
            #expect(!targets.isEmpty, "\(title) plots something")
            for target in targets {
                let expression = try #require(target["expr"] as? String, "\(title)")
                let named = Self.families(in: expression)
                #expect(!named.isEmpty, "\(title): \(expression) names a metric")
                plotted.formUnion(named)
            }
        }
        let named = plotted
        try await ServerFixture.with { fixture in
            let metrics = try await ExternalProgram.curl(["http://127.0.0.1:\(fixture.ports.http)/metrics"])
            let exported = Set(
                metrics.split(separator: "\n").filter { $0.hasPrefix("# TYPE courier_") }.map {
                    String($0.split(separator: " ")[2])
                }
            )
            #expect(exported.count >= 12, "\(metrics)")
            #expect(named.subtracting(exported).isEmpty, "plotted but not exported: \(named.subtracting(exported))")
            #expect(exported.subtracting(named).isEmpty, "exported but not plotted: \(exported.subtracting(named))")
        }
    }

    @Test("a histogram's suffixes name its family; other names are left whole")
    func familyNames() {
        #expect(
            Self.families(
                in: "histogram_quantile(0.99, sum by (le) (rate(courier_commit_duration_seconds_bucket[5m])))"
            )
                == ["courier_commit_duration_seconds"]
        )
        #expect(
            Self.families(in: "rate(courier_messages_in_total[1m]) / courier_connections_open") == [
                "courier_messages_in_total", "courier_connections_open",
            ]
        )
    }
}
