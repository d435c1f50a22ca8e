import CourierClient
import Foundation

/// One screen of the chat, laid out for the terminal's size: each row's text with its styles, and where the
/// cursor goes. Rows never exceed the width in display columns, so wide characters cannot push them over.
struct ChatScreen: Equatable {
    /// A row as written to the terminal: text with SGR style sequences, and its width without them.
    struct Row: Equatable {
        private(set) var text = ""
        private(set) var width = 0

        enum Style: String {
            case plain = "0"
            case reverse = "7"
            case dim = "2"
            case bold = "1"
        }

        /// Appends `text` (made printable) in `style`, cut to keep the row within `limit` columns.
        mutating func append(_ text: String, _ style: Style = .plain, limit: Int) {
            let cut = ChatScreen.fit(ChatText.printable(text), width: limit - self.width)
            guard !cut.isEmpty else { return }
            self.text += style == .plain ? cut : "\u{1B}[\(style.rawValue)m\(cut)\u{1B}[0m"
            self.width += DisplayWidth.of(cut)
        }

        /// Appends `text` (made printable) in `style`; what does not fit within `limit` columns ends in "…", cut
        /// after the last whole word where there is one near the end (a line of CJK, with no spaces, is cut by width).
        mutating func appendShortened(_ text: String, _ style: Style = .plain, limit: Int) {
            self.append(ChatScreen.shortened(ChatText.printable(text), width: limit - self.width), style, limit: limit)
        }

        /// Pads with spaces (in `style`) to `width` columns.
        mutating func pad(to width: Int, _ style: Style = .plain) {
            guard width > self.width else { return }
            self.append(String(repeating: " ", count: width - self.width), style, limit: width)
        }

        /// The text without its style sequences: what a terminal shows.
        var plain: String {
            self.text.replacing(/\x1B\[[0-9;]*m/, with: "")
        }
    }

    var rows: [Row]
    /// The cursor's row and column, from 0.
    var cursor: (row: Int, column: Int)

    static func == (a: ChatScreen, b: ChatScreen) -> Bool {
        a.rows == b.rows && a.cursor == b.cursor
    }

    static let minimumColumns = 40
    static let minimumRows = 8

    /// Lays out `state` at its terminal size.
    init(_ state: ChatState, now: Date) {
        let columns = state.columns
        let height = state.rows
        guard columns >= Self.minimumColumns, height >= Self.minimumRows else {
            var row = Row()
            row.append("terminal too small for courier chat", limit: columns)
            self.rows = [row] + Array(repeating: Row(), count: max(0, height - 1))
            self.cursor = (0, 0)
            return
        }
        var rows: [Row] = []

        var title = Row()
        title.append(
            " courier · \(state.me) @ \(state.server) · \(Self.describe(state.connection, reconnectAt: state.reconnectAt, now: now))",
            .reverse,
            limit: columns
        )
        title.pad(to: columns, .reverse)
        rows.append(title)

        let listWidth = Self.listWidth(columns: columns)
        let paneWidth = columns - listWidth - 1
        let bodyRows = height - 3
        let list = Self.list(state, width: listWidth, rows: bodyRows)
        let pane = Self.pane(state, width: paneWidth, rows: bodyRows, now: now)
        for index in 0..<bodyRows {
            var row = list[index]
            row.pad(to: listWidth)
            row.append("│", .dim, limit: listWidth + 1)
            for piece in pane[index] { row.append(piece.0, piece.1, limit: columns) }
            rows.append(row)
        }

        var status = Row()
        if let notice = state.notice {
            status.appendShortened(" " + notice, .bold, limit: columns)
        } else if let hint = Self.modeHint(state) {
            status.appendShortened(" " + hint, .bold, limit: columns)
        } else if state.scroll > 0 {
            status.appendShortened(" ↑ \(state.scroll) rows up · PgDn or ↓ to come back", .dim, limit: columns)
        } else {
            status.appendShortened(" " + ChatHelp.hint, .dim, limit: columns)
        }
        rows.append(status)

        var input = Row()
        input.append("> ", .bold, limit: columns)
        let view = state.input.view(width: columns - 2)
        input.append(view.text, limit: columns)
        rows.append(input)
        self.rows = rows
        self.cursor = (height - 1, 2 + view.cursorColumn)
    }

