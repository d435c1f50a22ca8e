import CourierProcess
import CourierTesting
import Foundation
import Testing

@Suite("Web Push and a crash: a server SIGKILLed while it sends a push sends it after its restart")
struct PushCrashTests {
    @Test(
        "the outbox row committed with the message survives SIGKILL in the middle of its push, and is sent once the lease ends"
    )
    func killedWhileSending() async throws {
        let service = try await TestPushService.start()
        try await withTemporaryDirectory(prefix: "courier-push-crash") { folder in
            let fixture = try await CLIFixture(folder: folder, users: ["alice", "bob"])
            let arguments = ["--allow-private-targets", "--limit", "push-lease=1s", "--limit", "push-retry-base=100ms"]
            var server = try await fixture.serve(arguments)
            // bob's browser subscribes; the restart below leaves his device away for certain.
            let (bobClient, bob) = try await NativeTestClient.login(port: fixture.ports.native, "bob", device: "浏览器")
            let subscriber = try await service.subscribe("bob")
            let registered = try await ExternalProgram.curl([
                "--silent", "--write-out", "%{http_code}", "--output", "/dev/null", "--header",
                "Authorization: Bearer \(bob.token)", "--header", "Content-Type: application/json", "--data-binary",
                subscriber.json, "http://127.0.0.1:\(fixture.ports.http)/api/v1/push/subscriptions",
            ])
            #expect(registered == "201")
            await bobClient.close()
            #expect(await server.terminate() == 0)
            server = try await fixture.serve(arguments)

            // The push service holds the first push without answering: the server is killed in the middle of it.
            try await service.answer("bob", with: ["hang"])
            let (alice, _) = try await NativeTestClient.login(port: fixture.ports.native, "alice")
            let answer = try await alice.sendText("在吗？", to: .user("bob"), id: "k-1")
            #expect(answer.ack != nil)
            try await waitUntil("the push is in flight") { try await service.received().count == 1 }
            try await server.crash(with: SIGKILL)
            await alice.close()

            // Restarted: the row is due again once the dead server's lease ends, and this time it is answered.
            server = try await fixture.serve(arguments)
            try await waitUntil("the push is sent again") { try await service.received().count == 2 }
            let pushes = try await service.received()
            #expect(pushes.map(\.status) == [0, 201])
            #expect(pushes.map { $0.payload?["message_id"] } == ["k-1", "k-1"])
            #expect(pushes[1].payload?["text"] == "在吗？")
            #expect(await server.terminate() == 0)
        }
    }
}
