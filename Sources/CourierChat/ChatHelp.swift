/// The chat's keys and commands: what `/help` shows and what `courier chat --help` says, from one list.
public enum ChatHelp {
    /// Keys, and what each does.
    public static let keys: [(keys: String, does: String)] = [
        ("Enter", "send the line, or run the command"),
        ("Tab, Shift-Tab (Ctrl-N, Ctrl-P, Alt-↓, Alt-↑)", "next, previous conversation"),
        ("↑ (empty line)", "edit your last message (Enter saves it)"),
        ("PgUp, PgDn, ↑, ↓", "scroll; move through results or picks"),
        ("←, →, Home, End, Backspace, Delete", "move and edit in the line"),
        ("Ctrl-A, Ctrl-E", "to the line's start, end"),
        ("Ctrl-U, Ctrl-K, Ctrl-W", "delete to the start, to the end, a word"),
        ("Ctrl-L", "redraw the screen"),
        ("Esc", "close what shows; cancel an edit or pick"),
        ("Ctrl-C, or Ctrl-D on an empty line", "quit"),
    ]

    /// Commands typed in the line, and what each does (short enough that on 80 × 24 they all show, a row each).
    public static let commands: [(command: String, does: String)] = [
        ("/open NAME", "open a conversation with NAME, or #GROUP"),
        ("/close", "hide this one until its next message"),
        ("/send PATH", "send a photo, voice clip, video or file"),
        ("/save [PATH]", "save the newest file (Downloads or PATH)"),
        ("/view", "show or play the newest image or clip"),
        ("/recall", "take your newest message back"),
        ("/edit [TEXT]", "edit your newest message (to TEXT)"),
        ("/reply [TEXT]", "answer a message (↑ ↓ Enter pick it)"),
        ("/react EMOJI", "react to a message (again: take it off)"),
        ("/search WORDS", "find messages; Enter opens one"),
        ("/group …", "groups of your contacts: /group says how"),
        ("/mute [LEVEL]", "alert on mentions only (none; all)"),
        ("/block [--off]", "block this chat's user (--off unblocks)"),
        ("/name [TEXT]", "show or set your name (--clear clears)"),
        ("/help", "these keys and commands"),
        ("/quit", "quit"),
    ]

    /// The short line the status row shows when nothing else is to be said.
    static let hint = "Enter sends · Tab switches · PgUp scrolls · /open NAME · /send PATH · /help · Ctrl-C quits"

    /// The keys and commands as `--help` prints them: each on a line, what it does on the next (short enough for
    /// 80 columns).
    public static var text: String {
        func list(_ rows: [(String, String)]) -> String {
            rows.map { "  \($0.0)\n      \($0.1)" }.joined(separator: "\n")
        }
        return "Commands (in the line):\n" + list(Self.commands) + "\n\nKeys:\n" + list(Self.keys)
    }
}
