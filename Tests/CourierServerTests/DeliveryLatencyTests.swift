import CourierProtocol
import CourierServerTesting
import CourierStore
import CourierTesting
import Testing

@testable import CourierServer

@Suite("Delivery latency: from the commit a connection is told of until its write, in /metrics")
struct DeliveryLatencyTests {
    static let user = UserID(rawValue: 1)
    static let device = DeviceID(rawValue: 2)

    @Test("a handle times what it was told until it is sent: the oldest of each write, not what it caught up on")
    func handle() {
        let handle = ConnectionHandle(id: 1, user: Self.user, device: Self.device, wantsEphemeral: false)
        // Caught up at login: not timed.
        handle.notify(cursor: 5, timed: false)
        #expect(handle.delivered(upTo: 5) == nil)
        // Told of 7, then 9: a write up to 7 times 7's wait; a write up to 9 then 9's, which began later.
        handle.notify(cursor: 7)
        handle.notify(cursor: 9)
        let seven = handle.delivered(upTo: 7)
        #expect(seven != nil)
        let nine = handle.delivered(upTo: 9)
        #expect(nine != nil)
        #expect(handle.delivered(upTo: 9) == nil)
        // More tells than it remembers: the later ones join the last, and count from it (never less than they
        // waited).
        for cursor in UInt64(10)...UInt64(10 + ConnectionHandle.maxWaits + 5) { handle.notify(cursor: cursor) }
        var waits = 0
        for cursor in UInt64(10)...UInt64(10 + ConnectionHandle.maxWaits + 5) {
            if handle.delivered(upTo: cursor) != nil { waits += 1 }
        }
        #expect(waits == ConnectionHandle.maxWaits)
        // A connection that asked for no events is never timed.
        let silent = ConnectionHandle(
            id: 2,
            user: Self.user,
            device: Self.device,
            wantsEphemeral: false,
            wantsEvents: false
        )
        silent.notify(cursor: 3)
        #expect(silent.delivered(upTo: 3) == nil)
    }

    @Test(
        "a live message is timed once written to its receiver; the backlog a device reads as it logs in is not; acks of sends and of events are counted"
    )
    func server() async throws {
        try await ServerFixture.with { fixture in
            try await fixture.user("alice")
            try await fixture.user("bob")
            // bob's phone exists, and is away while three messages come.
            let (away, welcome) = try await NativeTestClient.login(fixture, "bob", device: "phone")
            await away.close()
            try await waitUntil("bob's phone is away") {
                try await fixture.store.devices(of: "bob").first?.connectedSinceMs == nil
            }
            let alice = try #require(try await fixture.store.user(named: "alice"))
            _ = try await fixture.store.apply(
                (0..<3).map { .send(.init(sender: alice.id, id: "离线-\($0)", to: .user("bob"), body: [])) },
                nowMs: 0
            )
            let (phone, _) = try await NativeTestClient.resume(port: fixture.ports.native, token: welcome.token)
            #expect(try await phone.messages(3).map(\.id) == ["离线-0", "离线-1", "离线-2"])
            #expect(try await fixture.metric("courier_delivery_latency_seconds_count") == 0)
            // The phone acknowledged what it read (one ack a page); no send was answered yet.
            try await waitUntil("the phone's ack is counted") {
                try await fixture.metric("courier_acks_total{of=\"events\"}") >= 1
            }
            #expect(try await fixture.metric("courier_acks_total{of=\"send\"}") == 0)

            // A live one: alice's connection is told of it too (her own send, skipped but passed).
            let (laptop, _) = try await NativeTestClient.login(fixture, "alice")
            _ = try await laptop.sendText("现在 🔴", to: .user("bob"), id: "live")
            // Not acknowledged: a receipt would be news for alice's connection.
            #expect(try await phone.messages(1, ack: false).map(\.id) == ["live"])
            try await waitUntil("the delivery is timed") {
                try await fixture.metric("courier_delivery_latency_seconds_count") >= 1
            }
            let timed = try await fixture.metric("courier_delivery_latency_seconds_count")
            #expect(timed <= 2, "\(timed)")
            #expect(try await fixture.metric("courier_acks_total{of=\"send\"}") == 1)
            await laptop.close()
            await phone.close()
        }
    }
}
