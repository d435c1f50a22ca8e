import CourierStore
import CourierVocabulary

/// Which node commits each conversation's writes: its owner, the live node (among those with a forward port) that
/// scores highest for the conversation's key (rendezvous hashing). A node that leaves moves only the conversations
/// it owned; a node that joins takes about one in n of them. Every node computes the same owner from the same list
/// of live nodes; while their lists differ (for up to ``ServerConfiguration/Cluster-swift.struct/routesRefreshInterval``),
/// a conversation may be written from two nodes, which its row's lock keeps right.
struct WriteRoutes: Sendable {
    /// This node's name.
    let node: String
    /// The live nodes, this one included.
    let peers: [ClusterPeer]

    /// The key a write is routed by: its conversation's, the same whichever member names it (nil: an
    /// acknowledgement, which covers any number of conversations and stays on the node that took it).
    ///
    /// - Parameter userName: The name of the user the write is from.
    static func key(of request: WriteRequest, userName: String) -> String? {
        let address: Conversation
        switch request {
        case .send(let send): address = send.to
        case .markRead(_, let conversation, _), .recall(_, let conversation, _): address = conversation
        case .edit(let edit): address = edit.conversation
        case .react(let react): address = react.conversation
        case .ack: return nil
        }
        // Names are unique without regard to case (``Names``), and ASCII.
        switch address {
        case .group(let name):
            return "g:" + name.lowercased()
        case .user(let name):
            let (a, b) = (userName.lowercased(), name.lowercased())
            return a < b ? "d:\(a)/\(b)" : "d:\(b)/\(a)"
        }
    }

    /// The node that owns a key; nil when no live node takes forwarded writes.
    func owner(of key: String) -> ClusterPeer? {
        var best: (score: UInt64, peer: ClusterPeer)?
        for peer in self.peers where peer.forward != nil {
            let score = Self.score(key, peer.name)
            if let current = best, current.score > score || (current.score == score && current.peer.name < peer.name) {
                continue
            }
            best = (score, peer)
        }
        return best?.peer
    }

    /// A key's score on a node: FNV-1a over the key, a zero byte and the node's name, then a finalizer (SplitMix64's)
    /// so that names alike still spread. Stable across processes and versions, unlike `Hasher`.
    static func score(_ key: String, _ node: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in key.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        hash = (hash ^ 0) &* 0x0000_0100_0000_01b3
        for byte in node.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        hash = (hash ^ (hash >> 30)) &* 0xbf58_476d_1ce4_e5b9
        hash = (hash ^ (hash >> 27)) &* 0x94d0_49bb_1331_11eb
        return hash ^ (hash >> 31)
    }
}
