import CourierProtocol
import CourierStore

/// How news reaches the connections it concerns: in this process (``Hub``), and across the nodes that share one
/// database (``ClusterFanout``). A session speaks to this protocol only and never knows which it has.
///
/// Everything it carries is a hint. The store is the truth: a connection woken with a cursor reads its events from
/// the store at its own pace (unless they are handed to it, read already), so a hint that is lost (a node that
/// restarts, a notification dropped) costs latency, never a message. Typing and presence notices are ephemeral: at most once, coalesced per user and conversation.
protocol Fanout: Sendable {
    /// These users' logs grew to these cursors. Called after the commit that grew them, never inside it. `fresh`
    /// has the new events as written, with the cursor they follow, for some of the users: a connection that has
    /// sent up to there may be handed them instead of reading them back (a bounded optimisation; the cursor alone
    /// is always enough).
    func logsGrew(_ cursors: [UserID: UInt64], fresh: [UserID: FreshRun])

    /// A user is typing (or stopped) in a conversation: the members' connections that want notices learn it, each
    /// with the conversation named its own way (a direct conversation by the other side's name), except the
    /// connection the notice came from.
    func typing(_ notice: TypingHint, to members: [UserID])

    /// A user came online or went offline: its peers' connections that want notices learn it.
    func presence(of name: String, online: Bool, lastSeenMs: Int64, to peers: Set<UserID>)

    /// Whether a user has a connection (on any node).
    func isOnline(_ user: UserID) -> Bool

    /// Users have just become peers: each one's connections that want notices learn that the other is online, where
    /// it is. (One offline shows from the other's next connection, with when it was last seen.)
    func introduce(_ introductions: [Introduction])

    /// Closes every connection of a device (revoked) with an error.
    func terminate(device: DeviceID, code: String, message: String)

    /// Closes every connection of a user (removed) with an error.
    func terminate(user: UserID, code: String, message: String)
}

extension Fanout {
    /// The presence notices an introduction makes from this node: each side online here is announced to the other.
    func announceLocal(_ introductions: [Introduction], isOnlineHere: (UserID) -> Bool) {
        for introduction in introductions where introduction.users.count == 2 && introduction.names.count == 2 {
            for (side, other) in [(0, 1), (1, 0)] where isOnlineHere(introduction.users[other]) {
                self.presence(
                    of: introduction.names[other],
                    online: true,
                    lastSeenMs: 0,
                    to: [introduction.users[side]]
                )
            }
        }
    }

    /// These users' logs grew to these cursors (their connections read the events from the store).
    func logsGrew(_ cursors: [UserID: UInt64]) {
        self.logsGrew(cursors, fresh: [:])
    }
}

/// A typing notice before it is addressed to each recipient.
struct TypingHint: Sendable, Hashable {
    /// The one typing, by id and by name.
    var user: UserID
    var name: String
    /// The conversation as the one typing names it.
    var conversation: Conversation
    var typing: Bool
    /// The connection the notice came from (on this node), which does not get it back.
    var fromConnection: Int?

    /// The notice as `recipient` sees it: a group by its name, a direct conversation by the other side's name (the
    /// typing user's other devices see the peer, the peer sees the typing user).
    func notice(for recipient: UserID) -> Courier_V1_TypingNotice {
        var notice = Courier_V1_TypingNotice()
        switch self.conversation {
        case .group:
            notice.conversation = Courier_V1_Conversation(self.conversation)
        case .user(let peer):
            notice.conversation.user = recipient == self.user ? peer : self.name
        }
        notice.user = self.name
        notice.typing = self.typing
        return notice
    }
}
