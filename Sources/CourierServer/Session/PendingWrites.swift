import CourierStore

/// A connection's writes in the group commit, as a value: which go in, in what order, and which come back answered.
///
/// Writes go to the group commit as they arrive and are answered in the order the requests came, whatever order
/// their outcomes come back in. Acknowledgements are merged: while one of the connection's acknowledgements is in
/// the group commit, those that come meanwhile wait as one, the latest (they are cumulative), and go when the last
/// of the connection's acknowledgements in the commit comes back. One acknowledgement per batch and connection says everything and makes one set of delivery receipts
/// instead of one per acknowledgement. A waiting acknowledgement goes before any other write of the connection, so
/// receipts keep their order (delivered up to a message before read up to it), and at the close, so that nothing
/// acknowledged is forgotten.
///
/// Everything here is the handler's to carry out; nothing here touches a channel or the store.
struct PendingWrites {
    /// A write sent to the group commit, waiting for its outcome.
    struct Pending {
        var serial: UInt64
        var request: WriteRequest
        var requestID: UInt64
        var answers: Bool
        /// The deliveries reserved from the sender's fan-out budget (0 for other writes).
        var reservedFanout: Int
        /// Whether the request is the client's own (counted by the state machine and answered if it asks); a merged
        /// acknowledgement is not.
        var isRequest: Bool
        var result: Result<WriteOutcome, any Error>?
    }

    /// A write to send to the group commit.
    struct Admitted {
        var request: WriteRequest
        /// The client's request itself, rather than an acknowledgement that waited to be merged and goes first.
        var isRequest: Bool
    }

    private var pending = SessionQueue<Pending>()
    private var nextSerial: UInt64 = 0
    /// The connection's acknowledgements in the group commit.
    private var acksInCommit = 0
    /// The latest acknowledgement that came while one was in the commit.
    private var mergedAck: WriteRequest?

    /// Whether no write waits for its outcome.
    var isEmpty: Bool { self.pending.isEmpty }

    /// A write request of the client, in the order requests come: the writes to send to the group commit now,
    /// first first. Empty when the request is an acknowledgement merged into the next (it is not a write of its own:
    /// the caller counts it finished at once).
    mutating func admit(_ request: WriteRequest) -> [Admitted] {
        guard case .ack(_, _, let cursor) = request else {
            // Another write: a waiting acknowledgement goes first.
            let waiting = self.takeMergedAck().map { Admitted(request: $0, isRequest: false) }
            return (waiting.map { [$0] } ?? []) + [Admitted(request: request, isRequest: true)]
        }
        guard self.acksInCommit > 0 else {
            self.acksInCommit += 1
            return [Admitted(request: request, isRequest: true)]
        }
        if case .ack(_, _, let merged)? = self.mergedAck, merged >= cursor {
            // An older cursor than the one waiting says nothing more.
        } else {
            self.mergedAck = request
        }
        return []
    }

    /// The acknowledgement waiting to be merged, taken out (to go to the group commit now: the connection closes).
    mutating func takeMergedAck() -> WriteRequest? {
        guard let merged = self.mergedAck else { return nil }
        self.mergedAck = nil
        self.acksInCommit += 1
        return merged
    }

    /// Records a write sent to the group commit.
    ///
    /// - Returns: Its serial, for ``record(_:)``.
    mutating func append(
        _ request: WriteRequest,
        requestID: UInt64,
        answers: Bool,
        reservedFanout: Int,
        isRequest: Bool
    ) -> UInt64 {
        let serial = self.nextSerial
        self.nextSerial += 1
        self.pending.append(
            Pending(
                serial: serial,
                request: request,
                requestID: requestID,
                answers: answers,
                reservedFanout: reservedFanout,
                isRequest: isRequest
            )
        )
        return serial
    }

    /// Records outcomes that came back, in any order.
    mutating func record(_ outcomes: [(serial: UInt64, result: Result<WriteOutcome, any Error>)]) {
        for (serial, result) in outcomes {
            guard let first = self.pending.first, serial >= first.serial, serial - first.serial < self.pending.count
            else { continue }
            self.pending[Int(serial - first.serial)].result = result
        }
    }

    /// The first write if its outcome has come back (the writes after it wait for it), taken out; with it, if it
    /// was the last of the connection's acknowledgements in the commit, the merged one that goes to the group commit
    /// now (also after the close: nothing acknowledged is forgotten).
    mutating func popAnswered() -> (write: Pending, result: Result<WriteOutcome, any Error>, next: WriteRequest?)? {
        guard let first = self.pending.first, let result = first.result else { return nil }
        _ = self.pending.popFirst()
        var next: WriteRequest?
        if case .ack = first.request {
            self.acksInCommit -= 1
            if self.acksInCommit == 0 { next = self.takeMergedAck() }
        }
        return (first, result, next)
    }
}
