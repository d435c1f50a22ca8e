import CourierProtocol
import CourierStore
import Testing

@testable import CourierServer

@Suite("Session state machine (no sockets)")
struct SessionStateMachineTests {
    static let start = ContinuousClock.now

    static func machine(_ configure: (inout ServerConfiguration.Limits) -> Void = { _ in }) -> SessionStateMachine {
        var limits = ServerConfiguration.Limits()
        configure(&limits)
        var machine = SessionStateMachine(configuration: .init(limits), now: start)
        machine.opened(now: start)
        return machine
    }

    static let session = DeviceSession(
        user: User(id: UserID(rawValue: 1), name: "alice", createdMs: 0, removedMs: nil),
        device: Device(
            id: DeviceID(rawValue: 7),
            userID: UserID(rawValue: 1),
            userName: "alice",
            name: "phone",
            createdMs: 0,
            expiresMs: .max,
            revokedMs: nil,
            lastSeenMs: nil,
            ackedCursor: 0
        ),
        token: nil
    )

    static func hello() -> ClientEnvelope {
        var envelope = ClientEnvelope()
        envelope.requestID = 1
        envelope.hello.token = "ct_x"
        return envelope
    }

    static func send(_ text: String, id: String = "m", to user: String = "bob") -> ClientEnvelope {
        var envelope = ClientEnvelope()
        envelope.requestID = 2
        envelope.send.id = id
        envelope.send.to.user = user
        envelope.send.body.text = text
        return envelope
    }

    /// A send of a picture with a caption.
    static func sendMedia(caption: String) -> ClientEnvelope {
        var envelope = ClientEnvelope()
        envelope.requestID = 2
        envelope.send.id = "p"
        envelope.send.to.user = "bob"
        envelope.send.body.media.sha256 = String(repeating: "ab", count: 32)
        envelope.send.body.media.kind = .image
        envelope.send.body.media.size = 1000
        envelope.send.body.media.caption = caption
        return envelope
    }

    static func active(_ configure: (inout ServerConfiguration.Limits) -> Void = { _ in }) -> SessionStateMachine {
        var machine = machine(configure)
        _ = machine.received(hello(), now: start)
        // As the login's end reaches the loop: active, and taking requests again.
        let handle = ConnectionHandle(id: 1, user: session.user.id, device: session.device.id, wantsEphemeral: false)
        guard
            case .deliver = machine.workEnded(
                .authenticated(session, handle: handle, start: 0, latest: 0, ackedOnWrite: false),
                now: start,
                nowMs: 0
            )
        else { fatalError("the login did not make the session active") }
        return machine
    }

    @Test("anything before hello closes the connection with not-authenticated")
    func requestBeforeHello() {
        var machine = Self.machine()
        let action = machine.received(Self.send("hi"), now: Self.start)
        guard case .close(ErrorCodes.notAuthenticated, _) = action else {
            Issue.record("\(action)")
            return
        }
        // Closed: later envelopes are ignored.
        #expect(machine.received(Self.hello(), now: Self.start) == .none)
    }

    @Test("hello asks for authentication; a request while it runs is a protocol error")
    func authentication() {
        var machine = Self.machine()
        guard case .authenticate(_, requestID: 1) = machine.received(Self.hello(), now: Self.start) else {
            Issue.record("no authenticate action")
            return
        }
        guard case .close(ErrorCodes.notAuthenticated, _) = machine.received(Self.send("early"), now: Self.start) else {
            Issue.record("a send during authentication was accepted")
            return
        }
        var empty = ClientEnvelope()
        empty.hello = Courier_V1_Hello()
        var other = Self.machine()
        guard case .close(ErrorCodes.authFailed, _) = other.received(empty, now: Self.start) else {
            Issue.record("a hello without credentials was accepted")
            return
        }
    }

    @Test("a failed authentication closes with the store's code")
    func failedAuthentication() {
        var machine = Self.machine()
        _ = machine.received(Self.hello(), now: Self.start)
        guard
            case .close(.close(code: "token-expired", message: "expired")) = machine.workEnded(
                .close(code: "token-expired", message: "expired"),
                now: Self.start,
                nowMs: 0
            )
        else {
            Issue.record("the refused login did not close")
            return
        }
        #expect(machine.session == nil && machine.isClosed)
    }

