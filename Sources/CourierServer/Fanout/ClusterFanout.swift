import CourierProtocol
import CourierStore
import Foundation

/// The ``Fanout`` of a server that shares its database with others (the nodes on PostgreSQL): its own
/// connections through the ``Hub``, and the other nodes' through the database's ``StoreFeed``. What the feed
/// carries is hints: the logs' cursors (the events are read from the store, by the node for the connections that
/// are caught up, ``CourierServer/wake(_:)``), and typing and presence notices (at
/// most once). Revoked devices and removed users reach the other nodes through the store's changes, as the admin
/// commands' do.
final class ClusterFanout: Fanout {
    let hub: Hub
    let feed: any StoreFeed
    /// Where the traces of other nodes' sends go, for this node's deliveries of them.
    let traces: TraceBook?

    init(hub: Hub, feed: any StoreFeed, traces: TraceBook? = nil) {
        self.hub = hub
        self.feed = feed
        self.traces = traces
    }

    /// Tells the other nodes of a traced send: its message, and its commit's context (a W3C `traceparent`).
    static func publish(trace key: TraceBook.Key, parent: String, to feed: any StoreFeed) {
        let notice = ClusterNotice(trace: key, parent: parent)
        if let bytes = try? JSONEncoder().encode(notice) { feed.publish(notice: [UInt8](bytes)) }
    }

    func logsGrew(_ cursors: [UserID: UInt64], fresh: [UserID: FreshRun]) {
        self.hub.logsGrew(cursors, fresh: fresh)
        self.feed.publish(logs: cursors)
    }

    func typing(_ notice: TypingHint, to members: [UserID]) {
        self.hub.typing(notice, to: members)
        let remote = ClusterNotice(typing: notice, to: members)
        if let bytes = try? JSONEncoder().encode(remote) { self.feed.publish(notice: [UInt8](bytes)) }
    }

    func presence(of name: String, online: Bool, lastSeenMs: Int64, to peers: Set<UserID>) {
        self.hub.presence(of: name, online: online, lastSeenMs: lastSeenMs, to: peers)
        let remote = ClusterNotice(presenceOf: name, online: online, lastSeenMs: lastSeenMs, to: peers)
        if let bytes = try? JSONEncoder().encode(remote) { self.feed.publish(notice: [UInt8](bytes)) }
    }

    /// Whether the user has a connection on this node. (A user connected only to another node shows as offline to
    /// a connection's first look; the presence notices that node sends as the user comes and goes still arrive.)
    func isOnline(_ user: UserID) -> Bool {
        self.hub.isOnline(user)
    }

    /// Announces the sides online here, and asks the other nodes to announce theirs.
    func introduce(_ introductions: [Introduction]) {
        guard !introductions.isEmpty else { return }
        self.announceLocal(introductions, isOnlineHere: self.hub.isOnline)
        for introduction in introductions {
            let remote = ClusterNotice(introducing: introduction)
            if let bytes = try? JSONEncoder().encode(remote) { self.feed.publish(notice: [UInt8](bytes)) }
        }
    }

    func terminate(device: DeviceID, code: String, message: String) {
        self.hub.terminate(device: device, code: code, message: message)
    }

    func terminate(user: UserID, code: String, message: String) {
        self.hub.terminate(user: user, code: code, message: message)
    }

    /// Passes a notice another node published to this node's connections.
    func received(notice bytes: [UInt8]) {
        guard let notice = try? JSONDecoder().decode(ClusterNotice.self, from: Data(bytes)) else { return }
        let recipients = notice.recipients.map(UserID.init(rawValue:))
        if let parent = notice.traceparent, let seq = notice.seq {
            self.traces?.remote(TraceBook.Key(conversation: notice.name, seq: seq), parent: parent)
        } else if let typing = notice.typingHint {
            self.hub.typing(typing, to: recipients)
        } else if let online = notice.online {
            self.hub.presence(of: notice.name, online: online, lastSeenMs: notice.lastSeenMs ?? 0, to: Set(recipients))
        } else if let other = notice.introduced, recipients.count == 2 {
            let introduction = Introduction(recipients[0], named: notice.name, recipients[1], named: other)
            self.announceLocal([introduction], isOnlineHere: self.hub.isOnline)
        }
    }
}

/// A typing or presence notice as it travels between nodes (JSON in a notification's payload).
struct ClusterNotice: Codable, Hashable {
    var user: Int64?
    var name: String
    /// Typing: in a group, or in a direct conversation with this user (as the one typing names it).
    var group: String?
    var peer: String?
    var typing: Bool?
    /// Presence.
    var online: Bool?
    var lastSeenMs: Int64?
    /// An introduction: the second user's name (the first's is `name`; their ids are the recipients, in order).
    var introduced: String?
    var recipients: [Int64]
    /// A traced send: its message (its conversation's key is `name`) and its commit's context.
    var seq: UInt64?
    var traceparent: String?

    init(trace key: TraceBook.Key, parent: String) {
        self.name = key.conversation
        self.seq = key.seq
        self.traceparent = parent
        self.recipients = []
    }

    init(typing hint: TypingHint, to members: [UserID]) {
        self.user = hint.user.rawValue
        self.name = hint.name
        switch hint.conversation {
        case .group(let name): self.group = name
        case .user(let name): self.peer = name
        }
        self.typing = hint.typing
        self.recipients = members.map(\.rawValue)
    }

    init(presenceOf name: String, online: Bool, lastSeenMs: Int64, to peers: Set<UserID>) {
        self.name = name
        self.online = online
        self.lastSeenMs = lastSeenMs
        self.recipients = peers.map(\.rawValue).sorted()
    }

    init(introducing introduction: Introduction) {
        self.name = introduction.names.first ?? ""
        self.introduced = introduction.names.last ?? ""
        self.recipients = introduction.users.map(\.rawValue)
    }

    /// The typing notice it carries (from another node: no connection here sent it).
    var typingHint: TypingHint? {
        guard let user, let typing else { return nil }
        let conversation: Conversation
        if let group {
            conversation = .group(group)
        } else if let peer {
            conversation = .user(peer)
        } else {
            return nil
        }
        return TypingHint(
            user: UserID(rawValue: user),
            name: self.name,
            conversation: conversation,
            typing: typing,
            fromConnection: nil
        )
    }
}
