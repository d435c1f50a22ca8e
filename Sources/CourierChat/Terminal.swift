import Dispatch
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The terminal the chat runs in: raw mode on the alternate screen while it is open, restored as it was by
/// ``restore()`` however the chat ends (a key, Ctrl-C, SIGTERM or SIGHUP; the keyboard's Ctrl-C arrives as a key,
/// since raw mode turns off the signals it would send).
public final class Terminal: @unchecked Sendable {
    /// What the terminal reports: keys, a new size, or a signal asking the chat to end.
    enum Input: Sendable {
        case keys([Key])
        case resized(columns: Int, rows: Int)
        case hangUp
    }

    private var original = termios()
    private var restored = false
    private let lock = NSLock()
    private var signalSources: [any DispatchSourceSignal] = []
    /// Written to when the chat ends: the key reader stops, rather than take the next line typed (at a password
    /// prompt after the chat, say). Its read end, and the reader's end.
    private var stopPipe: [Int32] = [-1, -1]
    private let readerEnded = DispatchSemaphore(value: 0)
    /// The last screen written, so the next writes only the rows that changed.
    private var shown: ChatScreen?

    /// The inputs, in order: started by ``open()``, ended when standard input closes.
    let inputs: AsyncStream<Input>
    private let sink: AsyncStream<Input>.Continuation

    /// Reads a line from standard input with echo off, after a prompt on standard error; nil when standard input
    /// is not a terminal.
    public static func readSecret(prompt: String) -> String? {
        guard isatty(STDIN_FILENO) == 1 else { return nil }
        var saved = termios()
        guard tcgetattr(STDIN_FILENO, &saved) == 0 else { return nil }
        var silent = saved
        silent.c_lflag &= ~tcflag_t(ECHO)
        FileHandle.standardError.write(Data(prompt.utf8))
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &silent)
        defer {
            tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved)
            FileHandle.standardError.write(Data("\n".utf8))
        }
        return readLine(strippingNewline: true)
    }

    /// Whether standard input and output are both a terminal.
    public static var isInteractive: Bool { isatty(STDIN_FILENO) == 1 && isatty(STDOUT_FILENO) == 1 }

    /// Puts the terminal in raw mode on the alternate screen and starts reading keys and signals.
    static func open() throws -> Terminal {
        let terminal = Terminal()
        try terminal.start()
        return terminal
    }

    private init() {
        (self.inputs, self.sink) = AsyncStream.makeStream(bufferingPolicy: .unbounded)
    }

    private func start() throws {
        // Before the terminal changes: a failure here leaves it as it was.
        guard pipe(&self.stopPipe) == 0 else {
            throw ChatError(description: "cannot make a pipe: \(String(cString: strerror(errno)))")
        }
        guard tcgetattr(STDIN_FILENO, &self.original) == 0 else {
            throw ChatError(
                description: "cannot read the terminal's settings: \(String(cString: strerror(errno)))"
            )
        }
        var raw = self.original
        cfmakeraw(&raw)
        // Keep output processing, so a stray newline from elsewhere still starts its line at the left.
        raw.c_oflag |= tcflag_t(OPOST)
        guard tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0 else {
            throw ChatError(
                description: "cannot set the terminal to raw mode: \(String(cString: strerror(errno)))"
            )
        }
        // Alternate screen, bracketed paste on, cursor hidden until the first screen is drawn.
        self.write("\u{1B}[?1049h\u{1B}[?2004h\u{1B}[?25l\u{1B}[2J")

        let sink = self.sink
        for (number, input) in [(SIGWINCH, nil), (SIGTERM, Input.hangUp), (SIGHUP, .hangUp), (SIGINT, .hangUp)] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [weak self] in
                if let input {
                    sink.yield(input)
                } else if let size = self?.size() {
                    sink.yield(.resized(columns: size.columns, rows: size.rows))
                }
            }
            source.resume()
            self.signalSources.append(source)
        }
        // Reads on a thread of its own, waiting in poll for a key or for the chat's end: standard input stays in
        // blocking mode, as the shell expects it after the chat ends, and nothing is read from it after that.
        let stop = self.stopPipe[0]
        let ended = self.readerEnded
        let reader = Thread {
            var decoder = KeyDecoder()
            var buffer = [UInt8](repeating: 0, count: 4096)
            let delay = Int32(KeyDecoder.escapeDelay / .milliseconds(1))
            defer {
                sink.finish()
                ended.signal()
            }
            while true {
                var descriptors = [
                    pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0),
                    pollfd(fd: stop, events: Int16(POLLIN), revents: 0),
                ]
                let ready = poll(&descriptors, 2, decoder.escapePending ? delay : -1)
                if ready < 0, errno == EINTR { continue }
                guard ready >= 0, descriptors[1].revents == 0 else { return }
                if ready == 0 {
                    sink.yield(.keys(decoder.flush()))
                    continue
                }
                let count = read(STDIN_FILENO, &buffer, buffer.count)
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { return }
                let keys = decoder.decode(buffer[..<count])
                if !keys.isEmpty { sink.yield(.keys(keys)) }
            }
        }
        reader.start()
    }

    /// The terminal's size in columns and rows (80×24 if it cannot tell).
    func size() -> (columns: Int, rows: Int) {
        var size = winsize()
        guard ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0, size.ws_row > 0 else {
            return (80, 24)
        }
        return (Int(size.ws_col), Int(size.ws_row))
    }

    /// Draws a screen: the rows that differ from the last one drawn (all of them after a resize or `full`), then
    /// the cursor.
    func draw(_ screen: ChatScreen, full: Bool = false) {
        var output = "\u{1B}[?25l"
        let previous = full || self.shown?.rows.count != screen.rows.count ? nil : self.shown
        if previous == nil { output += "\u{1B}[0m\u{1B}[2J" }
        for (index, row) in screen.rows.enumerated() where previous?.rows[index] != row {
            output += "\u{1B}[\(index + 1);1H\u{1B}[0m\(row.text)\u{1B}[0m\u{1B}[K"
        }
        output += "\u{1B}[\(screen.cursor.row + 1);\(screen.cursor.column + 1)H\u{1B}[?25h"
        self.shown = screen
        self.write(output)
    }

    /// Rings the bell (a terminal shows or sounds it as its user chose).
    func bell() {
        self.write("\u{07}")
    }

    /// Leaves the alternate screen and puts the terminal back as it was. Safe to call more than once.
    func restore() {
        let first = self.lock.withLock {
            defer { self.restored = true }
            return !self.restored
        }
        guard first else { return }
        // The key reader stops before the terminal is given back (at most a second: it is between two polls).
        if self.stopPipe[1] >= 0 {
            var byte: UInt8 = 1
            _ = Glibc.write(self.stopPipe[1], &byte, 1)
            _ = self.readerEnded.wait(timeout: .now() + 1)
            close(self.stopPipe[0])
            close(self.stopPipe[1])
            self.stopPipe = [-1, -1]
        }
        for source in self.signalSources { source.cancel() }
        self.write("\u{1B}[0m\u{1B}[?2004l\u{1B}[?25h\u{1B}[?1049l")
        _ = tcsetattr(STDIN_FILENO, TCSANOW, &self.original)
        for number in [SIGWINCH, SIGTERM, SIGHUP, SIGINT] { signal(number, SIG_DFL) }
    }

    private func write(_ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(STDOUT_FILENO, $0.baseAddress, $0.count) }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else { return }
            bytes = bytes.dropFirst(written)
        }
    }
}
