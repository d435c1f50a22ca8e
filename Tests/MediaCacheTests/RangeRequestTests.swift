import Testing

@testable import MediaCache

@Suite("MediaCache: a player's Range header")
struct RangeRequestTests {
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
}
