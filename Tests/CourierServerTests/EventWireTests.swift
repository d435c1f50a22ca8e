import CourierProtocol
import CourierStore
import CourierTesting
import NIOCore
import Testing

@testable import CourierServer

@Suite("A page of events encoded by hand for the native port: byte for byte what swift-protobuf writes")
struct EventWireTests {
    /// Texts in several scripts, an empty one, and one long enough for two-byte lengths at every layer.
    static let texts = [
        "hello", "你好，世界", "こんにちは、元気？", "🙂👍🏽🇨🇳", "مرحبا بالعالم", "שלום", "", String(repeating: "长", count: 3000),
    ]

    /// A body as the store holds it: a serialized `Body`.
    static func body(_ text: String) -> [UInt8] {
        var body = Courier_V1_Body()
        body.text = text
        return (try? body.serializedBytes()) ?? []
    }

    static func event(cursor: UInt64, _ random: inout SeededRandom) -> StoredEvent {
        func text() -> String { Self.texts[Int(random.next() % UInt64(Self.texts.count))] }
        let conversation: Conversation = random.next() % 2 == 0 ? .group("茶 " + text()) : .user("李" + text())
        let seq = random.next() % 4 == 0 ? UInt64.max - random.next() % 10 : random.next() % 100_000
        var message = StoredMessage(
            id: "m-" + text(),
            from: "王" + text(),
            fromDevice: random.next() % 2 == 0 ? nil : DeviceID(rawValue: Int64(random.next() % 1000)),
            conversation: conversation,
            seq: seq,
            timeMs: Int64(random.next() % 1_900_000_000_000),
            body: Self.body(text()),
            recalled: random.next() % 8 == 0
        )
        if random.next() % 3 == 0 {
            message.replyTo = StoredReply(
                seq: seq / 2,
                visible: random.next() % 2 == 0,
                id: "q",
                from: "סבתא",
                body: Self.body(text()),
                recalled: false
            )
        }
        let kind: StoredEvent.Kind =
            switch random.next() % 8 {
            case 0, 1: .message(message)
            case 2: .edit(message)
            case 3: .recall(conversation: conversation, seq: seq, id: message.id, by: message.from)
            case 4: .receipt(conversation: conversation, user: text(), kind: .read, upToSeq: seq)
            case 5: .membership(group: "グループ", user: text(), change: .left, seq: seq)
            case 6:
                .reaction(
                    StoredReaction(
                        conversation: conversation,
                        seq: seq,
                        id: message.id,
                        from: message.from,
                        user: text(),
                        key: "👍🏽",
                        on: random.next() % 2 == 0
                    )
                )
            default: .title(group: "グループ", title: text(), by: text(), seq: seq)
            }
        return StoredEvent(cursor: cursor, kind: kind)
    }

    @Test("random pages: the same bytes as the envelope serialized whole, cached or not")
    func sameBytes() throws {
        var random = SeededRandom(seed: TestSeed.make(for: "EventWireTests.sameBytes"))
        // Caches of no bytes, a few entries, plenty: each gives the same bytes.
        let caches = [0, 2_000, 1 << 20].map { EventEncodingCache(maxBytes: $0) }
        for round in 0..<200 {
            var cursor = random.next() % 3 == 0 ? UInt64.max - 40 : random.next() % 300
            var events: [StoredEvent] = []
            for _ in 0..<Int(random.next() % 12) {
                cursor += 1
                events.append(Self.event(cursor: cursor, &random))
            }
            // An event repeated, as a group's message comes to several members.
            if let first = events.first, random.next() % 2 == 0 {
                events.append(StoredEvent(cursor: cursor + 1, kind: first.kind))
            }
            let caughtUp = random.next() % 2 == 0
            var list = Courier_V1_Events()
            list.events = events.map { Courier_V1_Event($0, rawBody: true) }
            list.caughtUp = caughtUp
            var envelope = ServerEnvelope()
            envelope.events = list
            let expected: [UInt8] = try envelope.serializedBytes()
            // What a client reads (the raw bodies parsed, as they are not in `envelope`).
            let read = try ServerEnvelope(serializedBytes: expected)
            #expect(read.events.events.count == events.count)
            for cache in caches {
                let kinds = try events.map { (cursor: $0.cursor, kind: try cache.kindBytes(of: $0)) }
                let wire = EventWire.envelope(kinds, caughtUp: caughtUp, allocator: ByteBufferAllocator())
                #expect(Array(wire.readableBytesView) == expected, "round \(round), cache of \(cache.maxBytes) bytes")
                #expect(try ServerEnvelope(serializedBytes: Array(wire.readableBytesView)) == read)
            }
        }
        #expect(caches[0].hits == 0)
        #expect(caches[2].hits > 0)
    }

    @Test("the loop's cache: a group's event encoded once for every member, a direct one each time, bounded in bytes")
    func cache() throws {
        let cache = EventEncodingCache(maxBytes: 16_000)
        func message(_ conversation: Conversation, _ text: String, seq: UInt64 = 1) -> StoredEvent.Kind {
            .message(
                StoredMessage(
                    id: "m\(seq)",
                    from: "alice",
                    fromDevice: nil,
                    conversation: conversation,
                    seq: seq,
                    timeMs: 0,
                    body: Array(text.utf8),
                    recalled: false
                )
            )
        }
        let group = message(.group("tea"), "大家好")
        for cursor in UInt64(1)...5 { _ = try cache.kindBytes(of: StoredEvent(cursor: cursor, kind: group)) }
        #expect((cache.misses, cache.hits) == (1, 4))
        // Another cursor, same bytes; a direct conversation's events are never kept.
        for cursor in UInt64(1)...3 {
            _ = try cache.kindBytes(of: StoredEvent(cursor: cursor, kind: message(.user("bob"), "hi")))
        }
        #expect((cache.misses, cache.hits) == (1, 4))
        // An edit of the text is another event: encoded anew, not taken for the first.
        let edited = message(.group("tea"), "大家好!")
        #expect(
            try cache.kindBytes(of: StoredEvent(cursor: 9, kind: edited))
                != cache.kindBytes(of: StoredEvent(cursor: 9, kind: group))
        )
        #expect(cache.misses == 2)
        // Another text of the same length at the same place (hashed alike): told apart by its bytes.
        let other = message(.group("tea"), "大家坏")
        #expect(
            try cache.kindBytes(of: StoredEvent(cursor: 9, kind: other))
                == EventWire.kindBytes(of: StoredEvent(cursor: 9, kind: other))
        )
        #expect(
            try cache.kindBytes(of: StoredEvent(cursor: 9, kind: group))
                == EventWire.kindBytes(of: StoredEvent(cursor: 9, kind: group))
        )
        #expect(cache.misses == 3)
        // Past its bytes the cache starts afresh: the first is encoded again.
        for seq in UInt64(2)...200 {
            _ = try cache.kindBytes(of: StoredEvent(cursor: 1, kind: message(.group("tea"), "x", seq: seq)))
        }
        let misses = cache.misses
        _ = try cache.kindBytes(of: StoredEvent(cursor: 1, kind: group))
        #expect(cache.misses == misses + 1)
        // An event larger than a sixteenth of the cache is encoded, never kept.
        let large = message(.group("tea"), String(repeating: "长", count: 200))
        _ = try cache.kindBytes(of: StoredEvent(cursor: 1, kind: large))
        _ = try cache.kindBytes(of: StoredEvent(cursor: 2, kind: large))
        #expect(cache.misses == misses + 3)
    }
}
