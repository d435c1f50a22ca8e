import CourierVocabulary
import Testing

@Suite("HTTP byte ranges: Range and Content-Range, for the server's media endpoint and the proxy alike")
struct RangeTests {
    @Test("one range in its three forms, the players' bytes=0-1 probe, and what is unsatisfiable")
    func forms() {
        let total: Int64 = 1000
        #expect(RangeRequest(header: "bytes=0-1").bytes(of: total) == 0..<2)
        #expect(RangeRequest(header: "bytes=0-1").isPartial)
        #expect(RangeRequest(header: "bytes=100-199").bytes(of: total) == 100..<200)
        #expect(RangeRequest(header: "bytes=900-").bytes(of: total) == 900..<1000)
        #expect(RangeRequest(header: "bytes=900-5000").bytes(of: total) == 900..<1000)
        #expect(RangeRequest(header: "bytes=-100").bytes(of: total) == 900..<1000)
        #expect(RangeRequest(header: "bytes=-5000").bytes(of: total) == 0..<1000)
        // The unit is case-insensitive and blanks around the numbers are tolerated.
        #expect(RangeRequest(header: " Bytes=5 - 9 ") == .from(5, through: 9))
        #expect(RangeRequest(header: "bytes= 5-9").bytes(of: total) == 5..<10)
        #expect(RangeRequest(header: "bytes=1000-").bytes(of: total) == nil)
        #expect(RangeRequest(header: "bytes=-0").bytes(of: total) == nil)
        #expect(RangeRequest(header: "bytes=0-").bytes(of: 0) == nil)
        #expect(RangeRequest(header: "bytes=99999999999999999999-").bytes(of: total) == nil)
        #expect(RangeRequest(header: "bytes=999-999").bytes(of: total) == 999..<1000)
    }

    @Test("no header, several ranges, another unit or bad syntax: the whole resource")
    func ignored() {
        for header in [nil, "bytes=0-1,5-6", "items=0-1", "bytes=5-1", "bytes=a-b", "bytes=-", "bytes=1-2-3", "0-1"] {
            let request = RangeRequest(header: header)
            #expect(request == .whole, "\(String(describing: header))")
            #expect(request.bytes(of: 10) == 0..<10)
            #expect(!request.isPartial)
        }
    }

    @Test("Content-Range: a range of a known or unknown total; malformed or impossible ones are refused")
    func contentRange() {
        #expect(ContentRange("bytes 0-99/1000") == ContentRange(first: 0, last: 99, total: 1000))
        #expect(ContentRange(" Bytes 5-5/*") == ContentRange(first: 5, last: 5, total: nil))
        for bad in ["bytes 9-5/10", "bytes 0-10/10", "bytes 0-9", "items 0-9/10", "bytes a-9/10", "bytes */10", ""] {
            #expect(ContentRange(bad) == nil, "\(bad)")
        }
        #expect(ContentRange.unsatisfied("bytes */1000") == 1000)
        #expect(ContentRange.unsatisfied("bytes 0-9/1000") == nil)
    }
}
