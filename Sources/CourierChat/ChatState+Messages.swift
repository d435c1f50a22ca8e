import CourierClient
import Foundation

/// What the chat does to messages already sent: edit one of ours (↑ on an empty line, `/edit`), answer one (`/reply`),
/// react to one (`/react`), and find one (`/search`, whose results jump to the message in its conversation).
extension ChatState {
    /// A message of ours whose text the input line holds: Enter saves the line as its new text, Esc leaves it as it was.
    struct Editing: Hashable {
        var conversation: Conversation
        var seq: UInt64
        /// Its text when the edit began: saving it unchanged sends nothing.
        var original: String
        /// Whether it is a file's caption (which may be emptied; a text may not).
        var caption = false
    }

    /// The message the next line sent answers (`/reply`), until it is sent or Esc.
    struct Replying: Hashable {
        var conversation: Conversation
        var quote: ChatReply
    }

    /// A message of the open conversation picked with ↑ and ↓ (highlighted), and what Enter then does with it.
    struct Picking: Hashable {
        enum Purpose: Hashable {
            /// Answer it: with this text at once, or (nil) with the next line sent.
            case reply(String?)
            /// Put this reaction on it, or take it off if this user's is there.
            case react(String)
            /// Only show it (a search result jumped to): Enter or Esc ends it.
            case look
        }

        var purpose: Purpose
        var seq: UInt64
    }

    /// A search's results, shown in place of the open conversation until Esc or a jump (Enter).
    struct SearchView: Hashable {
        /// Which search this is: answers to an earlier one (even for the same words) are dropped.
        var number: Int
        var query: String
        var results: [SearchResult] = []
        /// Whether older matches remain, and the cursor that asks for them.
        var more = false
        var next: UInt64 = 0
        /// The highlighted result.
        var selected = 0
        /// Whether a page is on its way (the first, or the next).
        var loading = true
    }

    /// A message a search result jumps to, in a conversation whose history is loaded page by page until it shows.
    struct Jump: Hashable {
        var conversation: Conversation
        var seq: UInt64
        /// Pages asked for so far: the jump gives up after ``ChatState/jumpPages``.
        var pages = 0
        /// The page it waits for (the `beforeSeq` asked): another page of the conversation coming is not its answer.
        var awaiting: UInt64?
    }

    /// The most pages of history a jump loads before it gives up (``historyPage`` messages each).
    static let jumpPages = 40

    /// Whether a line is one of ours that can be edited: committed, not recalled.
    func isEditable(_ line: Line) -> Bool {
        self.isMine(line) && line.seq != nil && !line.recalled && line.failure == nil
    }

    /// Whether a line can be answered or reacted to: committed and not recalled.
    static func isPickable(_ line: Line) -> Bool {
        line.seq != nil && !line.recalled
    }

    /// The text a line's edit starts from: a text's text, a file's caption.
    static func editableText(of line: Line) -> String {
        line.media.map(\.caption) ?? line.text
    }

    // MARK: Editing

    /// ↑ on an empty line, or `/edit`: the input line holds this user's newest message in the open conversation.
    /// False when there is none (↑ then scrolls).
    mutating func startEditing() -> Bool {
        guard let thread = self.openThread, let line = thread.lines.last(where: self.isEditable), let seq = line.seq
        else { return false }
        let text = Self.editableText(of: line)
        self.editing = Editing(conversation: thread.conversation, seq: seq, original: text, caption: line.media != nil)
        self.replying = nil
        self.picking = nil
        self.jump = nil
        self.input = LineEditor()
        self.input.insert(text)
        self.scroll = 0
        return true
    }

    /// Enter while editing: the line as the message's new text.
    mutating func saveEdit(_ editing: Editing, text: String) -> [ChatAction] {
        self.editing = nil
        guard editing.caption || !text.trimmingCharacters(in: .whitespaces).isEmpty else {
            self.notice = "an edit cannot empty a message; /recall takes it back"
            return []
        }
        guard text != editing.original else {
            self.notice = "not changed"
            return []
        }
        self.notice = "saving your edit…"
        return [.edit(.seq(editing.seq, in: editing.conversation), text: text)]
    }

    /// `/edit [TEXT]`: edits this user's newest message here, in the line (or at once to TEXT).
    mutating func editCommand(_ text: String) -> [ChatAction] {
        guard self.openThread != nil else {
            self.notice = "open a conversation first: /open NAME or /open #GROUP"
            return []
        }
        guard self.startEditing() else {
            self.notice = "nothing of yours to edit here"
            return []
        }
        guard !text.isEmpty, let editing = self.editing else {
            self.notice = nil
            return []
        }
        _ = self.input.take()
        return self.saveEdit(editing, text: text)
    }

    // MARK: Picking a message

