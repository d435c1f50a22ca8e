/// The mentions a message's text makes, as the server stores them and every client reads them: `@name` (or the
/// full-width `＠name` a Chinese or Japanese input method types) names a member of the group, and `@all` every
/// member.
///
/// A mention starts at an `@` that begins the text or follows a character that cannot be part of a name (a space,
/// punctuation, or any non-ASCII character, so `你好@bob` mentions bob while `mail@bob.example` does not); the name is
/// the run of ASCII letters, digits, `.`, `_` and `-` after it, starting with a letter or digit: the run without the
/// `.`, `_` and `-` it ends with when that is a member's name (`@bob.` at a sentence's end is bob), else the whole run
/// (an account from before names that read alike were refused may end with `.`, `_` or `-`); at most 32 bytes. Names compare without regard to case, as user names do.
/// The server keeps a name only when it is a member's; the text itself is never changed.
public struct Mentions: Hashable, Sendable {
    /// The names mentioned (the runs without the punctuation they end with), lowercased, each once, in the order
    /// they first appear: at most ``maxNames``.
    public var names: [String]
    /// For each of ``names``, the whole run as written (lowercased; longer when it ended with punctuation; empty
    /// when the whole run is too long to be a name).
    public var runs: [String]
    /// Whether the text says `@all`.
    public var everyone: Bool

    /// The most names one message mentions: later ones are text.
    public static let maxNames = 32
    /// The word that mentions every member.
    public static let everyoneWord = "all"

    public init(names: [String] = [], runs: [String]? = nil, everyone: Bool = false) {
        self.names = names
        self.runs = runs ?? names
        self.everyone = everyone
    }

    /// Whether the text mentions nothing.
    public var isEmpty: Bool { self.names.isEmpty && !self.everyone }

    /// Whether a user, by name, is mentioned: by its name, or by `@all`.
    public func mention(_ user: String) -> Bool {
        let user = user.lowercased()
        return self.everyone || self.names.contains(user) || self.runs.contains(user)
    }

    /// The mentions in a text (of any length: the work is one pass over it).
    public init(in text: String) {
        self.init()
        let scalars = Array(text.unicodeScalars)
        var seen: Set<String> = []
        var index = 0
        while index < scalars.count {
            let scalar = scalars[index]
            index += 1
            guard Self.isAt(scalar) else { continue }
            if index >= 2, Self.isNameCharacter(scalars[index - 2]) || Self.isAt(scalars[index - 2]) { continue }
            var end = index
            while end < scalars.count, Self.isNameCharacter(scalars[end]) { end += 1 }
            let run = scalars[index..<end]
            index = end
            var name = run
            while let last = name.last, !Self.isAlphanumeric(last) { name = name.dropLast() }
            guard let first = name.first, Self.isAlphanumeric(first), name.count <= 32 else { continue }
            let word = String(String.UnicodeScalarView(name)).lowercased()
            let whole = run.count <= 32 ? String(String.UnicodeScalarView(run)).lowercased() : ""
            if word == Self.everyoneWord {
                self.everyone = true
            } else if self.names.count < Self.maxNames, seen.insert(whole.isEmpty ? word : whole).inserted {
                self.names.append(word)
                self.runs.append(whole)
            }
        }
    }

    private static func isAt(_ scalar: Unicode.Scalar) -> Bool {
        scalar == "@" || scalar == "\u{FF20}"
    }

    private static func isAlphanumeric(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "a"..."z", "A"..."Z", "0"..."9": true
        default: false
        }
    }

    private static func isNameCharacter(_ scalar: Unicode.Scalar) -> Bool {
        self.isAlphanumeric(scalar) || scalar == "." || scalar == "_" || scalar == "-"
    }
}

/// How a conversation alerts a member, as the member chose (on any of its devices): unread messages are counted
/// whatever it chose. The store keeps it; clients follow it.
public enum NotifyLevel: Int64, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    /// Every message alerts (the default).
    case all = 0
    /// Only messages that mention the member (by name, or `@all`) alert: the conversation is muted.
    case mentions = 1
    /// Nothing alerts.
    case none = 2

    public var description: String {
        switch self {
        case .all: "all"
        case .mentions: "mentions"
        case .none: "none"
        }
    }
}