    @Test("sends become writes with the user's id; bad sends are refused with their codes")
    func sends() throws {
        var machine = Self.active { $0.maxTextBytes = 10 }
        guard
            case .write(.send(let send), requestID: 2, answers: true) = machine.received(
                Self.send("hi"),
                now: Self.start
            )
        else {
            Issue.record("no write")
            return
        }
        #expect(send.sender == UserID(rawValue: 1) && send.id == "m" && send.to == .user("bob"))
        #expect(try Courier_V1_Body(serializedBytes: send.body).text == "hi")
        let cases: [(ClientEnvelope, String)] = [
            (Self.send(String(repeating: "x", count: 11)), ErrorCodes.textTooLarge),
            (Self.send(""), ErrorCodes.emptyMessage),
            (Self.send("x", id: String(repeating: "i", count: 129)), ErrorCodes.idTooLong),
            // SQLite would store "m\0one" and "m\0two" as one id "m": control characters are refused.
            (Self.send("x", id: "m\u{0}one"), ErrorCodes.invalidRequest),
            (Self.send("x", id: "m\u{1B}[2J"), ErrorCodes.invalidRequest),
            (
                {
                    var envelope = Self.send("x")
                    envelope.send.clearTo()
                    return envelope
                }(), ErrorCodes.invalidRequest
            ),
            // A caption is a text: four Chinese characters are 12 bytes, over the limit of 10.
            (Self.sendMedia(caption: "海边日落"), ErrorCodes.textTooLarge),
        ]
        // Ten bytes of caption (an emoji and two Chinese characters) are the limit exactly: written.
        guard case .write = machine.received(Self.sendMedia(caption: "🌊海边"), now: Self.start) else {
            Issue.record("a caption at the limit was refused")
            return
        }
        for (envelope, code) in cases {
            guard case .refuse(2, code, _, _, nil) = machine.received(envelope, now: Self.start) else {
                Issue.record("expected \(code)")
                continue
            }
        }
        // A second hello is refused, not fatal.
        guard
            case .refuse(1, ErrorCodes.alreadyAuthenticated, _, _, _) = machine.received(Self.hello(), now: Self.start)
        else {
            Issue.record("second hello")
            return
        }
    }

    @Test("at most maxUnackedSends writes are in flight; the reader waits for one to finish")
    func writesInFlight() {
        var machine = Self.active { $0.maxUnackedSends = 3 }
        for _ in 0..<3 {
            #expect(machine.mayReadMore)
            _ = machine.received(Self.send("x"), now: Self.start)
        }
        #expect(!machine.mayReadMore && machine.writesInFlight == 3)
        machine.writeFinished()
        #expect(machine.mayReadMore && machine.writesInFlight == 2)
    }

    @Test("a send above the rate pauses the connection until the bucket refills; nothing is refused")
    func rateLimit() {
        var machine = Self.active {
            $0.sendsPerSecond = 10
            $0.sendBurst = 2
        }
        let now = Self.start
        for _ in 0..<2 {
            guard case .write = machine.received(Self.send("x"), now: now) else {
                Issue.record("burst refused")
                return
            }
        }
        guard case .pause(let wait) = machine.received(Self.send("x"), now: now) else {
            Issue.record("not rate limited")
            return
        }
        #expect(wait == .milliseconds(100))
        #expect(machine.writesInFlight == 2, "a paused send is not in flight")
        guard case .write = machine.received(Self.send("x"), now: now + .milliseconds(100)) else {
            Issue.record("not refilled")
            return
        }
    }

    @Test("group changes and mutes take from the send rate too; a mute names a conversation and a known level")
    func groupChangesRateLimited() {
        var machine = Self.active {
            $0.sendsPerSecond = 10
            $0.sendBurst = 2
        }
        let now = Self.start
        var title = ClientEnvelope()
        title.requestID = 3
        title.manageGroup.group = "team"
        title.manageGroup.title.title = "读书会"
        var mute = ClientEnvelope()
        mute.requestID = 4
        mute.setNotify.conversation.group = "team"
        mute.setNotify.level = .mentions
        guard case .request(.manageGroup, _) = machine.received(title, now: now),
            case .request(.setNotify(.group("team"), .mentions), _) = machine.received(mute, now: now)
        else {
            Issue.record("the burst was not let through")
            return
        }
        guard case .pause = machine.received(title, now: now), case .pause = machine.received(mute, now: now) else {
            Issue.record("not rate limited")
            return
        }
        var bad = mute
        bad.setNotify.level = .UNRECOGNIZED(9)
        guard case .refuse(_, ErrorCodes.invalidRequest, _, _, _) = machine.received(bad, now: now + .seconds(1))
        else {
            Issue.record("an unknown level was not refused")
            return
        }
        var nowhere = mute
        nowhere.setNotify.clearConversation()
        guard case .refuse = machine.received(nowhere, now: now + .seconds(1)) else {
            Issue.record("a mute of no conversation was not refused")
            return
        }
    }

    @Test("no hello within the authentication timeout, or silence past the idle timeout, closes")
    func deadlines() {
        var waiting = Self.machine { $0.authTimeout = .seconds(5) }
        #expect(waiting.tick(now: Self.start + .seconds(4)) == .none)
        guard case .close(ErrorCodes.authTimeout, _) = waiting.tick(now: Self.start + .seconds(5)) else {
            Issue.record("no auth timeout")
            return
        }
        var active = Self.active { $0.idleTimeout = .seconds(30) }
        active.receivedBytes(now: Self.start + .seconds(20))
        #expect(active.tick(now: Self.start + .seconds(49)) == .none)
        guard case .close(ErrorCodes.idleTimeout, _) = active.tick(now: Self.start + .seconds(50)) else {
            Issue.record("no idle timeout")
            return
        }
    }

