import CoreMetrics
import CourierStore
import Prometheus
import Synchronization

/// The figures `/metrics` shows: swift-metrics instruments on the server's own Prometheus registry (no global
/// bootstrap, so several servers can run in one process, as the tests do).
final class ServerMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()
    let connectionsOpen: CoreMetrics.Gauge
    let connectionsTotal: CoreMetrics.Counter
    let messagesIn: CoreMetrics.Counter
    let eventsOut: CoreMetrics.Counter
    let commitDuration: CoreMetrics.Timer
    let commitBatchSize: CoreMetrics.Recorder
    let commitFailures: CoreMetrics.Counter
    let refusals: CoreMetrics.Counter
    /// Media bytes taken from clients (written to the blob store) and sent to them (fetches, compat packets, HTTP).
    let mediaBytesIn: CoreMetrics.Counter
    let mediaBytesOut: CoreMetrics.Counter
    /// Password checks that ran (each costs a full hash), and logins refused with `throttled` before any check.
    let passwordChecks: CoreMetrics.Counter
    let loginsThrottled: CoreMetrics.Counter
    private let open = Atomic<Int>(0)

    init() {
        var factory = PrometheusMetricsFactory(registry: self.registry)
        factory.durationHistogramBuckets["courier_commit_duration_seconds"] = [
            .microseconds(250), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10),
            .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .seconds(1),
        ]
        factory.valueHistogramBuckets["courier_commit_batch_size"] = [
            1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096,
        ]
        self.connectionsOpen = CoreMetrics.Gauge(label: "courier_connections_open", factory: factory)
        self.connectionsTotal = CoreMetrics.Counter(label: "courier_connections_total", factory: factory)
        self.messagesIn = CoreMetrics.Counter(label: "courier_messages_in_total", factory: factory)
        self.eventsOut = CoreMetrics.Counter(label: "courier_events_out_total", factory: factory)
        self.commitDuration = CoreMetrics.Timer(label: "courier_commit_duration_seconds", factory: factory)
        self.commitBatchSize = CoreMetrics.Recorder(
            label: "courier_commit_batch_size",
            aggregate: true,
            factory: factory
        )
        self.commitFailures = CoreMetrics.Counter(label: "courier_commit_failures_total", factory: factory)
        self.refusals = CoreMetrics.Counter(label: "courier_refusals_total", factory: factory)
        self.mediaBytesIn = CoreMetrics.Counter(label: "courier_media_bytes_in_total", factory: factory)
        self.mediaBytesOut = CoreMetrics.Counter(label: "courier_media_bytes_out_total", factory: factory)
        self.passwordChecks = CoreMetrics.Counter(label: "courier_password_checks_total", factory: factory)
        self.loginsThrottled = CoreMetrics.Counter(label: "courier_logins_throttled_total", factory: factory)
    }

    func connectionOpened() {
        let (_, now) = self.open.add(1, ordering: .relaxed)
        self.connectionsTotal.increment()
        self.connectionsOpen.record(now)
    }

    func connectionClosed() {
        let (_, now) = self.open.subtract(1, ordering: .relaxed)
        self.connectionsOpen.record(now)
    }

    /// Connections open now.
    var openConnections: Int { self.open.load(ordering: .relaxed) }

    func committed(_ report: CommitQueue.BatchReport) {
        self.commitDuration.recordNanoseconds(
            report.duration.components.seconds * 1_000_000_000 + report.duration.components.attoseconds / 1_000_000_000
        )
        self.commitBatchSize.record(report.requests)
        if report.failed { self.commitFailures.increment() }
    }

    /// The Prometheus text exposition of every figure.
    func exposition() -> String {
        self.registry.emitToString()
    }
}