    /// What the status row says while the line edits or answers a message, a message is being picked, or search
    /// results show: what the keys then do.
    static func modeHint(_ state: ChatState) -> String? {
        if let search = state.search {
            if search.loading && search.results.isEmpty { return "searching for “\(search.query)”…" }
            return "↑ ↓ choose · Enter opens it in its conversation · Esc closes the results"
        }
        if let picking = state.picking {
            switch picking.purpose {
            case .look: return "the message found · ↑ ↓ move · Esc or Enter ends"
            case .reply: return "↑ ↓ pick the message to answer · Enter answers it · Esc cancels"
            case .react(let key):
                return "↑ ↓ pick the message · Enter reacts \(key) (again: takes it off) · Esc cancels"
            }
        }
        if state.jump != nil { return "finding the message in its conversation… · Esc stops" }
        if state.editing != nil { return "editing your message · Enter saves it · Esc leaves it as it was" }
        if let replying = state.replying {
            return "answering \(replying.quote.from): \(Self.quoted(replying.quote)) · Esc cancels"
        }
        return nil
    }

    static func listWidth(columns: Int) -> Int {
        min(28, max(14, columns / 4))
    }

    /// The connection in words: "connected", or "offline, reconnecting in 3 s: why".
    static func describe(_ connection: ChatState.Connection, reconnectAt: Date?, now: Date) -> String {
        switch connection {
        case .connecting: return "connecting…"
        case .connected: return "connected"
        case .offline(let reason):
            // When it tries again first: the reason may not fit.
            guard let reconnectAt else { return "offline: \(reason)" }
            let seconds = Int(reconnectAt.timeIntervalSince(now).rounded(.up))
            return (seconds > 0 ? "offline, reconnecting in \(seconds) s: " : "offline, reconnecting…: ") + reason
        }
    }

    // MARK: The conversation list

    /// Two rows a conversation: its name, whether the user is online, its unread count; then its last message.
    private static func list(_ state: ChatState, width: Int, rows: Int) -> [Row] {
        var result: [Row] = []
        let threads = state.ordered
        let selected = threads.firstIndex { ChatState.key($0.conversation) == state.open } ?? 0
        // Scroll the list so the open conversation shows.
        let first = max(0, min(selected - (rows / 2 - 1) / 2, threads.count - rows / 2))
        for thread in threads.dropFirst(first) {
            let isOpen = ChatState.key(thread.conversation) == state.open
            var name = Row()
            let style: Row.Style = isOpen ? .reverse : .plain
            let unread = ChatState.badge(thread)
            var label = (isOpen ? "›" : " ") + state.listLabel(thread)
            if case .user(let user) = thread.conversation, state.online[user.lowercased()] == true { label += " ●" }
            name.append(label, style, limit: width - DisplayWidth.of(unread))
            name.pad(to: width - DisplayWidth.of(unread), style)
            name.append(unread, .bold, limit: width)
            result.append(name)
            var preview = Row()
            preview.append("  " + Self.preview(thread, me: state.me), .dim, limit: width)
            result.append(preview)
        }
        if threads.isEmpty {
            for line in ["", " No conversations.", " /open NAME", " /open #GROUP"] {
                var row = Row()
                row.append(line, .dim, limit: width)
                result.append(row)
            }
        }
        return Array((result + Array(repeating: Row(), count: rows)).prefix(rows))
    }

    private static func preview(_ thread: ChatState.Thread, me: String) -> String {
        if !thread.typing.isEmpty { return "typing…" }
        guard let last = thread.lines.last else { return "" }
        let text = last.recalled ? "(recalled)" : last.text.replacing("\n", with: " ")
        let mine = last.from.lowercased() == me.lowercased()
        if case .group = thread.conversation { return "\(mine ? "you" : last.from): \(text)" }
        return mine ? "you: \(text)" : text
    }

    // MARK: The open conversation

    typealias Pieces = [(String, Row.Style)]

