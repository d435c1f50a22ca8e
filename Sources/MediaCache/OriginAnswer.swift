import CourierVocabulary
import Foundation
import NIOHTTP1

/// What an origin's answer says of a resource, read one way for a fetch and for a revalidation: the one place that
/// decides what a 200, a 206, a 304 or a 416 means.
enum OriginAnswer {
    /// A 200 or a 206: a body, and what the head says of the resource.
    case body(Head)
    /// A 304: the cached bytes are still the origin's; the head may refresh their freshness.
    case notModified(Freshness)
    /// A 416: the range asked for starts past the end; the resource's length when the answer gives it.
    case unsatisfiable(total: Int64?)
    /// Any other status: the origin refuses (401, 403, 404, 410, a 5xx, …).
    case refused(status: Int)
    /// An answer no byte of which can be placed: a 206 without a usable `Content-Range`. For a fetch it is a
    /// failure (where would its bytes go?); for a revalidation the origin confirmed nothing.
    case unusable(String)

    /// What a 200 or 206 says.
    struct Head {
        /// Where the body's first byte is in the resource (0 for a 200).
        var start: Int64
        /// The resource's length, when the answer gives it (a 206's `Content-Range` total, a 200's length).
        var total: Int64?
        /// Whether the origin answered the range asked for (a 206): stopping a fetch of it costs nothing.
        var rangesHonoured: Bool
        var etag: String?
        var lastModified: String?
        var contentType: String?
        /// `Cache-Control: private`: the bytes are someone's.
        var isPrivate: Bool
        var freshness: Freshness
    }

    init(status: Int, headers: HTTPHeaders, received: Date) {
        let freshness = Freshness(headers: headers.map { ($0.name, $0.value) }, received: received)
        switch status {
        case 200, 206:
            var start: Int64 = 0
            let total: Int64?
            if status == 206 {
                guard let range = headers.first(name: "Content-Range").flatMap(ContentRange.init) else {
                    self = .unusable("a 206 without a usable Content-Range")
                    return
                }
                start = range.first
                total = range.total
            } else {
                total = headers.first(name: "Content-Length").flatMap { Int64($0) }
            }
            let isPrivate = headers["Cache-Control"].contains { value in
                value.lowercased().split(separator: ",").contains {
                    $0.trimmingCharacters(in: .whitespaces).hasPrefix("private")
                }
            }
            self = .body(
                Head(
                    start: start,
                    total: total,
                    rangesHonoured: status == 206,
                    etag: headers.first(name: "ETag"),
                    lastModified: headers.first(name: "Last-Modified"),
                    contentType: headers.first(name: "Content-Type"),
                    isPrivate: isPrivate,
                    freshness: freshness
                )
            )
        case 304:
            self = .notModified(freshness)
        case 416:
            self = .unsatisfiable(total: headers.first(name: "Content-Range").flatMap(ContentRange.unsatisfied))
        default:
            self = .refused(status: status)
        }
    }
}

extension OriginAnswer.Head {
    /// The change this head makes to a resource's record (a length it does not give is kept).
    func fill(storedURL: String, now: Date) -> (inout ResourceRecord) -> Void {
        { record in
            record.url = storedURL
            record.isPrivate = self.isPrivate ? true : nil
            record.totalLength = self.total ?? record.totalLength
            record.contentType = self.contentType
            record.etag = self.etag
            record.lastModified = self.lastModified
            record.freshUntil = self.freshness.freshUntil
            record.lastValidated = now
        }
    }

    /// Whether the head describes other bytes than the record's: another length, or another validator (the ETag
    /// when both have one, else Last-Modified); a validator the cached bytes had and the answer lacks counts as
    /// another. Bytes cached without any validator (an origin that sends none) are kept while the length holds.
    func differs(from record: ResourceRecord) -> Bool {
        if let old = record.totalLength, let total = self.total, old != total { return true }
        if let old = record.etag { return self.etag.map { $0 != old } ?? true }
        if let old = record.lastModified { return self.lastModified.map { $0 != old } ?? true }
        return false
    }
}
