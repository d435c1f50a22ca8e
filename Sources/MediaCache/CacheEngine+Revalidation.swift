import Foundation
import NIOHTTP1

/// Revalidation: a cached resource whose freshness has run out (or whose bytes are someone's) is confirmed with its
/// origin before it is served, with a conditional request for its first byte.
extension CacheEngine {
    /// What a revalidation found.
    enum Revalidation: Sendable {
        /// The origin answered for the bytes (304, or 200/206, the record updated or its bytes dropped if changed).
        case confirmed
        /// The origin refused (401, 403, 404, …).
        case refused(Int)
        /// The origin could not be reached, or its answer could not be used.
        case unreachable(String)
    }

    /// Whether a resource's bytes are someone's: a request with credentials cached them, or the origin marked them
    /// `private`. They are confirmed with the origin, with the request's own credentials, at every request.
    static func isPrivate(_ key: String, _ record: ResourceRecord) -> Bool {
        Credentials.isPrivate(key: key) || record.isPrivate == true
    }

    func needsRevalidation(_ key: String, _ record: ResourceRecord) -> Bool {
        if Self.isPrivate(key, record) { return true }
        let now = Date()
        if let freshUntil = record.freshUntil, now < freshUntil { return false }
        let last = [record.lastValidated, self.entries[key]?.lastAttempt].compactMap { $0 }.max()
        guard let last else { return true }
        return now.timeIntervalSince(last) >= self.configuration.revalidationInterval
    }

    func revalidate(key: String, url: URL, forward: HTTPHeaders) async -> Revalidation {
        // A private resource is confirmed with each request's own credentials: never by another request's check.
        let shared = !Credentials.isPrivate(key: key)
        if shared, let running = self.entries[key]?.revalidation {
            return await running.value
        }
        guard let record = self.entries[key]?.state.record else { return .confirmed }
        // A private resource's record holds its URL without credentials: the request's URL carries them.
        let target = Self.isPrivate(key, record) ? url : (URL(string: record.url ?? "") ?? url)
        // Unstructured so that the requests sharing it wait for its end, whichever of them asked first; it ends with
        // the origin's answer (bounded by the origin client's timeouts).
        let task = Task { await self.runRevalidation(key: key, record: record, url: target, forward: forward) }
        if shared { self.entries[key]?.revalidation = task }
        let outcome = await task.value
        if shared { self.entries[key]?.revalidation = nil }
        return outcome
    }

    private nonisolated func runRevalidation(
        key: String,
        record: ResourceRecord,
        url: URL,
        forward: HTTPHeaders
    ) async -> Revalidation {
        var headers = Self.forwarded(forward)
        headers.add(name: "Range", value: "bytes=0-0")
        if let etag = record.etag { headers.add(name: "If-None-Match", value: etag) }
        if let lastModified = record.lastModified { headers.add(name: "If-Modified-Since", value: lastModified) }
        do {
            let response = try await self.origin.request(url, headers: headers)
            // Only the head matters; an origin that ignores the range would send it all.
            var iterator = response.body.makeAsyncIterator()
            _ = try? await iterator.next()
            return await self.revalidated(key: key, record: record, response: response)
        } catch {
            await self.revalidationFailed(key: key, Self.words(error))
            return .unreachable(Self.words(error))
        }
    }

    /// An error in words: a media cache error's message (its code aside), else the error's own description.
    static func words(_ error: any Error) -> String {
        (error as? MediaCacheError)?.message ?? "\(error)"
    }

    private func revalidationFailed(key: String, _ reason: String) {
        self.logger.info(
            "revalidation failed; public bytes are served as they are",
            metadata: ["key": "\(key)", "error": "\(reason)"]
        )
        self.entries[key]?.lastAttempt = Date()
    }

    private func revalidated(key: String, record: ResourceRecord, response: OriginResponse) -> Revalidation {
        guard var state = self.entries[key]?.state, state.generation == record.generation else { return .confirmed }
        let now = Date()
        switch OriginAnswer(status: Int(response.status), headers: response.headers, received: now) {
        case .notModified(let freshness):
            state.update { record in
                record.freshUntil = freshness.freshUntil
                record.lastValidated = now
            }
        case .body(let head):
            let fill = head.fill(storedURL: self.storedURL(response.url), now: now)
            if head.differs(from: state.record) {
                self.logger.info("origin changed; dropping cached bytes", metadata: ["key": "\(key)"])
                self.dropped(state.startGeneration(fill))
                state.headSeen = head.total != nil
            } else {
                state.update(fill)
            }
        case .refused(let status) where status == 404 || status == 410:
            self.dropped(state.startGeneration { _ in })
            state.headSeen = false
            self.entries[key]?.state = state
            self.scheduleCommit(key)
            self.wake(key)
            return .refused(status)
        case .refused(let status):
            self.entries[key]?.lastAttempt = now
            return .refused(status)
        case .unsatisfiable:
            self.entries[key]?.lastAttempt = now
            return .refused(416)
        case .unusable(let reason):
            // Nothing was confirmed: served as they are (within the revalidation interval), unless they are
            // someone's.
            self.revalidationFailed(key: key, reason)
            return .unreachable(reason)
        }
        self.entries[key]?.lastAttempt = nil
        self.entries[key]?.state = state
        self.scheduleCommit(key)
        self.wake(key)
        return .confirmed
    }
}
