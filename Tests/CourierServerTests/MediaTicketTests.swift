import Foundation
import Testing

@testable import CourierServer
@testable import CourierStore

/// Media tickets on their own, on a clock the test sets: what a ticket opens, and for how long.
@Suite struct MediaTicketTests {
    let sha = String(repeating: "ab", count: 32)
    let other = String(repeating: "cd", count: 32)
    let tickets = MediaTickets(key: Array(repeating: 7, count: 32), lifetime: .seconds(600))

    @Test("a ticket opens its one file for its user until it ends, and not a millisecond after")
    func lifetime() throws {
        let now: Int64 = 1_800_000_000_000
        let (ticket, expires) = tickets.issue(user: UserID(rawValue: 42), sha256: sha, nowMs: now)
        #expect(expires == now + 600_000)
        #expect(try tickets.user(of: ticket, sha256: sha, nowMs: now) == UserID(rawValue: 42))
        #expect(try tickets.user(of: ticket, sha256: sha, nowMs: expires - 1) == UserID(rawValue: 42))
        #expect(throws: MediaTickets.Refusal.expired) { try tickets.user(of: ticket, sha256: sha, nowMs: expires) }
        #expect(throws: MediaTickets.Refusal.invalid) { try tickets.user(of: ticket, sha256: other, nowMs: now) }
        // Another server's key (another database) makes other tickets.
        let elsewhere = MediaTickets(key: Array(repeating: 8, count: 32), lifetime: .seconds(600))
        #expect(throws: MediaTickets.Refusal.invalid) { try elsewhere.user(of: ticket, sha256: sha, nowMs: now) }
        // A lifetime of milliseconds is kept to the millisecond.
        let short = MediaTickets(key: Array(repeating: 7, count: 32), lifetime: .milliseconds(1500))
        #expect(short.issue(user: UserID(rawValue: 1), sha256: sha, nowMs: now).expiresMs == now + 1500)
    }

    @Test("every field is bound: user, end, file; garbage is refused without a crash")
    func forgeries() throws {
        let now: Int64 = 1_800_000_000_000
        let (ticket, _) = tickets.issue(user: UserID(rawValue: 42), sha256: sha, nowMs: now)
        let parts = ticket.split(separator: ".").map(String.init)
        try #require(parts.count == 3)
        var forged = [
            "43.\(parts[1]).\(parts[2])", "42.\(Int64(parts[1])! + 1).\(parts[2])", "42.\(parts[1]).\(parts[2])=",
            "42.\(parts[1]).", ".\(parts[1]).\(parts[2])", "\(ticket).", "42.\(parts[1]).\(parts[2]).x",
            "-42.\(parts[1]).\(parts[2])", "+42.\(parts[1]).\(parts[2])", "042.\(parts[1]).\(parts[2])",
            String(repeating: "1", count: 10_000),
        ]
        // Each character of the MAC changed in turn.
        for index in parts[2].indices {
            var mac = parts[2]
            mac.replaceSubrange(index...index, with: mac[index] == "A" ? "B" : "A")
            forged.append("42.\(parts[1]).\(mac)")
        }
        for text in forged {
            #expect(throws: MediaTickets.Refusal.invalid, "\(text)") {
                try tickets.user(of: text, sha256: sha, nowMs: now)
            }
        }
    }
}
