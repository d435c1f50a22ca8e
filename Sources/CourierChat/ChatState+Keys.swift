import CourierClient
import Foundation

/// Keys and the commands typed in the line.
extension ChatState {
    /// A key: what it does, and when the open conversation was only glanced at (opened by the chat) and the key acts
    /// in it (scrolling it, writing in it or sending: not a command, not leaving it), the conversation is read from
    /// then on.
    mutating func handle(_ key: Key, now: Date) -> [ChatAction] {
        guard self.glancing else { return self.press(key, now: now) }
        let writing = { (text: String) in !text.isEmpty && !text.hasPrefix("/") }
        switch key {
        case .up, .down, .pageUp, .pageDown:
            // Search results cover the conversation: moving through them is not reading it.
            guard self.search == nil else { return self.press(key, now: now) }
            return self.readGlanced() + self.press(key, now: now)
        case .enter where writing(self.input.text):
            return self.readGlanced() + self.press(key, now: now)
        case .character, .paste, .backspace, .delete:
            let actions = self.press(key, now: now)
            return (self.glancing && writing(self.input.text) ? self.readGlanced() : []) + actions
        default:
            return self.press(key, now: now)
        }
    }

    /// The glanced-at open conversation is read now.
    private mutating func readGlanced() -> [ChatAction] {
        self.glancing = false
        guard let thread = self.openThread else { return [] }
        let key = Self.key(thread.conversation)
        self.threads[key]?.unread = 0
        self.threads[key]?.mentions = 0
        guard thread.lastSeq > thread.readUpTo else { return [] }
        self.threads[key]?.readUpTo = thread.lastSeq
        return [.markRead(thread.conversation, upToSeq: thread.lastSeq)]
    }

    private mutating func press(_ key: Key, now: Date) -> [ChatAction] {
        if key != .escape, self.notice != nil, !self.isEditing(key) { self.notice = nil }
        // The help closes at the next key (which then does what it does, Esc aside).
        if self.helpShown {
            self.helpShown = false
            if key == .escape { return [] }
        }
        if let handled = self.pressInMode(key, now: now) { return handled }
        switch key {
        case .character(let character):
            self.input.insert(String(character))
            return self.typed(now: now)
        case .paste(let text):
            self.input.insert(text)
            return self.typed(now: now)
        case .enter: return self.submit(now: now)
        case .backspace:
            self.input.backspace()
            return self.typed(now: now)
        case .delete:
            self.input.delete()
            return self.typed(now: now)
        case .left, .control("b"): self.input.left()
        case .right, .control("f"): self.input.right()
        case .home, .control("a"): self.input.home()
        case .end, .control("e"): self.input.end()
        case .control("u"):
            self.input.deleteToStart()
            return self.typed(now: now)
        case .control("k"):
            self.input.deleteToEnd()
            return self.typed(now: now)
        case .control("w"):
            self.input.deleteWord()
            return self.typed(now: now)
        case .tab, .altDown, .control("n"): return self.switchConversation(by: 1, now: now)
        case .backTab, .altUp, .control("p"): return self.switchConversation(by: -1, now: now)
        case .up:
            // On an empty line, at the newest message, ↑ edits this user's last message (as in most messengers).
            // (Not while the line edits or answers a message already: ↑ then scrolls.)
            if self.input.isEmpty, self.scroll == 0, self.editing == nil, self.replying == nil, self.startEditing() {
                return []
            }
            return self.scroll(by: 1, now: now)
        case .down: self.scroll = max(0, self.scroll - 1)
        case .pageUp: return self.scroll(by: max(1, self.messageRows - 1), now: now)
        case .pageDown: self.scroll = max(0, self.scroll - max(1, self.messageRows - 1))
        case .escape: self.notice = nil
        case .control("c"): return [.quit]
        case .control("d") where self.input.isEmpty: return [.quit]
        case .control("l"): return [.redraw]
        default: break
        }
        return []
    }

