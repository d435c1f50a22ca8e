/// Where a node takes the writes other nodes forward to it: the conversations it owns (``ClusterRoutes``).
public struct ForwardEndpoint: Hashable, Sendable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// `host:port`, as the other nodes dial it.
    public var address: String
    /// The node's secret for this run, which the nodes prove they know to each other (the database is what they
    /// already trust in common). Never logged: ``description`` leaves it out.
    public var secret: String

    public init(address: String, secret: String) {
        self.address = address
        self.secret = secret
    }

    public var description: String { self.address }
    public var debugDescription: String { self.address }
    public var customMirror: Mirror { Mirror(self, children: ["address": self.address]) }
}

/// A node alive in the cluster, and its forward port (nil: a node that takes no forwarded writes).
public struct ClusterPeer: Hashable, Sendable {
    public var name: String
    public var forward: ForwardEndpoint?

    public init(name: String, forward: ForwardEndpoint?) {
        self.name = name
        self.forward = forward
    }
}

/// The nodes sharing a database, for the writes of each conversation to be committed by one of them (its owner): a
/// node says where its forward port is with its heartbeat (``ClusterAdmission/heartbeat(nowMs:aliveUntilMs:)``), and
/// reads where the others' are.
public protocol ClusterRoutes: Sendable {
    /// This node's name among them.
    var node: String { get }

    /// Where this node takes forwarded writes from now on, written with this and every later heartbeat (nil: it
    /// takes none).
    func advertise(_ forward: ForwardEndpoint?) async throws

    /// The nodes alive at `nowMs` (this one included, once its heartbeat is written), by name.
    func livePeers(nowMs: Int64) async throws -> [ClusterPeer]
}
