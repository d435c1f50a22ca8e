package import CourierProtocol

/// What the search index holds of a message, whatever the database: the tokens of its text (``SearchText``) and one
/// token naming its conversation, so that a search within the conversations a user is in skips every other one in
/// the index itself.
package enum SearchIndex {
    /// The most characters of a message the index holds (Telegram's whole message): the rest of a longer text is
    /// not searched. Tokenizing costs the sender's event loop in proportion to the text, so that a peer sending the
    /// longest texts takes little of its loop from the other connections on it.
    package static let maxIndexedCharacters = 4_096

    /// The text a search finds in a stored body (a `courier.v1.Body`): a text message's text, a media message's
    /// caption and file name, its first ``maxIndexedCharacters`` characters; empty for anything else, or bytes that
    /// are not a body.
    package static func text(ofBody body: [UInt8]) -> String {
        guard let parsed = try? Courier_V1_Body(serializedBytes: body) else { return "" }
        return Self.text(of: parsed)
    }

    /// A body's whole text: a text message's text, a media message's caption; empty for anything else, or bytes
    /// that are not a body. What mentions are read from (all of it, unlike a search).
    package static func fullText(ofBody body: [UInt8]) -> String {
        guard let parsed = try? Courier_V1_Body(serializedBytes: body) else { return "" }
        return Self.fullText(of: parsed)
    }

    /// The same of a body already parsed.
    package static func fullText(of body: Courier_V1_Body) -> String {
        switch body.content {
        case .text(let whole)?: whole
        case .media(let media)?: media.caption
        case nil: ""
        }
    }

    /// The text a search finds in a body already parsed (a session's request): the same rule without parsing again.
    /// A media message's file name is found too, before its caption.
    package static func text(of body: Courier_V1_Body) -> String {
        guard case .media(let media)? = body.content, !media.name.isEmpty else {
            return Self.indexed(Self.fullText(of: body))
        }
        // The name first: the longest caption does not push it out of what is indexed.
        return Self.indexed(media.caption.isEmpty ? media.name : media.name + "\n" + media.caption)
    }

    /// A text's first ``maxIndexedCharacters`` characters: what the index holds of it.
    package static func indexed(_ text: String) -> String {
        let indexed = text.prefix(Self.maxIndexedCharacters)
        return indexed.endIndex == text.endIndex ? text : String(indexed)
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