    /// `/reply [TEXT]` and `/react KEY`: the newest message of the open conversation is highlighted, for ↑ and ↓ to
    /// move and Enter to pick.
    mutating func startPicking(_ purpose: Picking.Purpose, now: Date) -> [ChatAction] {
        guard let thread = self.openThread else {
            self.notice = "open a conversation first: /open NAME or /open #GROUP"
            return []
        }
        guard let seq = thread.lines.last(where: Self.isPickable)?.seq else {
            self.notice = "no message here to \(purpose.verb)"
            return []
        }
        self.editing = nil
        self.jump = nil
        self.picking = Picking(purpose: purpose, seq: seq)
        self.scrollToShow(seq, now: now)
        return []
    }

    /// ↑ or ↓ (by one message), PgUp or PgDn (by several) while picking: the highlight moves, the pane follows; past
    /// the oldest loaded message the page before it is asked for.
    mutating func movePick(by step: Int, now: Date) -> [ChatAction] {
        guard var picking = self.picking, let thread = self.openThread else { return [] }
        let pickable = thread.lines.filter(Self.isPickable).compactMap(\.seq)
        guard let at = pickable.firstIndex(of: picking.seq) else { return [] }
        let to = max(0, min(pickable.count - 1, at - step))
        picking.seq = pickable[to]
        self.picking = picking
        self.scrollToShow(picking.seq, now: now)
        if at - step < 0, thread.moreHistory, self.connection == .connected,
            let oldest = thread.lines.lazy.compactMap(\.seq).min()
        {
            self.threads[Self.key(thread.conversation)]?.moreHistory = false
            return [.loadHistory(thread.conversation, beforeSeq: oldest)]
        }
        return []
    }

    /// Enter while picking: what the purpose says, on the highlighted message.
    mutating func pick(now: Date) -> [ChatAction] {
        guard let picking = self.picking, let thread = self.openThread else { return [] }
        self.picking = nil
        self.notice = nil
        guard let line = thread.lines.first(where: { $0.seq == picking.seq }), Self.isPickable(line) else {
            return []
        }
        switch picking.purpose {
        case .look:
            return []
        case .react(let key):
            let mine = line.reactions.contains { $0.key == key && $0.mine }
            self.notice = mine ? "taking \(key) off…" : "reacting \(key)…"
            return [.react(.seq(picking.seq, in: thread.conversation), key: key, on: !mine)]
        case .reply(let text):
            let quote = ChatReply(
                seq: picking.seq,
                id: line.id,
                from: line.from,
                text: line.media == nil ? line.text : "",
                media: line.media,
                recalled: false
            )
            self.replying = Replying(conversation: thread.conversation, quote: quote)
            guard let text, !text.isEmpty else { return [] }
            return self.send(text, now: now)
        }
    }

    /// Scrolls the open conversation so that the message `seq` shows whole (or its start, when it is taller than the
    /// pane).
    mutating func scrollToShow(_ seq: UInt64, now: Date) {
        guard let thread = self.openThread, let index = thread.lines.firstIndex(where: { $0.seq == seq }) else {
            return
        }
        let layout = ChatScreen.messageLayout(of: thread, state: self, now: now)
        let total = layout.rows.count
        let span = layout.spans[index]
        let visible = self.messageRows
        var end = total - self.scroll
        if span.upperBound > end { end = span.upperBound }
        if span.lowerBound < end - visible { end = span.lowerBound + visible }
        self.scroll = max(0, min(total - end, total - visible))
        if total <= visible { self.scroll = 0 }
    }

    // MARK: Sending

    /// Sends a line to the open conversation: an answer to the message `/reply` picked, if one was.
    mutating func send(_ text: String, now: Date) -> [ChatAction] {
        guard let thread = self.openThread else {
            self.notice = "open a conversation first: /open NAME or /open #GROUP"
            return []
        }
        let id = UUID().uuidString
        var line = Line(id: id, from: self.me, seq: nil, time: now, text: text)
        var replyTo: UInt64?
        if let replying = self.replying, Self.key(replying.conversation) == Self.key(thread.conversation) {
            line.replyTo = replying.quote
            replyTo = replying.quote.seq
        }
        self.replying = nil
        self.threads[Self.key(thread.conversation)]?.lines.append(line)
        self.scroll = 0
        self.typingSent = nil
        if let replyTo { return [.sendReply(id: id, text: text, to: thread.conversation, replyTo: replyTo)] }
        return [.send(id: id, text: text, to: thread.conversation)]
    }

    // MARK: Search

    /// `/search QUERY`: asks the server, over every conversation; the results show in the pane.
    mutating func startSearch(_ query: String) -> [ChatAction] {
        guard !query.isEmpty else {
            self.notice = "usage: /search WORDS (in every conversation; Enter on a result opens it there)"
            return []
        }
        self.picking = nil
        self.jump = nil
        self.searches += 1
        self.search = SearchView(number: self.searches, query: query)
        return [.search(query, before: 0, number: self.searches)]
    }