    @Test("a session whose token expires while connected is closed with token-expired at the expiry")
    func tokenExpiry() {
        var machine = Self.machine { $0.idleTimeout = .seconds(3600) }
        _ = machine.received(Self.hello(), now: Self.start)
        var session = Self.session
        session.device.expiresMs = 10_000
        // Logged in at 6 s of wall-clock time: 4 s left.
        machine.authenticated(session, now: Self.start, nowMs: 6_000)
        #expect(machine.tick(now: Self.start + .milliseconds(3_999)) == .none)
        guard case .close(ErrorCodes.tokenExpired, _) = machine.tick(now: Self.start + .seconds(4)) else {
            Issue.record("the session outlived its token")
            return
        }
        #expect(machine.session == nil)
    }

    @Test("an envelope with no known request is unsupported, not fatal")
    func unknownRequest() {
        var machine = Self.active()
        var envelope = ClientEnvelope()
        envelope.requestID = 9
        guard case .refuse(9, ErrorCodes.unsupported, _, _, _) = machine.received(envelope, now: Self.start) else {
            Issue.record("unknown request")
            return
        }
    }

    static func media(_ configure: (inout Courier_V1_Media) -> Void) -> ClientEnvelope {
        var envelope = ClientEnvelope()
        envelope.requestID = 3
        envelope.send.to.user = "bob"
        var media = Courier_V1_Media()
        media.kind = .image
        media.sha256 = String(repeating: "0123456789abcdef", count: 4)
        media.size = 1000
        media.mime = "image/jpeg"
        media.name = "a.jpg"
        configure(&media)
        envelope.send.body.media = media
        return envelope
    }

    @Test("a media send is checked: digest, kind, size limit, a MIME type safe for headers, a plain file name")
    func mediaValidation() {
        var machine = Self.active()
        guard case .write(.send(let send), 3, true) = machine.received(Self.media { _ in }, now: Self.start) else {
            Issue.record("a valid media send is not written")
            return
        }
        #expect(send.media?.sha256 == String(repeating: "0123456789abcdef", count: 4) && send.media?.size == 1000)
        let refusals: [(String, (inout Courier_V1_Media) -> Void)] = [
            (ErrorCodes.invalidRequest, { $0.sha256 = "ABC" }),
            (ErrorCodes.invalidRequest, { $0.sha256 = String(repeating: "A", count: 64) }),
            (ErrorCodes.invalidRequest, { $0.kind = .unspecified }),
            (ErrorCodes.mediaTooLarge, { $0.size = 2 * 1024 * 1024 * 1024 + 1 }),
            (ErrorCodes.invalidRequest, { $0.mime = "image/jpeg\r\nSet-Cookie: x=1" }),
            (ErrorCodes.invalidRequest, { $0.mime = "jpeg" }),
            (ErrorCodes.invalidRequest, { $0.mime = String(repeating: "a", count: 130) + "/b" }),
            (ErrorCodes.invalidRequest, { $0.name = "../../etc/passwd" }),
            (ErrorCodes.invalidRequest, { $0.name = "a\u{1B}[2J.jpg" }),
            (ErrorCodes.invalidRequest, { $0.name = String(repeating: "n", count: 256) }),
        ]
        for (code, change) in refusals {
            let action = machine.received(Self.media(change), now: Self.start)
            guard case .refuse(3, code, _, _, nil) = action else {
                Issue.record("expected \(code), got \(action) for \(Self.media(change).send.body.media)")
                continue
            }
        }
        // Empty type and name are fine (the type is served as application/octet-stream).
        guard
            case .write = machine.received(
                Self.media {
                    $0.mime = ""
                    $0.name = ""
                },
                now: Self.start
            )
        else {
            Issue.record("an empty type and name are refused")
            return
        }
    }

    @Test("uploads and fetches name a digest and an odd stream; an upload over the limit is refused at once")
    func uploadAndFetchRequests() {
        var machine = Self.active()
        var upload = ClientEnvelope()
        upload.requestID = 4
        upload.upload.sha256 = String(repeating: "ab", count: 32)
        upload.upload.size = 10
        upload.upload.streamID = 1
        #expect(
            machine.received(upload, now: Self.start)
                == .request(.upload(sha256: upload.upload.sha256, size: 10, streamID: 1), requestID: 4)
        )
        upload.upload.streamID = 2
        guard case .refuse(4, ErrorCodes.invalidRequest, _, _, _) = machine.received(upload, now: Self.start) else {
            Issue.record("an even stream id is accepted")
            return
        }
        upload.upload.streamID = 3
        upload.upload.size = 3 * 1024 * 1024 * 1024
        guard case .refuse(4, ErrorCodes.mediaTooLarge, _, _, _) = machine.received(upload, now: Self.start) else {
            Issue.record("an oversize upload is accepted")
            return
        }
        var fetch = ClientEnvelope()
        fetch.requestID = 5
        fetch.fetch.sha256 = String(repeating: "cd", count: 32)
        fetch.fetch.streamID = 5
        fetch.fetch.offset = 7
        fetch.fetch.windowBytes = 4096
        #expect(
            machine.received(fetch, now: Self.start)
                == .request(
                    .fetch(sha256: fetch.fetch.sha256, offset: 7, length: 0, streamID: 5, window: 4096),
                    requestID: 5
                )
        )
    }

}
