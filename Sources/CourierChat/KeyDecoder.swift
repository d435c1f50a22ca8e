/// A key press (or paste) read from a terminal in raw mode.
enum Key: Hashable, Sendable {
    case character(Character)
    /// Text pasted while the terminal's bracketed paste mode is on; line breaks in it never send.
    case paste(String)
    case enter, tab, backTab, backspace, delete, escape
    case left, right, up, down, home, end, pageUp, pageDown
    /// Up or down with Alt (or Ctrl) held.
    case altUp, altDown
    /// A control key, by its letter: `.control("c")` is Ctrl-C.
    case control(Character)
    /// A key pressed with Alt (sent as ESC and the key).
    case alt(Character)
}

/// Turns the bytes a terminal sends into keys: UTF-8 text, control keys, and the VT100/xterm escape sequences of
/// arrows, Home/End, Page Up/Down, Delete and bracketed paste. A sequence or character split across reads is kept
/// until the rest arrives. An escape with nothing after it may be the Escape key or the start of a sequence: it waits
/// for the next read, or for ``flush()`` when none comes soon (the reader's ``escapeDelay``).
struct KeyDecoder {
    private var pending: [UInt8] = []
    private var paste: [UInt8]?
    /// The most bytes one paste may hold; the rest of a longer paste is dropped.
    static let maxPasteBytes = 64 * 1024

    mutating func decode(_ bytes: some Sequence<UInt8>) -> [Key] {
        self.pending.append(contentsOf: bytes)
        var keys: [Key] = []
        var index = 0
        while index < self.pending.count {
            if self.paste != nil {
                // Everything up to ESC [ 2 0 1 ~ is pasted text.
                guard let end = self.find(Self.pasteEnd, from: index) else {
                    let keep = max(index, self.pending.count - (Self.pasteEnd.count - 1))
                    self.appendPaste(self.pending[index..<keep])
                    index = keep
                    break
                }
                self.appendPaste(self.pending[index..<end])
                keys.append(.paste(String(decoding: self.paste ?? [], as: UTF8.self)))
                self.paste = nil
                index = end + Self.pasteEnd.count
                continue
            }
            guard let (key, length) = self.key(at: index) else { break }
            index += length
            if let key { keys.append(key) }
        }
        self.pending.removeFirst(index)
        return keys
    }

    /// Whether a lone escape waits for what follows it.
    var escapePending: Bool { self.paste == nil && self.pending == [0x1B] }

    /// How long a lone escape waits for the rest of a sequence before it is the Escape key.
    static let escapeDelay: Duration = .milliseconds(50)

    /// The Escape key, when a lone escape waited ``escapeDelay`` with nothing after it.
    mutating func flush() -> [Key] {
        guard self.escapePending else { return [] }
        self.pending.removeAll()
        return [.escape]
    }

    private static let pasteEnd: [UInt8] = Array("\u{1B}[201~".utf8)

    private mutating func appendPaste(_ bytes: ArraySlice<UInt8>) {
        let room = Self.maxPasteBytes - (self.paste?.count ?? 0)
        self.paste?.append(contentsOf: bytes.prefix(max(0, room)))
    }

    private func find(_ needle: [UInt8], from start: Int) -> Int? {
        guard self.pending.count - start >= needle.count else { return nil }
        for index in start...(self.pending.count - needle.count)
        where self.pending[index..<(index + needle.count)].elementsEqual(needle) {
            return index
        }
        return nil
    }

    /// The key at `index` and how many bytes it took (a nil key: bytes consumed without a key), or nil when more
    /// bytes are needed.
    private mutating func key(at index: Int) -> (Key?, Int)? {
        let byte = self.pending[index]
        switch byte {
        case 0x1B: return self.escape(at: index)
        case 0x0D, 0x0A: return (.enter, 1)
        case 0x09: return (.tab, 1)
        case 0x7F, 0x08: return (.backspace, 1)
        case 0x01...0x1A: return (.control(Character(Unicode.Scalar(byte + 0x60))), 1)
        case 0x00, 0x1C...0x1F: return (nil, 1)
        default: return self.character(at: index)
        }
    }

    private func character(at index: Int) -> (Key?, Int)? {
        let lead = self.pending[index]
        let length =
            switch lead {
            case 0x00..<0x80: 1
            case 0xC2..<0xE0: 2
            case 0xE0..<0xF0: 3
            case 0xF0..<0xF5: 4
            default: 0
            }
        // A byte that cannot start a character is dropped.
        guard length > 0 else { return (nil, 1) }
        guard index + length <= self.pending.count else { return nil }
        let text = String(decoding: self.pending[index..<(index + length)], as: UTF8.self)
        return (text.first.map(Key.character), length)
    }

    private mutating func escape(at index: Int) -> (Key?, Int)? {
        guard index + 1 < self.pending.count else { return nil }
        let next = self.pending[index + 1]
        if next == UInt8(ascii: "[") { return self.controlSequence(at: index) }
        if next == UInt8(ascii: "O") {
            guard index + 2 < self.pending.count else { return nil }
            let key: Key? =
                switch self.pending[index + 2] {
                case UInt8(ascii: "A"): .up
                case UInt8(ascii: "B"): .down
                case UInt8(ascii: "C"): .right
                case UInt8(ascii: "D"): .left
                case UInt8(ascii: "H"): .home
                case UInt8(ascii: "F"): .end
                default: nil
                }
            return (key, 3)
        }
        if next == 0x1B { return (.escape, 1) }
        guard let (key, length) = self.character(at: index + 1) else { return nil }
        if case .character(let character)? = key { return (.alt(character), length + 1) }
        return (nil, length + 1)
    }

    /// ESC [ parameters final: arrows, Home/End, Page Up/Down, Delete, Shift-Tab, bracketed paste.
    private mutating func controlSequence(at index: Int) -> (Key?, Int)? {
        var end = index + 2
        while end < self.pending.count, !(0x40...0x7E).contains(self.pending[end]) {
            end += 1
            // A sequence this long is not one a terminal sends for a key: drop its introducer.
            if end - index > 16 { return (nil, 2) }
        }
        guard end < self.pending.count else { return nil }
        let parameters = String(decoding: self.pending[(index + 2)..<end], as: UTF8.self)
        let length = end - index + 1
        let modified = parameters.hasSuffix(";3") || parameters.hasSuffix(";5")
        let key: Key? =
            switch (self.pending[end], parameters) {
            case (UInt8(ascii: "A"), _): modified ? .altUp : .up
            case (UInt8(ascii: "B"), _): modified ? .altDown : .down
            case (UInt8(ascii: "C"), _): .right
            case (UInt8(ascii: "D"), _): .left
            case (UInt8(ascii: "H"), _): .home
            case (UInt8(ascii: "F"), _): .end
            case (UInt8(ascii: "Z"), _): .backTab
            case (UInt8(ascii: "~"), "1"), (UInt8(ascii: "~"), "7"): .home
            case (UInt8(ascii: "~"), "4"), (UInt8(ascii: "~"), "8"): .end
            case (UInt8(ascii: "~"), "3"): .delete
            case (UInt8(ascii: "~"), "5"): .pageUp
            case (UInt8(ascii: "~"), "6"): .pageDown
            default: nil
            }
        if self.pending[end] == UInt8(ascii: "~"), parameters == "200" { self.paste = [] }
        return (key, length)
    }
}