    /// Keys that mean something else while search results show, a message is highlighted, or the line edits or
    /// answers a message: what they do then, or nil for a key that does what it always does.
    private mutating func pressInMode(_ key: Key, now: Date) -> [ChatAction]? {
        // Esc closes a notice first (which may hide what the status row says of a mode), then the mode.
        if key == .escape, self.notice != nil {
            self.notice = nil
            return []
        }
        if key == .escape, self.jump != nil {
            self.jump = nil
            return []
        }
        if self.search != nil {
            switch key {
            case .up: return self.moveSearch(by: -1)
            case .down: return self.moveSearch(by: 1)
            case .pageUp: return self.moveSearch(by: -5)
            case .pageDown: return self.moveSearch(by: 5)
            case .enter where self.input.isEmpty: return self.jumpToResult(now: now)
            case .escape:
                self.search = nil
                return []
            default: break
            }
        }
        if self.picking != nil {
            switch key {
            case .up: return self.movePick(by: 1, now: now)
            case .down: return self.movePick(by: -1, now: now)
            case .pageUp: return self.movePick(by: 5, now: now)
            case .pageDown: return self.movePick(by: -5, now: now)
            case .enter where self.input.isEmpty: return self.pick(now: now)
            case .escape:
                self.picking = nil
                self.notice = nil
                return []
            default:
                // Any other key ends the pick, and does what it does.
                self.picking = nil
            }
        }
        if key == .escape, self.editing != nil {
            self.editing = nil
            _ = self.input.take()
            self.notice = nil
            return []
        }
        if key == .escape, self.replying != nil {
            self.replying = nil
            self.notice = nil
            return []
        }
        return nil
    }

    private func isEditing(_ key: Key) -> Bool {
        switch key {
        case .character, .paste, .backspace, .delete: true
        default: false
        }
    }

    /// After the input changed: says we are typing (renewed every few seconds), or that we stopped.
    private mutating func typed(now: Date) -> [ChatAction] {
        guard let thread = self.openThread, self.editing == nil else { return [] }
        if self.input.isEmpty || self.input.text.hasPrefix("/") { return self.stopTyping() }
        if let sent = self.typingSent, Self.key(sent.conversation) == Self.key(thread.conversation),
            now.timeIntervalSince(sent.at) < Self.typingRenewal
        {
            return []
        }
        self.typingSent = (thread.conversation, now)
        return [.typing(true, thread.conversation)]
    }

    private mutating func stopTyping() -> [ChatAction] {
        guard let sent = self.typingSent else { return [] }
        self.typingSent = nil
        return [.typing(false, sent.conversation)]
    }

    private mutating func submit(now: Date) -> [ChatAction] {
        let text = self.input.text
        // While editing, the line is the message's new text, whatever it starts with.
        if let editing = self.editing {
            _ = self.input.take()
            return self.saveEdit(editing, text: text)
        }
        if text.hasPrefix("/") {
            _ = self.input.take()
            return self.stopTyping() + self.command(text, now: now)
        }
        guard !text.trimmingCharacters(in: .whitespaces).isEmpty else { return [] }
        guard self.openThread != nil else {
            self.notice = "open a conversation first: /open NAME or /open #GROUP"
            return []
        }
        _ = self.input.take()
        self.search = nil
        return self.send(text, now: now)
    }

