extension GroupCommit {
    /// The step/load loop of one group commit, the same for every database: a value the driver asks what to do
    /// next, loading the rows it names, until every request is applied and the batch is to be written.
    ///
    /// First come the waves: every request declares what it will read (``GroupCommit/declareNeeds(of:into:)``),
    /// and the driver loads all of it in one round, then again for what those rows lead to (a name to its
    /// conversation, a conversation to its members), at most ``maxWaves`` times. Then each request is applied in
    /// order (``GroupCommit/step(_:)``); a row no declaration foresaw is loaded as the rule asks for it, as many
    /// times as ``GroupCommit/maxRoundsPerRequest`` allows one request.
    ///
    /// ```swift
    /// var run = GroupCommit.Run(commit, requests)
    /// while case .load(let needs) = try run.next() { try load(needs, into: &run.commit) }
    /// write(run.commit); return run.result()
    /// ```
    package struct Run: Sendable {
        /// The batch's rules and rows: the driver loads into it.
        package var commit: GroupCommit
        private let requests: [WriteRequest]
        private var outcomes: [WriteOutcome] = []
        /// The requests that declared rows in the last wave (and every acknowledgement): the others are done
        /// declaring.
        private var declaring: [Int]
        private var waves = 0
        private var rounds = 0
        /// The rounds of loading the waves asked for.
        package private(set) var waveLoads = 0
        /// The rounds of loading the rules asked for: what the waves did not foresee.
        package private(set) var missLoads = 0

        /// The most waves of declarations before the requests are applied: a send's name, its conversation, its
        /// members and their names need three; an acknowledgement's device, its deliveries, their conversations and
        /// their senders four.
        package static let maxWaves = 5

        package init(_ commit: GroupCommit, _ requests: [WriteRequest]) {
            self.commit = commit
            self.requests = requests
            self.declaring = Array(requests.indices)
            self.outcomes.reserveCapacity(requests.count)
            // What the sends add to, sized once rather than grown a send at a time.
            let sends = requests.reduce(0) { count, request in
                if case .send = request { count + 1 } else { count }
            }
            self.commit.positioned.reserveCapacity(sends)
            self.commit.newMessageIndex.reserveCapacity(sends)
            self.commit.newMessages.reserveCapacity(sends)
        }

        /// What the driver does next.
        package enum Action: Sendable {
            /// Load these rows into ``commit``, then ask again.
            case load([BatchNeed])
            /// Every request is applied: write the batch.
            case write
        }

        /// What to do next.
        ///
        /// - Throws: ``CourierStoreError`` with code `storage-failed` when a request's rows could not be loaded in
        ///   ``GroupCommit/maxRoundsPerRequest`` rounds.
        package mutating func next() throws -> Action {
            while self.waves < Self.maxWaves {
                self.waves += 1
                var needs = NeedList()
                // An acknowledgement stays: the ones after it of the same device start where it leaves the device.
                // (A loop rather than `removeAll(where:)`, whose closure, reading the commit while the list changes,
                // copied the whole commit and each request: 1.5 % of the server's samples.)
                var still: [Int] = []
                still.reserveCapacity(self.declaring.count)
                for index in self.declaring {
                    if self.commit.declareNeeds(of: self.requests[index], into: &needs) {
                        still.append(index)
                    } else if case .ack = self.requests[index] {
                        still.append(index)
                    }
                }
                self.declaring = still
                guard needs.needs.isEmpty else {
                    self.waveLoads += 1
                    return .load(needs.needs)
                }
                self.waves = Self.maxWaves
            }
            while self.outcomes.count < self.requests.count {
                switch try self.commit.step(self.requests[self.outcomes.count]) {
                case .applied(let outcome):
                    self.outcomes.append(outcome)
                    self.rounds = 0
                case .needs(let needs):
                    self.rounds += 1
                    guard self.rounds <= GroupCommit.maxRoundsPerRequest else {
                        throw CourierStoreError(.storageFailed, "a write's rows could not be read: \(needs)")
                    }
                    self.missLoads += 1
                    return .load(needs)
                }
            }
            return .write
        }

        /// The batch's result, once the driver has written it.
        /// - Parameter queuesSearch: See ``GroupCommit/result(_:queuesSearch:)``.
        package func result(queuesSearch: Bool = false) -> AppliedBatch {
            var batch = self.commit.result(self.outcomes, queuesSearch: queuesSearch)
            batch.loads = AppliedBatch.Loads(waves: self.waveLoads, misses: self.missLoads)
            return batch
        }
    }
}
