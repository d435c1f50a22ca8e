import CoreMetrics
import CourierStore
import Synchronization

/// The figures `/metrics` shows, through swift-metrics (the server bootstraps a Prometheus registry).
final class ServerMetrics: Sendable {
    let connectionsOpen = Gauge(label: "courier_connections_open")
    let connectionsTotal = Counter(label: "courier_connections_total")
    let messagesIn = Counter(label: "courier_messages_in_total")
    let eventsOut = Counter(label: "courier_events_out_total")
    let bytesOut = Counter(label: "courier_bytes_out_total")
    let bytesIn = Counter(label: "courier_bytes_in_total")
    let commitDuration = Timer(label: "courier_commit_duration_seconds")
    let commitBatchSize = Recorder(label: "courier_commit_batch_size")
    let commitFailures = Counter(label: "courier_commit_failures_total")
    let refusals = Counter(label: "courier_refusals_total")
    private let open = Atomic<Int>(0)

    func connectionOpened() {
        let (_, now) = self.open.add(1, ordering: .relaxed)
        self.connectionsTotal.increment()
        self.connectionsOpen.record(now)
    }

    func connectionClosed() {
        let (_, now) = self.open.subtract(1, ordering: .relaxed)
        self.connectionsOpen.record(now)
    }

    func committed(_ report: CommitQueue.BatchReport) {
        self.commitDuration.recordNanoseconds(
            report.duration.components.seconds * 1_000_000_000 + report.duration.components.attoseconds / 1_000_000_000
        )
        self.commitBatchSize.record(report.requests)
        if report.failed { self.commitFailures.increment() }
    }
}
