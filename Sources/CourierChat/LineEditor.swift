/// The chat's input line: text with a cursor, edited with the keys of a shell's line editor.
struct LineEditor: Hashable {
    private(set) var text = ""
    /// The cursor, in characters (grapheme clusters) from the start.
    private(set) var cursor = 0
    /// The most UTF-8 bytes the line takes; typing beyond it is ignored (the server's default text limit).
    static let maxBytes = 64 * 1024

    var isEmpty: Bool { self.text.isEmpty }

    /// Inserts text at the cursor, line breaks and tabs as spaces, other control characters dropped.
    mutating func insert(_ typed: String) {
        let clean = String(
            String.UnicodeScalarView(
                typed.unicodeScalars.compactMap { scalar in
                    if scalar == "\n" || scalar == "\r" || scalar == "\t" { return " " }
                    return scalar.properties.generalCategory == .control ? nil : scalar
                }
            )
        )
        guard !clean.isEmpty, self.text.utf8.count + clean.utf8.count <= Self.maxBytes else { return }
        let before = self.text.count
        self.text.insert(contentsOf: clean, at: self.index(self.cursor))
        // A combining mark joins the character before it, so the count may grow by less than `clean.count`.
        self.cursor += self.text.count - before
    }

    mutating func backspace() {
        guard self.cursor > 0 else { return }
        self.text.remove(at: self.index(self.cursor - 1))
        self.cursor -= 1
    }

    mutating func delete() {
        guard self.cursor < self.text.count else { return }
        self.text.remove(at: self.index(self.cursor))
    }

    mutating func left() { self.cursor = max(0, self.cursor - 1) }
    mutating func right() { self.cursor = min(self.text.count, self.cursor + 1) }
    mutating func home() { self.cursor = 0 }
    mutating func end() { self.cursor = self.text.count }

    /// Ctrl-U: deletes from the start of the line to the cursor.
    mutating func deleteToStart() {
        self.text.removeSubrange(self.text.startIndex..<self.index(self.cursor))
        self.cursor = 0
    }

    /// Ctrl-K: deletes from the cursor to the end of the line.
    mutating func deleteToEnd() {
        self.text.removeSubrange(self.index(self.cursor)...)
    }

    /// Ctrl-W: deletes the word before the cursor (and the spaces after it).
    mutating func deleteWord() {
        let characters = Array(self.text.prefix(self.cursor))
        var start = characters.count
        while start > 0, characters[start - 1] == " " { start -= 1 }
        while start > 0, characters[start - 1] != " " { start -= 1 }
        self.text.removeSubrange(self.index(start)..<self.index(self.cursor))
        self.cursor = start
    }

    /// Returns the line and empties it.
    mutating func take() -> String {
        defer { self = LineEditor() }
        return self.text
    }

    /// What shows in `width` columns: the part of the line around the cursor, and the cursor's column in it. A
    /// line wider than `width` scrolls so the cursor stays in view.
    func view(width: Int) -> (text: String, cursorColumn: Int) {
        let characters = Array(self.text)
        let widths = characters.map { DisplayWidth.of($0) }
        let width = max(2, width)
        // Start at the beginning, or far enough along that the cursor (and one column after it) fits.
        var start = 0
        var beforeCursor = widths[..<self.cursor].reduce(0, +)
        while beforeCursor + 1 > width - 1, start < self.cursor {
            beforeCursor -= widths[start]
            start += 1
        }
        var shown = ""
        var used = 0
        for index in start..<characters.count {
            guard used + widths[index] <= width - 1 else { break }
            shown.append(characters[index])
            used += widths[index]
        }
        return (shown, beforeCursor)
    }

    private func index(_ offset: Int) -> String.Index {
        self.text.index(self.text.startIndex, offsetBy: offset)
    }
}
