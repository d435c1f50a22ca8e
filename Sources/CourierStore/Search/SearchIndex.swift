internal import CourierProtocol

/// What the search index holds of a message, whatever the database: the tokens of its text (``SearchText``) and one
/// token naming its conversation, so that a search within the conversations a user is in skips every other one in
/// the index itself.
package enum SearchIndex {
    /// The text a search finds in a stored body (a `courier.v1.Body`): a text message's text, a media message's
    /// caption; empty for anything else, or bytes that are not a body.
    package static func text(ofBody body: [UInt8]) -> String {
        guard let parsed = try? Courier_V1_Body(serializedBytes: body) else { return "" }
        switch parsed.content {
        case .text(let text)?: return text
        case .media(let media)?: return media.caption
        case nil: return ""
        }
    }

    /// The tokens of a body's text.
    package static func textTokens(ofBody body: [UInt8]) -> [String] {
        SearchText.indexTokens(Self.text(ofBody: body))
    }

    /// The tokens of a body's text (worked out already, or now), and its conversation's token last.
    package static func tokens(ofBody body: [UInt8], prepared: [String]? = nil, conversation: Int64) -> [String] {
        (prepared ?? Self.textTokens(ofBody: body)) + [Self.conversationToken(conversation)]
    }

    /// The token naming a conversation: a private-use character (which ``SearchText`` never gives: it is neither a
    /// letter, a digit, a mark nor an emoji) and the conversation's id. SQLite's `ascii` tokenizer keeps it whole.
    package static func conversationToken(_ conversation: Int64) -> String {
        "\u{E000}" + String(conversation)
    }

    /// The most conversations a search names by their tokens; a user in more is searched through the membership
    /// join alone.
    package static let maxConversationTokens = 1_024
}
