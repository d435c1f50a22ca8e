import CourierProtocol
import CourierStore
import NIOCore

/// A page of events as the native port sends it, encoded without going through swift-protobuf for the layers around
/// the events: each event's kind is serialized once (an `Event` with no cursor, which is the kind's field alone),
/// and the event's cursor, the `Events` list and the `ServerEnvelope` around them are written here. Serializing the
/// whole envelope at once sizes each message again at every layer it is nested in (the envelope, the list, the
/// event); and a message to a group is the same bytes for each member on a loop (``EventEncodingCache``).
///
/// The bytes are what swift-protobuf writes for the same envelope, field for field (`EventWireTests`).
enum EventWire {
    /// An event's kind as the native port carries it: `Event` without its cursor (raw bodies).
    static func kindBytes(of event: StoredEvent) throws -> [UInt8] {
        var outgoing = Courier_V1_Event(event, rawBody: true)
        outgoing.cursor = 0
        return try outgoing.serializedBytes()
    }

    /// The `ServerEnvelope` payload of a page: `events` (field 5) holding an `Events` of these events (field 1 each:
    /// the cursor, field 1, then the kind's bytes) and `caught_up` (field 2) when true.
    static func envelope(
        _ events: [(cursor: UInt64, kind: [UInt8])],
        caughtUp: Bool,
        allocator: ByteBufferAllocator
    ) -> ByteBuffer {
        var listSize = caughtUp ? 2 : 0
        for event in events {
            let size = Self.eventSize(event)
            listSize += 1 + Self.varintSize(UInt64(size)) + size
        }
        var buffer = allocator.buffer(capacity: 1 + Self.varintSize(UInt64(listSize)) + listSize)
        buffer.writeInteger(UInt8(5 << 3 | 2))
        Self.writeVarint(UInt64(listSize), to: &buffer)
        for event in events {
            buffer.writeInteger(UInt8(1 << 3 | 2))
            Self.writeVarint(UInt64(Self.eventSize(event)), to: &buffer)
            if event.cursor != 0 {
                buffer.writeInteger(UInt8(1 << 3 | 0))
                Self.writeVarint(event.cursor, to: &buffer)
            }
            buffer.writeBytes(event.kind)
        }
        if caughtUp {
            buffer.writeInteger(UInt8(2 << 3 | 0))
            buffer.writeInteger(UInt8(1))
        }
        return buffer
    }

    private static func eventSize(_ event: (cursor: UInt64, kind: [UInt8])) -> Int {
        (event.cursor != 0 ? 1 + Self.varintSize(event.cursor) : 0) + event.kind.count
    }

    static func varintSize(_ value: UInt64) -> Int {
        value == 0 ? 1 : (64 - value.leadingZeroBitCount + 6) / 7
    }

    static func writeVarint(_ value: UInt64, to buffer: inout ByteBuffer) {
        var value = value
        while value >= 0x80 {
            buffer.writeInteger(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        buffer.writeInteger(UInt8(value))
    }
}

/// The kinds of group events one event loop encoded lately, by their content: a message to a group is encoded once
/// for all the members whose connections are on the loop, not once each. Only group events are kept (a direct
/// conversation's event goes to one user, named the user's own way), holding at most ``maxBytes`` of encodings
/// (none larger than a sixteenth of it), after which the cache starts afresh (0: nothing is kept). Used on its loop
/// only.
final class EventEncodingCache {
    /// An event's kind, hashed by what tells messages apart cheaply (a message's place, length and state, not
    /// every byte of its text) and compared whole.
    private struct Key: Hashable {
        let kind: StoredEvent.Kind

        static func == (lhs: Key, rhs: Key) -> Bool { lhs.kind == rhs.kind }

        func hash(into hasher: inout Hasher) {
            switch self.kind {
            case .message(let message), .edit(let message):
                hasher.combine(message.conversation)
                hasher.combine(message.seq)
                hasher.combine(message.body.count)
                hasher.combine(message.editedMs)
                hasher.combine(message.recalled)
                hasher.combine(message.replyTo?.visible)
            default:
                hasher.combine(self.kind)
            }
        }
    }

    private var kinds: [Key: [UInt8]] = [:]
    private var bytes = 0
    let maxBytes: Int
    private(set) var hits = 0
    private(set) var misses = 0

    init(maxBytes: Int) {
        self.maxBytes = maxBytes
    }

    /// The kind's bytes (``EventWire/kindBytes(of:)``), encoded now unless a group's event just like it was.
    func kindBytes(of event: StoredEvent) throws -> [UInt8] {
        guard self.maxBytes > 0, Self.isShared(event.kind) else { return try EventWire.kindBytes(of: event) }
        if let bytes = self.kinds[Key(kind: event.kind)] {
            self.hits += 1
            return bytes
        }
        self.misses += 1
        let encoded = try EventWire.kindBytes(of: event)
        // What an entry costs: its bytes, and about as much again for the event it is found by. One larger than a
        // sixteenth of the cache is not kept: a few large texts would empty it for every group on the loop.
        let cost = 2 * encoded.count + 64
        guard cost <= self.maxBytes / 16 else { return encoded }
        if self.bytes + cost > self.maxBytes {
            self.kinds.removeAll(keepingCapacity: true)
            self.bytes = 0
        }
        self.kinds[Key(kind: event.kind)] = encoded
        self.bytes += cost
        return encoded
    }

    /// Whether every member may get the same bytes: an event of a group (a direct conversation's events are
    /// each named by the other side).
    static func isShared(_ kind: StoredEvent.Kind) -> Bool {
        let conversation: Conversation
        switch kind {
        case .message(let message), .edit(let message): conversation = message.conversation
        case .reaction(let reaction): conversation = reaction.conversation
        case .recall(let recalled, _, _, _), .pin(let recalled, _, _, _, _, _): conversation = recalled
        case .membership, .role, .title: return true
        case .receipt, .profile, .notify, .hidden: return false
        }
        if case .group = conversation { return true }
        return false
    }
}