    /// The header (name, online, who is typing), a rule, then the newest messages that fit, bottom-aligned.
    private static func pane(_ state: ChatState, width: Int, rows: Int, now: Date) -> [Pieces] {
        guard let thread = state.openThread else {
            if let search = state.search {
                let title: Pieces = [(" Search: “\(search.query)”", .bold)]
                let rule: Pieces = [(String(repeating: "─", count: width), .dim)]
                return [title, rule] + Self.searchRows(search, state: state, width: width, rows: rows - 2, now: now)
            }
            if state.helpShown {
                return Array((Self.help(width: width) + Array(repeating: [], count: rows)).prefix(rows))
            }
            return [[(" Open a conversation with Tab or /open NAME.", .dim)]]
                + Array(repeating: [], count: rows - 1)
        }
        var header: Pieces
        if case .user(let peer) = thread.conversation {
            header = [(" @" + state.shown(peer), .bold)]
        } else {
            // The group's name, and its title beside it when it has one.
            header = [(" " + state.listLabel(thread), .bold)]
        }
        if case .user(let user) = thread.conversation {
            let name = user.lowercased()
            if state.online[name] == true {
                header.append((" · online", .dim))
            } else if let seen = state.lastSeen[name] {
                header.append((" · offline, last seen \(RelativeTime().format(seen, now: now))", .dim))
            } else if state.online[name] == false || state.connection != .connected {
                header.append((" · offline", .dim))
            } else if thread.lines.contains(where: { $0.from.lowercased() == state.me.lowercased() }),
                !thread.lines.contains(where: { $0.from.lowercased() == name }), thread.read[name] ?? 0 == 0
            {
                // The server shows a user's presence and typing only to those it is talking with.
                header.append((" · presence shows once \(user) answers or opens this conversation", .dim))
            }
        }
        let typing = thread.typing.keys.sorted()
        if !typing.isEmpty {
            let names = typing.joined(separator: ", ")
            header.append((" · \(names) \(typing.count == 1 ? "is" : "are") typing…", .plain))
        }
        let rule: Pieces = [(String(repeating: "─", count: width), .dim)]
        if let search = state.search {
            let results = Self.searchRows(search, state: state, width: width, rows: rows - 2, now: now)
            let title: Pieces = [(" Search: “\(search.query)”", .bold)]
            return [title, rule] + results
        }
        if state.helpShown {
            let help = Self.help(width: width)
            return [header, rule] + Array((help + Array(repeating: [], count: rows)).prefix(rows - 2))
        }
        let messages = Self.messageRows(of: thread, state: state, now: now, width: width)
        let visible = rows - 2
        let end = max(0, messages.count - state.scroll)
        let shown = Array(messages[max(0, end - visible)..<end])
        return [header, rule] + Array(repeating: [], count: visible - shown.count) + shown
    }

    /// Every row of a conversation's messages at the pane width the state's terminal gives.
    static func messageRows(of thread: ChatState.Thread, state: ChatState, now: Date) -> [Pieces] {
        Self.messageLayout(of: thread, state: state, now: now).rows
    }

    /// Every row of a conversation's messages, and each line's rows (by its index in the thread's lines), at the pane
    /// width the state's terminal gives.
    static func messageLayout(
        of thread: ChatState.Thread,
        state: ChatState,
        now: Date
    ) -> (rows: [Pieces], spans: [Range<Int>]) {
        let width = state.columns - Self.listWidth(columns: state.columns) - 1
        return Self.messageLayout(of: thread, state: state, now: now, width: width)
    }

    static func messageRows(of thread: ChatState.Thread, state: ChatState, now: Date, width: Int) -> [Pieces] {
        Self.messageLayout(of: thread, state: state, now: now, width: width).rows
    }

