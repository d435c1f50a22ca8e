/// The chat's keys and commands: what `/help` shows and what `courier chat --help` says, from one list.
public enum ChatHelp {
    /// Keys, and what each does.
    public static let keys: [(keys: String, does: String)] = [
        ("Enter", "send the line, or run the command"),
        ("Tab, Shift-Tab (Ctrl-N, Ctrl-P, Alt-↓, Alt-↑)", "next, previous conversation"),
        ("PgUp, PgDn, ↑, ↓", "scroll the conversation"),
        ("←, →, Home, End, Backspace, Delete", "move and edit in the line"),
        ("Ctrl-A, Ctrl-E", "to the line's start, end"),
        ("Ctrl-U, Ctrl-K, Ctrl-W", "delete to the start, to the end, a word"),
        ("Ctrl-L", "redraw the screen"),
        ("Esc", "close the help, or a notice"),
        ("Ctrl-C, or Ctrl-D on an empty line", "quit"),
    ]

    /// Commands typed in the line, and what each does.
    public static let commands: [(command: String, does: String)] = [
        ("/open NAME, /open #GROUP", "open a direct or a group conversation"),
        (
            "/close",
            "hide the open conversation until its next message; the next one shows, unread until you type or scroll"
        ),
        ("/send PATH", "send a photo, voice clip, video or any file"),
        ("/save [PATH]", "save the newest file here (into $XDG_DOWNLOAD_DIR, ~/Downloads or ., or PATH)"),
        ("/view", "open the newest image, video or voice clip here with the system's opener"),
        ("/recall", "recall your newest message here (within the server's window)"),
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
