/// A conversation as one user names it: a direct conversation by the other user's name, a group by its name. The
/// server, the store and the SDK all speak of conversations with this one type.
public enum Conversation: Hashable, Sendable, CustomStringConvertible {
    case user(String)
    case group(String)

    /// `@name` or `#name`, as the CLI and the chat write it.
    public var description: String {
        switch self {
        case .user(let name): "@\(name)"
        case .group(let name): "#\(name)"
        }
    }
}
