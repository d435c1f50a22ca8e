import CourierStore
import Prometheus
import Synchronization

/// The figures `/metrics` shows, each with its `# HELP` line: instruments of the server's own Prometheus registry
/// (no global bootstrap, so several servers can run in one process, as the tests do).
final class ServerMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()
    let connectionsOpen: Gauge
    let connectionsTotal: Counter
    let messagesIn: Counter
    /// Acknowledgements (`courier_acks_total`), by what they acknowledge (`of`): `send`, a client's message committed
    /// (its answer); `events`, a client saying which events it has (each ack write, merged ones once).
    let acksOfSends: Counter
    let acksOfEvents: Counter
    let eventsOut: Counter
    /// Events handed to a connection as committed rather than read back from the store.
    let eventsHanded: Counter
    let commitDuration: DurationHistogram
    let commitBatchSize: ValueHistogram
    let commitFailures: Counter
    let refusals: Counter
    /// Media bytes taken from clients (written to the blob store) and sent to them (fetches, compat packets, HTTP).
    let mediaBytesIn: Counter
    let mediaBytesOut: Counter
    /// Password checks that ran (each costs a full hash), and logins refused with `throttled` before any check.
    let passwordChecks: Counter
    let loginsThrottled: Counter
    /// Connections that had sent nothing yet, closed to make room for a new one on a full server.
    let connectionsClosedForRoom: Counter
    /// A delivery's hops between nodes: the news of a commit sent (`publish`), received (`notify`), and its events
    /// read and handed to this node's connections (`wake`).
    let clusterHops: [ClusterHop: DurationHistogram]
    /// Writes this node forwarded to the owners of their conversations, and writes other nodes forwarded to it.
    let forwardsSent: Counter
    let forwardsTaken: Counter
    /// The live nodes this node routes conversations' writes among, itself included (0: it forwards nothing).
    let clusterNodes: Gauge
    /// Pushes to subscriptions by outcome (``PushSender/Outcome``).
    let pushes: [String: Counter]
    /// The HTTP API's long polls waiting now (`GET /api/v1/updates`).
    let apiPolls: Gauge
    /// From when a connection is told of an event (on the node that committed it, just after the commit) until it is
    /// written to the connection: the oldest such event of each write. What a connection catches up on as it logs
    /// in is not counted.
    let deliveryLatency: DurationHistogram
    /// From a message's commit until this node took its pushes from the outbox (first tries only): how far behind
    /// the push queue runs.
    let pushWait: DurationHistogram
    /// Messages' pushes this node has taken from the outbox and is sending now.
    let pushJobsSending: Gauge
    /// The webhooks this node holds, by state (``WebhookState``).
    let webhooks: [WebhookState: Gauge]
    private let open = Atomic<Int>(0)
    private let polls = Atomic<Int>(0)

    /// What a webhook held by this node is doing, as the `state` label of ``webhooks`` names it: `all` counts them
    /// all; `waiting` those with updates to send that wait for a round (`max-concurrent-webhooks` are running, or a
    /// pause after a failed round); `sending` those whose round runs; `failing` those whose last request failed.
    enum WebhookState: String, CaseIterable, Sendable {
        case all, waiting, sending, failing
    }

    /// The hops ``clusterHops`` times, as its `hop` label names them.
    enum ClusterHop: String, CaseIterable, Sendable {
        case publish, notify, wake
    }

    init() {
        let registry = self.registry
        self.connectionsOpen = registry.makeGauge(
            descriptor: Self.name(
                "courier_connections_open",
                "Connections open now, the native and compat ports together."
            )
        )
        self.connectionsTotal = registry.makeCounter(
            descriptor: Self.name(
                "courier_connections_total",
                "Connections accepted since the server started, native and compat."
            )
        )
        self.forwardsSent = registry.makeCounter(
            descriptor: Self.name(
                "courier_forwards_sent_total",
                "Writes this node took from its clients and forwarded to the node that owns their conversation."
            )
        )
        self.forwardsTaken = registry.makeCounter(
            descriptor: Self.name(
                "courier_forwards_taken_total",
                "Writes other nodes forwarded to this node, the owner of their conversation."
            )
        )
        self.clusterNodes = registry.makeGauge(
            descriptor: Self.name(
                "courier_cluster_nodes",
                "Live nodes with a forward port that this node routes conversations' writes among, itself included."
            )
        )
        self.messagesIn = registry.makeCounter(
            descriptor: Self.name(
                "courier_messages_in_total",
                "Messages clients sent (each send request, before its commit)."
            )
        )
        let acks = Self.name(
            "courier_acks_total",
            "Acknowledgements: of=send, clients' messages committed; of=events, clients' acks of the events they have."
        )
        self.acksOfSends = registry.makeCounter(descriptor: acks, labels: [("of", "send")])
        self.acksOfEvents = registry.makeCounter(descriptor: acks, labels: [("of", "events")])
        self.eventsOut = registry.makeCounter(
            descriptor: Self.name("courier_events_out_total", "Events of users' logs written to their connections.")
        )
        self.eventsHanded = registry.makeCounter(
            descriptor: Self.name(
                "courier_events_handed_total",
                "Events sent as the group commit wrote them, without reading them back from the store."
            )
        )
        self.commitDuration = registry.makeDurationHistogram(
            descriptor: Self.name(
                "courier_commit_duration_seconds",
                "How long each group commit took, its fsync included."
            ),
            buckets: [
                .microseconds(250), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10),
                .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .seconds(1),
            ]
        )
        self.commitBatchSize = registry.makeValueHistogram(
            descriptor: Self.name(
                "courier_commit_batch_size",
                "Writes in each group commit (one fsync acknowledges them all)."
            ),
            buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096]
        )
        self.commitFailures = registry.makeCounter(
            descriptor: Self.name(
                "courier_commit_failures_total",
                "Group commits that failed (their writes answered storage-failed)."
            )
        )
        self.refusals = registry.makeCounter(
            descriptor: Self.name(
                "courier_refusals_total",
                "Requests and connections refused with an error code (limits, bad input, failed logins)."
            )
        )
        self.mediaBytesIn = registry.makeCounter(
            descriptor: Self.name(
                "courier_media_bytes_in_total",
                "Media bytes taken from clients and written to the blob store."
            )
        )
        self.mediaBytesOut = registry.makeCounter(
            descriptor: Self.name(
                "courier_media_bytes_out_total",
                "Media bytes sent to clients: fetches, compat packets and HTTP."
            )
        )
        self.passwordChecks = registry.makeCounter(
            descriptor: Self.name("courier_password_checks_total", "Password checks that ran, each a full scrypt hash.")
        )
        self.loginsThrottled = registry.makeCounter(
            descriptor: Self.name(
                "courier_logins_throttled_total",
                "Logins refused with throttled before any password was checked."
            )
        )
        let hopHelp = """
            A delivery's hops between nodes: publish (the commit's news until this node sent it), notify (another \
            node's send until this node received it, by the two wall clocks), wake (received until this node's \
            connections have the events).
            """
        self.clusterHops = Dictionary(
            uniqueKeysWithValues: ClusterHop.allCases.map { hop in
                (
                    hop,
                    registry.makeDurationHistogram(
                        descriptor: Self.name("courier_cluster_hop_seconds", hopHelp),
                        labels: [("hop", hop.rawValue)],
                        buckets: [
                            .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1),
                            .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
                            .milliseconds(50), .milliseconds(100), .milliseconds(250), .seconds(1),
                        ]
                    )
                )
            }
        )
        self.pushes = Dictionary(
            uniqueKeysWithValues: ["sent", "gone", "retry", "dropped"].map { outcome in
                (
                    outcome,
                    registry.makeCounter(
                        descriptor: Self.name(
                            "courier_pushes_total",
                            "Web Push requests by outcome: sent, gone (404/410: the subscription dropped), retry "
                                + "(429, 5xx, a failed connection), dropped (refused otherwise, or not sendable)."
                        ),
                        labels: [("outcome", outcome)]
                    )
                )
            }
        )
        self.apiPolls = registry.makeGauge(
            descriptor: Self.name(
                "courier_api_polls_waiting",
                "Long polls of the HTTP API (GET /api/v1/updates) waiting for an update now."
            )
        )
        let latencyBuckets: [Duration] = [
            .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2),
            .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
            .milliseconds(250), .seconds(1), .seconds(5),
        ]
        self.deliveryLatency = registry.makeDurationHistogram(
            descriptor: Self.name(
                "courier_delivery_latency_seconds",
                "From a commit until its events are written to a connection (the oldest of each write; the sync at "
                    + "login not counted)."
            ),
            buckets: latencyBuckets
        )
        self.pushWait = registry.makeDurationHistogram(
            descriptor: Self.name(
                "courier_push_wait_seconds",
                "From a message's commit until a node took its pushes from the outbox (first tries only)."
            ),
            buckets: latencyBuckets + [.seconds(30), .seconds(120)]
        )
        self.pushJobsSending = registry.makeGauge(
            descriptor: Self.name(
                "courier_push_jobs_sending",
                "Messages' pushes this node has taken from the outbox and is sending now."
            )
        )
        self.webhooks = Dictionary(
            uniqueKeysWithValues: WebhookState.allCases.map { state in
                (
                    state,
                    registry.makeGauge(
                        descriptor: Self.name(
                            "courier_webhooks_held",
                            "Webhooks this node holds: all, waiting (updates to send, no round yet), sending "
                                + "(a round runs), failing (the last request failed)."
                        ),
                        labels: [("state", state.rawValue)]
                    )
                )
            }
        )
        self.connectionsClosedForRoom = registry.makeCounter(
            descriptor: Self.name(
                "courier_connections_closed_for_room_total",
                "Connections that had sent nothing yet, closed to make room for a new one on a full server."
            )
        )
    }

    /// A metric's name (`courier_NAME_UNIT`) with its help text, as the registry takes them.
    private static func name(_ full: String, _ help: String) -> MetricNameDescriptor {
        var parts = full.split(separator: "_").map(String.init)
        let namespace = parts.removeFirst()
        let unit = parts.removeLast()
        return MetricNameDescriptor(
            namespace: namespace,
            metricName: parts.joined(separator: "_"),
            unitName: unit,
            helpText: help
        )
    }

    func connectionOpened() {
        let (_, now) = self.open.add(1, ordering: .relaxed)
        self.connectionsTotal.increment()
        self.connectionsOpen.set(to: Double(now))
    }

    func connectionClosed() {
        let (_, now) = self.open.subtract(1, ordering: .relaxed)
        self.connectionsOpen.set(to: Double(now))
    }

    /// A long poll began or stopped waiting.
    func polling(_ change: Int) {
        let (_, now) = self.polls.add(change, ordering: .relaxed)
        self.apiPolls.set(to: Double(now))
    }

    /// Connections open now.
    var openConnections: Int { self.open.load(ordering: .relaxed) }

    func committed(_ report: CommitQueue.BatchReport) {
        self.commitDuration.record(report.duration)
        self.commitBatchSize.record(Double(report.requests))
        if report.failed { self.commitFailures.increment() }
    }

    func pushed(_ outcome: PushSender.Outcome) {
        let name =
            switch outcome {
            case .sent: "sent"
            case .gone: "gone"
            case .retry: "retry"
            case .dropped: "dropped"
            }
        self.pushes[name]?.increment()
    }

    /// The Prometheus text exposition of every figure.
    func exposition() -> String {
        self.registry.emitToString()
    }
}

extension Counter {
    func increment(by amount: Int) {
        self.increment(by: Int64(amount))
    }
}