    private mutating func command(_ line: String, now: Date) -> [ChatAction] {
        let words = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        // What follows the command's name, as typed.
        let rest = line.drop { $0 != " " }.trimmingCharacters(in: .whitespaces)
        // A command other than these ends an edit begun (its text was taken by the command); any but /search
        // closes the search results (what it does shows in the conversation).
        if self.editing != nil, words.first != "/edit" { self.editing = nil }
        if words.first != "/search", words.first != "/f" { self.search = nil }
        switch words.first {
        case "/edit", "/e":
            return self.editCommand(rest)
        case "/reply", "/r":
            return self.startPicking(.reply(rest.isEmpty ? nil : rest), now: now)
        case "/react":
            guard !rest.isEmpty else {
                self.notice = "usage: /react EMOJI (or a short word); again takes it off"
                return []
            }
            return self.startPicking(.react(rest), now: now)
        case "/search", "/f":
            return self.startSearch(rest)
        case "/open", "/o":
            guard words.count == 2, let target = Self.conversation(named: words[1]) else {
                self.notice = "usage: /open NAME (a user) or /open #GROUP"
                return []
            }
            self.closed[Self.key(target)] = nil
            if let existing = self.threads.values.first(where: { Self.key($0.conversation) == Self.key(target) }) {
                return self.select(existing.conversation, now: now) + [.closedChanged(self.closed)]
            }
            self.openBefore = self.open
            self[thread: target].historyRequested = false
            return self.select(target, now: now)
        case "/send", "/s":
            let path = line.drop { $0 != " " }.trimmingCharacters(in: .whitespaces)
            guard !path.isEmpty else {
                self.notice = "usage: /send PATH (an image, voice clip, video or any file)"
                return []
            }
            guard let thread = self.openThread else {
                self.notice = "open a conversation first: /open NAME or /open #GROUP"
                return []
            }
            let expanded = ChatFiles.typedPath(path)
            let id = UUID().uuidString
            let name = (expanded as NSString).lastPathComponent
            self.uploads[id] = name
            self.threads[Self.key(thread.conversation)]?.lines.append(
                Line(id: id, from: self.me, seq: nil, time: now, text: "[sending \(name)]")
            )
            self.scroll = 0
            return [.sendFile(id: id, path: expanded, to: thread.conversation)]
        case "/close":
            return self.closeOpen(now: now)
        case "/group", "/g":
            return self.groupCommand(Array(words.dropFirst()), rest: rest)
        case "/mute":
            return self.muteCommand(Array(words.dropFirst()))
        case "/unmute":
            return self.muteCommand(["all"])
        case "/block":
            guard case .user(let user)? = self.openThread?.conversation, words.count <= 2,
                words.count == 1 || words[1] == "--off"
            else {
                self.notice = "usage: /block in a direct chat (/block --off unblocks)"
                return []
            }
            return [.setBlocked(user, words.count == 1)]
        case "/name":
            // Alone it shows the name; clearing it is said outright, never a slip of Enter.
            if rest.isEmpty {
                guard self.profilesUpdated[self.me.lowercased()] != nil else {
                    self.notice = "your profile has not come from the server yet: try /name again in a moment"
                    return self.profilesWanted()
                }
                let name = self.displayNames[self.me.lowercased()]
                self.notice =
                    name.map {
                        "your display name is \(ChatText.printable($0)) (/name TEXT changes it, /name --clear clears it)"
                    }
                    ?? "you have no display name: /name TEXT sets one"
                return []
            }
            return [.setDisplayName(rest == "--clear" ? "" : rest)]
        case "/recall":
            return self.recallNewest()
        case "/save":
            let path = line.drop { $0 != " " }.trimmingCharacters(in: .whitespaces)
            guard let media = self.newestMedia(for: "/save") else { return [] }
            return [.save(media, to: path.isEmpty ? nil : path)]
        case "/view":
            guard let media = self.newestMedia(for: "/view") else { return [] }
            return [.view(media)]
        case "/quit", "/q":
            return [.quit]
        case "/help", "/h", "/?":
            self.helpShown = true
            return []
        default:
            self.notice = "unknown command \(words.first ?? line); try /help"
            return []
        }
    }

    /// `/close`: the open conversation leaves the list until a message newer than its newest comes (or `/open`);
    /// the next one in the list opens.
    private mutating func closeOpen(now: Date) -> [ChatAction] {
        guard let thread = self.openThread else {
            self.notice = "no conversation is open"
            return []
        }
        let key = Self.key(thread.conversation)
        let next = self.ordered.first { Self.key($0.conversation) != key }
        self.closed[key] = thread.lastSeq
        // What was begun in it ends with it.
        self.picking = nil
        self.jump = nil
        self.replying = nil
        if self.editing != nil {
            self.editing = nil
            _ = self.input.take()
        }
        var actions = self.stopTyping()
        if let next {
            actions += self.select(next.conversation, now: now, reading: false)
        } else {
            self.open = nil
        }
        self.notice = "closed \(thread.conversation); /open \(thread.conversation) brings it back"
        return actions + [.closedChanged(self.closed)]
    }

