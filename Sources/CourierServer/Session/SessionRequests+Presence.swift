import CourierProtocol
import CourierStore

/// A connection's end, and presence: who is told a user came online or went offline.
extension SessionRequests {
    /// The connection has closed and its work has ended: its uploads are released, its slot given back, and its
    /// user's peers told if it was the user's last.
    func connectionEnded(_ session: SessionWork) async {
        for upload in session.streams.closeAll() { await self.context.media.release(upload.upload) }
        if let inline = session.inline?.upload { await self.context.media.release(inline, discard: true) }
        session.inline = nil
        let handle = session.handle
        self.context.release(session.ticket, authenticated: handle != nil)
        if let handle { await self.disconnected(handle) }
    }

    private func disconnected(_ handle: ConnectionHandle) async {
        let last = self.context.hub.unregister(handle)
        if let lease = handle.lease { await self.context.cluster.close(lease: lease) }
        let now = self.context.clock.wallMs
        if last.lastForDevice {
            self.context.activity.note(handle.device, of: handle.user, connected: false, ms: now)
        }
        guard last.lastForUser, let user = try? await self.context.store.userName(of: handle.user) else { return }
        await self.announcePresence(
            of: handle.user,
            named: user,
            online: false,
            first: true,
            handle: nil,
            lastSeenMs: now
        )
    }

    /// Tells the user's peers that it came online or went offline, and tells a new connection who is online.
    func announcePresence(
        of user: UserID,
        named name: String,
        online: Bool,
        first: Bool,
        handle: ConnectionHandle?,
        lastSeenMs: Int64 = 0
    ) async {
        guard let peers = try? await self.context.store.peers(of: user) else { return }
        if first {
            self.context.fanout.presence(of: name, online: online, lastSeenMs: lastSeenMs, to: peers)
        }
        // A new connection that asked for notices learns who is online, and when the others were last seen.
        if let handle, handle.wantsEphemeral, !peers.isEmpty,
            let known = try? await self.context.store.namesAndLastSeen(of: peers)
        {
            for (peer, (name, lastSeenMs)) in known {
                let online = self.context.fanout.isOnline(peer)
                guard online || lastSeenMs != nil else { continue }
                var notice = Courier_V1_PresenceNotice()
                notice.user = name
                notice.online = online
                notice.lastSeenMs = online ? 0 : lastSeenMs ?? 0
                handle.post(presence: notice)
            }
        }
    }
}
