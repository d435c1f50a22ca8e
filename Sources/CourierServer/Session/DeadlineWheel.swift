import NIOCore

/// A hashed timing wheel: deadlines of many sessions, kept in slots of `resolution`, so that checking them costs
/// work per due entry rather than per session.
///
/// A value type with no clock of its own: its owner inserts deadlines and advances it to the present. An entry is
/// returned once, by the first ``advance(to:)`` whose instant is at or after its deadline rounded up to the next
/// slot; never before its deadline, and at most one `resolution` after it when the wheel is advanced that often.
/// Entries far ahead wait in their slot over whole turns of the wheel.
struct DeadlineWheel {
    struct Entry {
        var key: Int
        /// The slot tick it fires at, counted from `origin`.
        var tick: Int64
    }

    let resolution: Duration
    let origin: ContinuousClock.Instant
    private var slots: [[Entry]]
    /// The last tick whose entries were returned.
    private(set) var currentTick: Int64 = 0
    /// Entries in the wheel.
    private(set) var count = 0

    /// - Parameters:
    ///   - resolution: The width of a slot: how late at most an entry is returned.
    ///   - slots: How many slots one turn has; entries further than a turn ahead stay for more turns.
    ///   - origin: The instant tick 0 stands for.
    init(resolution: Duration, slots: Int = 512, origin: ContinuousClock.Instant) {
        precondition(resolution > .zero && slots > 0)
        self.resolution = resolution
        self.origin = origin
        self.slots = Array(repeating: [], count: slots)
    }

    /// The tick of an instant: rounded up for a deadline (fire no earlier), down for the present.
    private func tick(of instant: ContinuousClock.Instant, roundingUp: Bool) -> Int64 {
        let elapsed = instant - self.origin
        guard elapsed > .zero else { return 0 }
        let (whole, fraction) = elapsed.wholeTicks(of: self.resolution)
        return roundingUp && fraction ? whole + 1 : whole
    }

    /// Adds a deadline for `key`. A deadline already passed is returned by the next advance.
    mutating func insert(key: Int, at deadline: ContinuousClock.Instant) {
        let tick = max(self.currentTick + 1, self.tick(of: deadline, roundingUp: true))
        self.slots[Int(tick % Int64(self.slots.count))].append(Entry(key: key, tick: tick))
        self.count += 1
    }

    /// Moves the wheel to `now`.
    ///
    /// - Returns: The keys whose deadlines are due, earliest slot first.
    mutating func advance(to now: ContinuousClock.Instant) -> [Int] {
        let target = self.tick(of: now, roundingUp: false)
        guard target > self.currentTick else { return [] }
        var due: [Int] = []
        let width = Int64(self.slots.count)
        if target - self.currentTick >= width {
            // A whole turn or more: every slot once.
            for index in self.slots.indices { self.take(upTo: target, from: index, into: &due) }
        } else {
            for tick in (self.currentTick + 1)...target {
                self.take(upTo: target, from: Int(tick % width), into: &due)
            }
        }
        self.currentTick = target
        return due
    }

    private mutating func take(upTo target: Int64, from index: Int, into due: inout [Int]) {
        guard !self.slots[index].isEmpty else { return }
        var kept: [Entry] = []
        for entry in self.slots[index] {
            if entry.tick <= target { due.append(entry.key) } else { kept.append(entry) }
        }
        self.count -= self.slots[index].count - kept.count
        self.slots[index] = kept
    }
}

extension Duration {
    /// How many whole `unit`s fit in this duration, and whether anything is left over.
    fileprivate func wholeTicks(of unit: Duration) -> (Int64, Bool) {
        // Nanoseconds are plenty for slots of milliseconds, and a span of centuries fits an Int64 of them.
        func nanoseconds(_ duration: Duration) -> Int64 {
            let (seconds, attoseconds) = duration.components
            let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
            return overflow ? .max : scaled.addingReportingOverflow(attoseconds / 1_000_000_000).partialValue
        }
        let value = nanoseconds(self)
        let step = max(1, nanoseconds(unit))
        return (value / step, value % step != 0)
    }
}

/// The deadlines of one event loop's sessions: one ``DeadlineWheel`` advanced by one repeated task on the loop,
/// which runs only while some session is registered. Used on its loop only.
final class LoopDeadlines {
    private let loop: any EventLoop
    private let clock: SessionClock
    private var wheel: DeadlineWheel
    private var targets: [Int: (ContinuousClock.Instant) -> Void] = [:]
    private var nextKey = 1
    private var ticker: RepeatedTask?

    init(loop: any EventLoop, resolution: Duration, clock: SessionClock) {
        self.loop = loop
        self.clock = clock
        self.wheel = DeadlineWheel(resolution: resolution, origin: clock.now)
    }

    /// Registers a session: `fire` is called on the loop when a deadline armed for the returned key is due.
    func register(_ fire: @escaping (ContinuousClock.Instant) -> Void) -> Int {
        self.loop.preconditionInEventLoop()
        defer { self.nextKey += 1 }
        self.targets[self.nextKey] = fire
        if self.ticker == nil {
            let resolution = TimeAmount(self.wheel.resolution)
            let bound = NIOLoopBound(self, eventLoop: self.loop)
            self.ticker = self.loop.scheduleRepeatedTask(initialDelay: resolution, delay: resolution) { _ in
                bound.value.advance()
            }
        }
        return self.nextKey
    }

    /// Arms a deadline for a registered session. Entries are never taken out: one that fires for a deadline that
    /// has moved is told so by its session asking its own deadline again.
    func arm(_ key: Int, at deadline: ContinuousClock.Instant) {
        self.wheel.insert(key: key, at: deadline)
    }

    /// The session is gone: nothing fires for it any more.
    func unregister(_ key: Int) {
        self.targets[key] = nil
        if self.targets.isEmpty {
            self.ticker?.cancel()
            self.ticker = nil
            let resolution = self.wheel.resolution
            // Stale entries go with the old wheel.
            self.wheel = DeadlineWheel(resolution: resolution, origin: self.clock.now)
        }
    }

    private func advance() {
        let now = self.clock.now
        for key in self.wheel.advance(to: now) {
            self.targets[key]?(now)
        }
    }
}