    /// A page of results of search `number` (an older search's are dropped): the first, or the next one appended.
    mutating func searched(_ number: Int, page: SearchResults, before: UInt64) {
        guard var view = self.search, view.number == number, view.loading else { return }
        if before == 0 {
            view.results = page.results
            view.selected = 0
        } else {
            view.results += page.results
        }
        view.more = page.more
        view.next = page.next
        view.loading = false
        self.search = view
    }

    /// A search's page failed: the notice says why; the results already shown stay (none: the view goes).
    mutating func searchFailed(_ number: Int, _ message: String) {
        guard var view = self.search, view.number == number else { return }
        view.loading = false
        self.search = view.results.isEmpty ? nil : view
        self.notice = "search failed: \(message)"
    }

    /// ↑ ↓ PgUp PgDn in the results: the highlight moves; past the last, the next page is asked for.
    mutating func moveSearch(by step: Int) -> [ChatAction] {
        guard var view = self.search, !view.results.isEmpty else { return [] }
        let wanted = view.selected + step
        view.selected = max(0, min(view.results.count - 1, wanted))
        var actions: [ChatAction] = []
        if wanted >= view.results.count - 1, view.more, !view.loading {
            view.loading = true
            actions = [.search(view.query, before: view.next, number: view.number)]
        }
        self.search = view
        return actions
    }

    /// Enter on a result: its conversation opens at the message, highlighted; its history is loaded back to it first
    /// when it is older than what the chat holds.
    mutating func jumpToResult(now: Date) -> [ChatAction] {
        guard let view = self.search, view.results.indices.contains(view.selected) else { return [] }
        let message = view.results[view.selected].message
        self.search = nil
        var actions = self.select(message.conversation, now: now)
        if self.closed.removeValue(forKey: Self.key(message.conversation)) != nil {
            actions.append(.closedChanged(self.closed))
        }
        var jump = Jump(conversation: message.conversation, seq: message.seq)
        // Opening it for the first time asks for its newest page already: the jump waits for that one.
        if actions.contains(.loadHistory(message.conversation, beforeSeq: 0)) {
            jump.pages = 1
            jump.awaiting = 0
            self.jump = jump
            return actions
        }
        self.jump = jump
        actions += self.continueJump(answering: nil, now: now)
        return actions
    }

    /// Goes on with a jump: shows the message if it is loaded; else asks for the page before the oldest held, unless
    /// its page is on its way (`answering`: the page that just came, by the `beforeSeq` it answers), none is left, or
    /// the jump has gone back too far.
    mutating func continueJump(answering: UInt64?, now: Date) -> [ChatAction] {
        guard var jump = self.jump else { return [] }
        let key = Self.key(jump.conversation)
        guard key == self.open, let thread = self.threads[key] else {
            self.jump = nil
            return []
        }
        if let line = thread.lines.first(where: { $0.seq == jump.seq }) {
            self.jump = nil
            // History holds a recalled message as recalled: there is nothing to show of it.
            guard !line.recalled else {
                self.notice = "that message was recalled"
                return []
            }
            self.picking = Picking(purpose: .look, seq: jump.seq)
            self.scrollToShow(jump.seq, now: now)
            return []
        }
        if let awaiting = jump.awaiting, answering != awaiting { return [] }
        let oldest = thread.lines.lazy.compactMap(\.seq).min()
        if oldest.map({ $0 < jump.seq }) ?? false || (jump.pages > 0 && !thread.moreHistory) {
            // The pages reached back past it, or to the first message: it is gone (recalled since the search).
            self.jump = nil
            self.notice = "that message is no longer in \(jump.conversation)"
            return []
        }
        guard self.connection == .connected else {
            self.jump = nil
            self.notice = "offline: scroll up to the message once connected"
            return []
        }
        guard jump.pages < Self.jumpPages else {
            self.jump = nil
            self.notice = "that message is over \(Self.jumpPages * Self.historyPage) messages back; scroll up to it"
            return []
        }
        jump.pages += 1
        jump.awaiting = oldest ?? 0
        self.jump = jump
        self.threads[key]?.historyRequested = true
        self.threads[key]?.moreHistory = false
        return [.loadHistory(jump.conversation, beforeSeq: oldest ?? 0)]
    }

    /// A page of history could not be had: it can be asked for again (scrolling), and a jump waiting for it ends.
    mutating func historyFailed(_ conversation: Conversation, beforeSeq: UInt64) {
        let key = Self.key(conversation)
        if beforeSeq == 0 {
            self.threads[key]?.historyRequested = false
        } else {
            self.threads[key]?.moreHistory = true
        }
        if let jump = self.jump, Self.key(jump.conversation) == key, jump.awaiting == beforeSeq {
            self.jump = nil
        }
    }
}

extension ChatState.Picking.Purpose {
    var verb: String {
        switch self {
        case .reply: "answer"
        case .react: "react to"
        case .look: "show"
        }
    }
}