    /// A time line before the first message and wherever five minutes passed between two; then each message as
    /// "name: text", wrapped with its continuation rows under the text: first the message it answers (↳ quoted on one
    /// row), then its text and a file's caption, "(edited)" if its sender edited it, and its reactions on a row under
    /// it. Our own are marked …, ✓ (committed), ✓✓ (delivered), and the newest one read "✓✓ read"; the message
    /// picked (``ChatState/picking``) shows reversed.
    static func messageLayout(
        of thread: ChatState.Thread,
        state: ChatState,
        now: Date,
        width: Int
    ) -> (rows: [Pieces], spans: [Range<Int>]) {
        let relative = RelativeTime()
        let me = state.me.lowercased()
        // Those past `seq`, who were members when it was sent.
        let others = { (marks: [String: UInt64], seq: UInt64) in
            marks.filter { $0.key != me && $0.value >= seq && thread.joined[$0.key, default: 0] < seq }.count
        }
        let newestRead = thread.lines.last { line in
            guard let seq = line.seq, line.from.lowercased() == me else { return false }
            return others(thread.read, seq) > 0
        }?.seq
        var result: [Pieces] = []
        var spans: [Range<Int>] = []
        var previous: Date?
        // Membership and title lines, each after the message it followed, dim and centred like a time line.
        var notices = thread.notices[...]
        func noticeRow(_ notice: ChatState.Notice) -> Pieces {
            let text = "· \(notice.text) ·"
            let side = max(0, (width - DisplayWidth.of(text)) / 2)
            return [(String(repeating: " ", count: side) + text, .dim)]
        }
        for line in thread.lines {
            while let notice = notices.first, let seq = line.seq, notice.afterSeq < seq {
                result.append(noticeRow(notice))
                notices = notices.dropFirst()
            }
            if previous.map({ line.time.timeIntervalSince($0) >= 300 }) ?? true {
                let label = " \(relative.format(line.time, now: now)) "
                let side = max(0, (width - DisplayWidth.of(label)) / 2)
                result.append([(String(repeating: " ", count: side) + label, .dim)])
            }
            previous = line.time
            let first = result.count
            let picked = line.seq != nil && line.seq == state.picking?.seq
            let ours = line.from.lowercased() == me
            let name = ours ? " you: " : " \(state.shown(line.from)): "
            let indent = DisplayWidth.of(name)
            var text = line.recalled ? "(recalled)" : ChatText.printable(line.text)
            if !line.recalled, let caption = line.media?.caption, !caption.isEmpty {
                text += "\n" + ChatText.printable(caption)
            }
            if line.edited, !line.recalled { text += " (edited)" }
            if ours {
                if let failure = line.failure {
                    text += " ✗ \(failure)"
                } else if let seq = line.seq {
                    if seq == newestRead {
                        let readers = others(thread.read, seq)
                        let group = if case .group = thread.conversation { true } else { false }
                        // No-break spaces keep a mark on one row.
                        text += group ? " ✓✓\u{A0}read\u{A0}by\u{A0}\(readers)" : " ✓✓\u{A0}read"
                    } else {
                        text += others(thread.delivered, seq) > 0 ? " ✓✓" : " ✓"
                    }
                } else {
                    text += " …"
                }
            }
            let textWidth = max(4, width - indent)
            var parts: Pieces = []
            if let quote = line.replyTo {
                let who = quote.visible ? "\(quote.from): " : ""
                parts.append(
                    (Self.shortened(ChatText.printable("↳ " + who + Self.quoted(quote)), width: textWidth), .dim)
                )
            }
            let style: Row.Style = picked ? .reverse : line.recalled ? .dim : .plain
            parts += Self.wrap(text, width: textWidth).map { ($0, style) }
            for (index, part) in parts.enumerated() {
                let lead =
                    index == 0 ? (name, ours ? Row.Style.dim : .bold) : (String(repeating: " ", count: indent), .plain)
                result.append([lead, part])
            }
            if !line.recalled, !line.reactions.isEmpty {
                result += Self.reactionRows(line.reactions, indent: indent, width: textWidth)
            }
            spans.append(first..<result.count)
        }
        // Those after the newest message (at the end, after what waits in the outbox too).
        result += notices.map(noticeRow)
        return (result, spans)
    }

