public import CourierVocabulary

extension Conversation {
    /// The conversation a message names, or nil when it names neither a user nor a group.
    public init?(_ conversation: Courier_V1_Conversation) {
        switch conversation.peer {
        case .user(let name)?: self = .user(name)
        case .group(let name)?: self = .group(name)
        case nil: return nil
        }
    }
}

extension Courier_V1_Conversation {
    public init(_ conversation: Conversation) {
        self.init()
        switch conversation {
        case .user(let name): self.user = name
        case .group(let name): self.group = name
        }
    }
}
