import CourierClient

/// Display names: asked for once per user the chat shows, kept as profile events change them, shown beside user
/// names.
extension ChatState {
    /// How a user is shown in the conversation: its display name with its user name, or the user name alone.
    func shown(_ user: String) -> String {
        guard let name = self.displayNames[user.lowercased()] else { return user }
        return "\(ChatText.printable(name)) (\(user))"
    }

    /// Asks for the profiles of the users the chat shows (the other users of its direct conversations, the senders of
    /// the lines it holds) that were not asked for yet, a hundred at a time.
    mutating func profilesWanted() -> [ChatAction] {
        var wanted: Set<String> = []
        for thread in self.threads.values {
            if case .user(let peer) = thread.conversation { wanted.insert(peer.lowercased()) }
            for line in thread.lines { wanted.insert(line.from.lowercased()) }
        }
        let new = wanted.subtracting(self.profilesAsked).subtracting([self.me.lowercased(), ""]).sorted()
        guard !new.isEmpty else { return [] }
        self.profilesAsked.formUnion(new)
        return stride(from: 0, to: new.count, by: Self.profilesPerRequest).map {
            .loadProfiles(Array(new[$0..<min($0 + Self.profilesPerRequest, new.count)]))
        }
    }

    /// Profiles as the server said them (an answer, or an event).
    mutating func setProfiles(_ profiles: [ProfileInfo]) {
        for profile in profiles {
            self.displayNames[profile.user.lowercased()] = profile.displayName
        }
    }

    /// The most names one request asks for (the server's limit).
    static let profilesPerRequest = 100
}