    /// The message a reply answers, in a few words: its text or file, "(recalled)", or, for a reader who joined
    /// after it, that it is from before then.
    static func quoted(_ quote: ChatReply) -> String {
        guard quote.visible else { return "(a message from before you joined)" }
        if quote.recalled { return "(recalled)" }
        if let media = quote.media {
            return ChatText.describe(media) + (media.caption.isEmpty ? "" : " " + media.caption)
        }
        return quote.text.replacing("\n", with: " ")
    }

    /// A message's reactions under it, "👍 2  好 1", this user's own in bold; as many rows as they need.
    static func reactionRows(_ reactions: [ChatReaction], indent: Int, width: Int) -> [Pieces] {
        var rows: [Pieces] = []
        var row: Pieces = [(String(repeating: " ", count: indent), .plain)]
        var used = 0
        for reaction in reactions {
            let count = " \(reaction.count)"
            let label = ChatScreen.fit(ChatText.printable(reaction.key), width: max(1, width - count.count)) + count
            let columns = DisplayWidth.of(label) + (used > 0 ? 2 : 0)
            if used > 0, used + columns > width {
                rows.append(row)
                row = [(String(repeating: " ", count: indent), .plain)]
                used = 0
            }
            if used > 0 { row.append(("  ", .plain)) }
            row.append((label, reaction.mine ? .bold : .dim))
            used += DisplayWidth.of(label) + (used > 0 ? 2 : 0)
        }
        rows.append(row)
        return rows
    }

    /// The results of a search, two rows each (where and who and when; the fragment with the matched words in
    /// bold), the chosen one reversed, scrolled to keep it in view.
    static func searchRows(
        _ search: ChatState.SearchView,
        state: ChatState,
        width: Int,
        rows: Int,
        now: Date
    )
        -> [Pieces]
    {
        var result: [Pieces] = []
        if search.results.isEmpty {
            result.append([(search.loading ? " searching…" : " nothing found", .dim)])
            return result + Array(repeating: [], count: max(0, rows - 1))
        }
        let relative = RelativeTime()
        let perResult = 2
        // A row kept for "more" when more may come.
        let shown = max(1, (rows - (search.more || search.loading ? 1 : 0)) / perResult)
        let first = max(0, min(search.selected - shown / 2, search.results.count - shown))
        for (index, found) in search.results.enumerated().dropFirst(first).prefix(shown) {
            let chosen = index == search.selected
            let message = found.message
            let place =
                " \(message.conversation) · \(message.from.lowercased() == state.me.lowercased() ? "you" : message.from)"
                + " · \(relative.format(message.time, now: now))"
            result.append([(Self.shortened(ChatText.printable(place), width: width), chosen ? .reverse : .bold)])
            result.append(Self.marked(found, width: width - 3, chosen: chosen))
        }
        if search.more || search.loading {
            result.append([(search.loading ? " loading more…" : " ↓ for more", .dim)])
        }
        return Array((result + Array(repeating: [], count: rows)).prefix(rows))
    }

    /// A result's fragment on one row, indented, its matched ranges bold (reversed too for the chosen result).
    static func marked(_ found: SearchResult, width: Int, chosen: Bool) -> Pieces {
        // The marks count Unicode scalars.
        let characters = Array(found.fragment.unicodeScalars)
        var pieces: Pieces = [("   ", .plain)]
        var used = 0
        var at = 0
        let marks = found.marks.filter { $0.lowerBound >= 0 && $0.upperBound <= characters.count && !$0.isEmpty }
            .sorted { $0.lowerBound < $1.lowerBound }
        let text = { (scalars: ArraySlice<Unicode.Scalar>) in String(String.UnicodeScalarView(scalars)) }
        var segments: [(String, Bool)] = []
        for mark in marks where mark.upperBound > at {
            // A mark overlapping the one before is bold from where that one ended.
            let start = max(at, mark.lowerBound)
            if start > at { segments.append((text(characters[at..<start]), false)) }
            segments.append((text(characters[start..<mark.upperBound]), true))
            at = mark.upperBound
        }
        if at < characters.count { segments.append((text(characters[at...]), false)) }
        // (No segment is empty: an empty cut is a character that does not fit, where the row ends.)
        for (text, bold) in segments {
            let cut = Self.fit(ChatText.printable(text), width: width - used)
            guard !cut.isEmpty else { break }
            pieces.append((cut, bold ? .bold : chosen ? .reverse : .plain))
            used += DisplayWidth.of(cut)
        }
        return pieces
    }