    /// `/recall`: this user's newest committed message in the open conversation that is not recalled yet.
    private mutating func recallNewest() -> [ChatAction] {
        guard let thread = self.openThread else {
            self.notice = "open a conversation first: /open NAME or /open #GROUP"
            return []
        }
        guard
            let line = thread.lines.last(where: {
                $0.from.lowercased() == self.me.lowercased() && $0.seq != nil && !$0.recalled
            })
        else {
            self.notice = "nothing of yours to recall in \(thread.conversation)"
            return []
        }
        self.notice = "recalling your message #\(line.seq ?? 0)…"
        return [.recall(id: line.id, in: thread.conversation)]
    }

    /// The newest file in the open conversation, or nil with a notice saying why.
    private mutating func newestMedia(for command: String) -> MediaInfo? {
        guard let thread = self.openThread else {
            self.notice = "open a conversation first: /open NAME or /open #GROUP"
            return nil
        }
        guard let media = thread.lines.last(where: { $0.media != nil && !$0.recalled })?.media else {
            self.notice = "no file in \(thread.conversation) to \(command.dropFirst())"
            return nil
        }
        return media
    }

    /// `#team` is a group, `@bob` or `bob` a user.
    static func conversation(named name: String) -> Conversation? {
        if name.hasPrefix("#") {
            let group = String(name.dropFirst())
            return group.isEmpty ? nil : .group(group)
        }
        let user = name.hasPrefix("@") ? String(name.dropFirst()) : name
        return user.isEmpty ? nil : .user(user)
    }

    private mutating func switchConversation(by step: Int, now: Date) -> [ChatAction] {
        let ordered = self.ordered
        guard !ordered.isEmpty else {
            self.notice = "no conversations yet: /open NAME or /open #GROUP"
            return []
        }
        let current = ordered.firstIndex { Self.key($0.conversation) == self.open }
        let next =
            if let current { (current + step + ordered.count) % ordered.count } else {
                step > 0 ? 0 : ordered.count - 1
            }
        return self.select(ordered[next].conversation, now: now)
    }

    /// Opens a conversation: its unread messages are read (unless the chat opened it by itself: `reading` false,
    /// see ``glancing``), and its history is asked for the first time.
    mutating func select(_ conversation: Conversation, now: Date, reading: Bool = true) -> [ChatAction] {
        var actions = self.stopTyping()
        let key = Self.key(conversation)
        // What was begun in another conversation ends there.
        self.picking = nil
        self.jump = nil
        self.search = nil
        if let editing = self.editing, Self.key(editing.conversation) != key {
            self.editing = nil
            _ = self.input.take()
        }
        if let replying = self.replying, Self.key(replying.conversation) != key { self.replying = nil }
        self.open = key
        self.glancing = !reading
        self.scroll = 0
        var thread = self[thread: conversation]
        if reading {
            thread.unread = 0
            thread.mentions = 0
        }
        if reading, thread.lastSeq > thread.readUpTo {
            thread.readUpTo = thread.lastSeq
            actions.append(.markRead(conversation, upToSeq: thread.lastSeq))
        }
        if !thread.historyRequested, self.connection == .connected {
            thread.historyRequested = true
            actions.append(.loadHistory(conversation, beforeSeq: 0))
        }
        self.threads[key] = thread
        if !self.input.isEmpty, !self.input.text.hasPrefix("/") { actions += self.typed(now: now) }
        return actions
    }

    private mutating func scroll(by rows: Int, now: Date) -> [ChatAction] {
        self.scroll += rows
        guard let thread = self.openThread else { return [] }
        let total = ChatScreen.messageRows(of: thread, state: self, now: now).count
        self.scroll = max(0, min(self.scroll, total - self.messageRows))
        // Near the top of what is loaded: ask for the page before it.
        if self.scroll + self.messageRows >= total, thread.moreHistory, self.connection == .connected,
            let oldest = thread.lines.lazy.compactMap(\.seq).min()
        {
            self.threads[Self.key(thread.conversation)]?.moreHistory = false
            return [.loadHistory(thread.conversation, beforeSeq: oldest)]
        }
        return []
    }

    /// The rows the open conversation's messages have on screen.
    var messageRows: Int { max(1, self.rows - 5) }
}
