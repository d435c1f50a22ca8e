import CourierClient

/// Display names: asked for once per user the chat shows, kept as profile events change them, shown beside user
/// names.
extension ChatState {
    /// How a user is shown in the conversation: its display name, cut to a third of the terminal's width (at most
    /// ``maxDisplayNameColumns``), with its user name, which is always whole (a name cannot push it out of sight, nor
    /// pass itself off as another's); or the user name alone.
    /// A bot's user name says so: `helper [bot]`.
    func shown(_ user: String) -> String {
        let key = user.lowercased()
        let user = self.bots.contains(key) ? "\(user) [bot]" : user
        guard let name = self.displayNames[key] else { return user }
        let room = max(4, min(Self.maxDisplayNameColumns, self.columns / 3))
        let printable = ChatText.printable(name)
        let cut =
            DisplayWidth.of(printable) <= room ? printable : ChatScreen.fit(printable, width: room - 1) + "…"
        return "\(cut) (\(user))"
    }

    /// The widest a display name shows.
    static let maxDisplayNameColumns = 24

    /// Asks for the profiles of the users the chat shows (the other users of its direct conversations, the senders of
    /// the lines it holds, and this user, whose name `/name` shows) that were not asked for yet (or whose asking
    /// failed), a hundred at a time.
    mutating func profilesWanted() -> [ChatAction] {
        // One's own too: `/name` shows it.
        var wanted: Set<String> = [self.me.lowercased()]
        for thread in self.threads.values {
            if case .user(let peer) = thread.conversation { wanted.insert(peer.lowercased()) }
            for line in thread.lines { wanted.insert(line.from.lowercased()) }
        }
        let new = wanted.subtracting(self.profilesAsked).subtracting([""]).sorted()
        guard !new.isEmpty else { return [] }
        self.profilesAsked.formUnion(new)
        return stride(from: 0, to: new.count, by: Self.profilesPerRequest).map {
            .loadProfiles(Array(new[$0..<min($0 + Self.profilesPerRequest, new.count)]))
        }
    }

    /// Profiles as the server said them (an answer, or an event); an answer older than what an event said since
    /// changes nothing.
    mutating func setProfiles(_ profiles: [ProfileInfo]) {
        for profile in profiles {
            let key = profile.user.lowercased()
            let updated = profile.updated ?? .distantPast
            if let known = self.profilesUpdated[key], known > updated { continue }
            self.profilesUpdated[key] = updated
            self.displayNames[key] = profile.displayName
            if profile.bot { self.bots.insert(key) } else { self.bots.remove(key) }
        }
    }

    /// Asking for these users' profiles failed: they are asked for again with the next lines.
    mutating func profilesFailed(_ users: [String]) {
        self.profilesAsked.subtract(users.map { $0.lowercased() })
    }

    /// The most names one request asks for (the server's limit).
    static let profilesPerRequest = 100
}