    /// The keys and commands (``ChatHelp``), a row each: the keys, then what they do, wrapped under it.
    static func help(width: Int) -> [Pieces] {
        var rows: [Pieces] = [[(" Keys and commands (Esc closes; any other key closes and does what it does)", .bold)]]
        // Commands first: on a small terminal, the keys are what gets cut.
        let sections: [[(String, String)]] = [
            ChatHelp.commands.map { ($0.command, $0.does) }, ChatHelp.keys.map { ($0.keys, $0.does) },
        ]
        for entries in sections {
            rows.append([])
            // Short labels in a column of their own; longer ones on a row of their own, what they do under them.
            let column = min(max(8, width / 3), 22, (entries.map { DisplayWidth.of($0.0) }.max() ?? 0) + 3)
            for (keys, does) in entries {
                let left = " " + keys
                let pad = max(1, column - DisplayWidth.of(left))
                let wrapped = Self.wrap(does, width: max(8, width - column))
                if DisplayWidth.of(left) >= column {
                    rows.append([(left, .bold)])
                    for part in wrapped {
                        rows.append([(String(repeating: " ", count: column), .plain), (part, .plain)])
                    }
                } else {
                    rows.append([(left + String(repeating: " ", count: pad), .bold), (wrapped.first ?? "", .plain)])
                    for part in wrapped.dropFirst() {
                        rows.append([(String(repeating: " ", count: column), .plain), (part, .plain)])
                    }
                }
            }
        }
        return rows
    }

    // MARK: Text

    /// `text` as it fits in `width` columns: whole, or cut and ended with "…" (after its last whole word, when one
    /// ends in the last third of the width).
    static func shortened(_ text: String, width: Int) -> String {
        guard width > 0 else { return "" }
        guard DisplayWidth.of(text) > width else { return text }
        var cut = Self.fit(text, width: width - 1)
        let next = text.dropFirst(cut.count).first
        if next != " ", let space = cut.lastIndex(of: " "), DisplayWidth.of(cut[..<space]) >= (width - 1) * 2 / 3 {
            cut = String(cut[..<space])
        }
        while cut.last == " " { cut.removeLast() }
        return cut + "…"
    }

    /// Cuts text to at most `width` display columns (never splitting a character), line breaks as spaces.
    static func fit(_ text: String, width: Int) -> String {
        guard width > 0 else { return "" }
        var result = ""
        var used = 0
        for character in text {
            let shown: Character = character == "\n" ? " " : character
            let columns = DisplayWidth.of(shown)
            guard used + columns <= width else { break }
            result.append(shown)
            used += columns
        }
        return result
    }

    /// Breaks text into rows of at most `width` display columns: at its line breaks; else at the last place a row
    /// may end: after a space (which goes), or before or after a wide (CJK) character, where no space is needed;
    /// and a word longer than a row between its characters.
    static func wrap(_ text: String, width: Int) -> [String] {
        var rows: [String] = []
        for paragraph in text.split(separator: "\n", omittingEmptySubsequences: false) {
            var row: [Character] = []
            var used = 0
            // Where the row may be cut, and how many characters (a space) the cut drops.
            var cut: (at: Int, drop: Int)?
            for character in paragraph {
                let columns = DisplayWidth.of(character)
                if columns == 2 { cut = (row.count, 0) }
                while used + columns > width, !row.isEmpty {
                    let (at, drop) = cut.flatMap { $0.at > 0 ? $0 : nil } ?? (row.count, 0)
                    rows.append(String(row[..<at]))
                    row.removeFirst(min(row.count, at + drop))
                    used = row.reduce(0) { $0 + DisplayWidth.of($1) }
                    cut = nil
                }
                row.append(character)
                used += columns
                if character == " " {
                    cut = (row.count - 1, 1)
                } else if columns == 2 {
                    cut = (row.count, 0)
                }
            }
            rows.append(String(row))
        }
        return rows
    }
}
