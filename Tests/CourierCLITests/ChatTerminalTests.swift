import CourierProcess
import CourierTesting
import Foundation
import Testing

@testable import CourierChat

/// glibc's posix_spawn_file_actions_addclosefrom_np (2.34+), which Swift's Glibc module does not export.
@_silgen_name("posix_spawn_file_actions_addclosefrom_np")
private func closeFrom(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ from: Int32) -> Int32

/// A tmux server of its own (its own socket, no configuration file) whose sessions run programs on a real
/// pseudo-terminal; the test reads the screen with capture-pane and types with send-keys.
struct Tmux {
    let socket = "courier-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"

    @discardableResult
    func run(_ arguments: String...) async throws -> String {
        try await ExternalProgram.output("/usr/bin/tmux", ["-L", self.socket, "-f", "/dev/null"] + arguments)
    }

    /// Starts a detached session running `command` through the shell, at `columns`×`rows`.
    func start(_ name: String, columns: Int, rows: Int, environment: [String: String], command: String) async throws {
        var arguments = ["new-session", "-d", "-s", name, "-x", String(columns), "-y", String(rows)]
        for (key, value) in environment.sorted(by: { $0.key < $1.key }) { arguments += ["-e", "\(key)=\(value)"] }
        let all = ["/usr/bin/tmux", "-L", self.socket, "-f", "/dev/null"] + arguments + [command]
        // The first command starts the tmux server, which keeps every descriptor it was given. Foundation's
        // Process learns that a child ended when a socket it shares with the child closes, which the server
        // would hold open for ever; so tmux starts through posix_spawn, with /dev/null and nothing else.
        let status = try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try Self.spawn(all) })
            }
        }
        guard status == 0 else { throw ExternalProgram.Failure(description: "tmux \(all) exited with \(status)") }
    }

    /// Runs a program with standard input and output on /dev/null and no other descriptor, and waits for it.
    private static func spawn(_ arguments: [String]) throws -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for descriptor in Int32(0)...2 {
            posix_spawn_file_actions_addopen(
                &actions,
                descriptor,
                "/dev/null",
                descriptor == 0 ? O_RDONLY : O_WRONLY,
                0
            )
        }
        _ = closeFrom(&actions, 3)
        // Signals unblocked and at their defaults: a Dispatch thread blocks them, and a child inherits its mask.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var signals = sigset_t()
        sigemptyset(&signals)
        posix_spawnattr_setsigmask(&attributes, &signals)
        sigfillset(&signals)
        posix_spawnattr_setsigdefault(&attributes, &signals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv = arguments.map { strdup($0) } + [nil]
        defer { for argument in argv { free(argument) } }
        var pid = pid_t()
        let error = posix_spawn(&pid, arguments[0], &actions, &attributes, argv, environ)
        guard error == 0 else {
            throw ExternalProgram.Failure(
                description: "cannot start \(arguments[0]): \(String(cString: strerror(error)))"
            )
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}
        // WEXITSTATUS
        return (status >> 8) & 0xFF
    }

    /// The session's screen, one string a row.
    func screen(_ name: String) async throws -> [String] {
        var rows = try await self.run("capture-pane", "-p", "-t", name)
            .split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if rows.last == "" { rows.removeLast() }  // after the last row's newline
        return rows
    }

    /// Waits until the screen satisfies `condition` (or 20 s pass) and returns the last screen read.
    func wait(
        _ name: String,
        for what: String,
        sourceLocation: SourceLocation = #_sourceLocation,
        until condition: ([String]) -> Bool
    ) async throws -> [String] {
        let deadline = ContinuousClock.now + .seconds(20)
        var screen = try await self.screen(name)
        while !condition(screen), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
            screen = try await self.screen(name)
        }
        #expect(
            condition(screen),
            "\(name): \(what)\n\(screen.joined(separator: "\n"))",
            sourceLocation: sourceLocation
        )
        return screen
    }

    func type(_ name: String, _ text: String) async throws {
        try await self.run("send-keys", "-t", name, "-l", text)
    }

    func press(_ name: String, _ key: String) async throws {
        try await self.run("send-keys", "-t", name, key)
    }

    /// A tmux format variable of the session's pane: `cursor_x`, `alternate_on`, …
    func value(_ name: String, _ variable: String) async throws -> String {
        try await self.run("display-message", "-p", "-t", name, "#{\(variable)}")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func stop() async {
        _ = try? await self.run("kill-server")
    }
}

@Suite("courier chat on a real terminal (tmux)", .serialized)
struct ChatTerminalTests {
    @Test("two users chat; half-typed input survives an arriving message; receipts, typing, times, CJK, resize, exit")
    func twoUsersChat() async throws {
        try await Self.withServer(prefix: "courier-chat") { _, _, address, environment, tmux in
            for user in ["alice", "bob"] {
                let login = try await CourierExecutable.run(
                    ["login", "--as", user, "--password", "pw-" + user, "--server", address],
                    environment: environment
                )
                #expect(login.status == 0, "\(login)")
            }
            try await Self.chat(tmux, address: address, environment: environment)
        }
    }

    /// Runs `body` with a server on a new data folder that has alice and bob (passwords `pw-` and the name), the
    /// environment a chat runs in (a home of its own, UTC), and a tmux; stops both however `body` ends.
    static func withServer(
        prefix: String,
        _ body: (_ folder: URL, _ data: URL, _ address: String, _ environment: [String: String], Tmux) async throws
            -> Void
    ) async throws {
        try await withTemporaryDirectory(prefix: prefix) { folder in
            let data = folder.appendingPathComponent("data")
            try await CourierExecutable.addUsers(["alice", "bob"], data: data)
            let (server, native, _) = try await ServerProcess.start(data: data, logFolder: folder)
            let environment = [
                "HOME": folder.path,
                "XDG_CONFIG_HOME": folder.appendingPathComponent("config").path,
                "XDG_DATA_HOME": folder.appendingPathComponent("share").path,
                "TZ": "UTC",
            ]
            let tmux = Tmux()
            do {
                try await body(folder, data, "127.0.0.1:\(native)", environment, tmux)
            } catch {
                await tmux.stop()
                _ = await server.terminate()
                throw error
            }
            await tmux.stop()
            #expect(await server.terminate() == 0)
        }
    }

    static func chat(_ tmux: Tmux, address: String, environment: [String: String]) async throws {
        let courier = CourierExecutable.url.path
        // After the chat: its status, and whether the terminal's settings are those from before it.
        func command(_ user: String, _ peer: String) -> String {
            "saved=$(stty -g); '\(courier)' chat --as \(user) --with \(peer) --server \(address); "
                + "echo \"EXITED $?\"; [ \"$(stty -g)\" = \"$saved\" ] && echo 'TERMINAL RESTORED'; echo 'CHECKED'; "
                + "sleep 600"
        }
        try await tmux.start(
            "alice",
            columns: 100,
            rows: 30,
            environment: environment,
            command: command("alice", "bob")
        )
        try await tmux.start("bob", columns: 100, rows: 30, environment: environment, command: command("bob", "alice"))
        for user in ["alice", "bob"] {
            _ = try await tmux.wait(user, for: "connected") { $0.first?.contains("· connected") == true }
        }
        #expect(try await tmux.value("alice", "alternate_on") == "1", "the chat runs on the alternate screen")

        // alice has half a line typed when bob's message arrives.
        try await tmux.type("alice", "half a li")
        _ = try await tmux.wait("alice", for: "the half line") { $0.last == "> half a li" }
        let chinese = "你好 alice，中文对齐测试：" + String(repeating: "一二三四五六七八九十", count: 12)
        try await tmux.type("bob", chinese)
        try await tmux.press("bob", "Enter")
        var screen = try await tmux.wait("alice", for: "bob's message") { rows in
            rows.contains { $0.contains("bob: 你好 alice，") }
        }
        #expect(screen.last == "> half a li", "the half-typed line is intact")
        #expect(try await tmux.value("alice", "cursor_x") == "11", "the cursor is still after the half line")
        #expect(screen.contains { $0.hasSuffix(" just now") }, "a relative time shows")
        Self.expectAligned(screen, columns: 100, message: "bob: 你好")

        // alice finishes her line and sends it; bob reads it, so alice's line is marked read.
        try await tmux.type("alice", "ne 完")
        try await tmux.press("alice", "Enter")
        _ = try await tmux.wait("bob", for: "alice's message") { rows in
            rows.contains { $0.contains("alice: half a line 完") }
        }
        screen = try await tmux.wait("alice", for: "read mark") { rows in
            rows.contains { $0.contains("you: half a line 完 ✓✓\u{A0}read") }
        }
        #expect(screen.last == ">", "the input is empty after sending")
        #expect(try await tmux.value("alice", "cursor_x") == "2")

        // Now that both have written in their conversation, each sees the other online (told as alice's answer
        // committed, neither connecting again), and bob's typing shows on alice's screen, going when he clears it.
        _ = try await tmux.wait("alice", for: "bob online") { $0[1].contains("@bob · online") }
        try await tmux.type("bob", "x")
        _ = try await tmux.wait("alice", for: "bob is typing") { $0[1].contains("bob is typing…") }
        try await tmux.press("bob", "C-u")
        _ = try await tmux.wait("alice", for: "bob stopped typing") { !$0[1].contains("typing") }

        // alice sends a photo: both sides show it as a line with its kind, name and size.
        let photo = URL(fileURLWithPath: environment["HOME"]!).appendingPathComponent("photo.png")
        try Data(repeating: 0x89, count: 2_048).write(to: photo)
        try await tmux.type("alice", "/send \(photo.path)")
        try await tmux.press("alice", "Enter")
        _ = try await tmux.wait("bob", for: "alice's photo") { rows in
            rows.contains { $0.contains("alice: [image photo.png, 2.0 kB]") }
        }
        _ = try await tmux.wait("alice", for: "the photo committed") { rows in
            rows.contains { $0.contains("you: [image photo.png, 2.0 kB] ✓") }
        }

        // bob's terminal shrinks: the screen is laid out again at the new size.
        try await tmux.run("resize-window", "-t", "bob", "-x", "60", "-y", "20")
        screen = try await tmux.wait("bob", for: "the narrower layout") { rows in
            rows.count == 20 && rows[1].hasSuffix("│ @alice · online")
                && rows[1].firstIndex(of: "│").map { CLibraryWidth.of(rows[1][..<$0]) }
                    == ChatScreen.listWidth(columns: 60)
        }
        // On bob's own screen, his message is "you".
        Self.expectAligned(screen, columns: 60, message: "you: 你好")

        // Ctrl-C leaves the chat: the normal screen is back, the terminal's settings as they were.
        try await tmux.press("alice", "C-c")
        screen = try await tmux.wait("alice", for: "the chat ended") { $0.contains("CHECKED") }
        #expect(screen.contains("EXITED 0") && screen.contains("TERMINAL RESTORED"), "\(screen)")
        #expect(try await tmux.value("alice", "alternate_on") == "0")
        // /quit does the same.
        try await tmux.type("bob", "/quit")
        try await tmux.press("bob", "Enter")
        screen = try await tmux.wait("bob", for: "the chat ended") { $0.contains("CHECKED") }
        #expect(screen.contains("EXITED 0") && screen.contains("TERMINAL RESTORED"), "\(screen)")
    }

    @Test("the chat to a server never reached fails at once, as send does, instead of retrying for ever")
    func neverReached() async throws {
        try await withTemporaryDirectory(prefix: "courier-chat-unreached") { folder in
            let environment = [
                "HOME": folder.path,
                "XDG_CONFIG_HOME": folder.appendingPathComponent("config").path,
                "XDG_DATA_HOME": folder.appendingPathComponent("share").path,
            ]
            // A port nothing listens on.
            let port = try await FreePort.pick()
            let tmux = Tmux()
            let command =
                "'\(CourierExecutable.url.path)' chat --as alice --server 127.0.0.1:\(port) --password pw; "
                + "echo \"EXITED $?\"; sleep 600"
            try await tmux.start("alice", columns: 120, rows: 20, environment: environment, command: command)
            let screen = try await tmux.wait("alice", for: "the chat's end") { $0.contains { $0.contains("EXITED") } }
            await tmux.stop()
            #expect(screen.contains { $0.contains("EXITED 1") }, "\(screen)")
            #expect(screen.contains { $0.contains("connection refused") }, "\(screen)")
        }
    }

    @Test(
        "a revoke signs the chat out: no new device, it asks for the password, a wrong one asks again, the right one reconnects"
    )
    func revokeSignsOut() async throws {
        try await Self.withServer(prefix: "courier-chat-revoke") { _, data, address, environment, tmux in
            func devices() async throws -> [[Substring]] {
                let result = try await CourierExecutable.run(["user", "devices", "alice", "--data", data.path])
                return result.output.split(separator: "\n").map { $0.split(separator: "\t") }
            }
            // The chat logs in with the password (no saved token): the SDK drops it once the login is done.
            let command =
                "'\(CourierExecutable.url.path)' chat --as alice --with bob --server \(address) "
                + "--password pw-alice; echo \"EXITED $?\"; sleep 600"
            try await tmux.start("alice", columns: 120, rows: 30, environment: environment, command: command)
            _ = try await tmux.wait("alice", for: "connected") { $0.first?.contains("· connected") == true }
            let before = try await devices()
            #expect(before.count == 1, "\(before)")
            let device = String(before[0][0])
            let revoked = try await CourierExecutable.run(["user", "revoke", "alice", device, "--data", data.path])
            #expect(revoked.status == 0, "\(revoked)")
            // Signed out, said so, and asked for the password; nothing logged in meanwhile as a new device.
            _ = try await tmux.wait("alice", for: "asked for the password") { rows in
                rows.contains { $0.contains("signed out") }
                    && rows.last { !$0.isEmpty }?.hasPrefix("password for alice:") == true
            }
            let after = try await devices()
            #expect(after.count == 1 && after[0][2] == "revoked", "the revoked device stays out: \(after)")
            // A wrong password: said, and asked again (not quit).
            try await tmux.type("alice", "not-it")
            try await tmux.press("alice", "Enter")
            _ = try await tmux.wait("alice", for: "asked again") { rows in
                rows.contains { $0.contains("wrong user name or password") }
                    && rows.last { !$0.isEmpty }?.hasPrefix("password for alice:") == true
            }
            // The right one: back in the chat, connected, as a new device.
            try await tmux.type("alice", "pw-alice")
            try await tmux.press("alice", "Enter")
            _ = try await tmux.wait("alice", for: "connected again") { $0.first?.contains("· connected") == true }
            #expect(try await devices().count == 2)
            try await tmux.press("alice", "C-c")
            _ = try await tmux.wait("alice", for: "the chat's end") { $0.contains { $0.contains("EXITED 0") } }
        }
    }

    @Test(
        "↑ edits the last message, /reply quotes one, /react 👍 shows under it, /search 上海 jumps to it; started again, the chat shows reactions and quotes as they are"
    )
    func editsRepliesReactionsSearch() async throws {
        try await Self.withServer(prefix: "courier-chat-edits") { _, _, address, environment, tmux in
            for user in ["alice", "bob"] {
                let command =
                    "'\(CourierExecutable.url.path)' chat --as \(user) --with \(user == "alice" ? "bob" : "alice") "
                    + "--server \(address) --password pw-\(user); echo \"EXITED $?\"; sleep 600"
                try await tmux.start(user, columns: 100, rows: 30, environment: environment, command: command)
                _ = try await tmux.wait(user, for: "connected") { $0.first?.contains("· connected") == true }
            }
            try await tmux.type("alice", "我家在上海东边")
            try await tmux.press("alice", "Enter")
            _ = try await tmux.wait("bob", for: "alice's message") { $0.contains { $0.contains("alice: 我家在上海东边") } }
            _ = try await tmux.wait("alice", for: "her message committed") { rows in
                rows.contains { $0.contains("you: 我家在上海东边 ✓") }
            }

            // ↑ on the empty line: her message is in the line to correct; Enter saves it, on both screens.
            try await tmux.press("alice", "Up")
            _ = try await tmux.wait("alice", for: "the message in the line") { rows in
                rows.last == "> 我家在上海东边" && rows.contains { $0.contains("editing your message") }
            }
            try await tmux.press("alice", "BSpace")
            try await tmux.press("alice", "BSpace")
            try await tmux.type("alice", "西边，近地铁")
            try await tmux.press("alice", "Enter")
            _ = try await tmux.wait("bob", for: "the edit") { rows in
                rows.contains { $0.contains("alice: 我家在上海西边，近地铁 (edited)") }
                    && !rows.contains { $0.contains("东边") }
            }
            _ = try await tmux.wait("alice", for: "the edit, hers") { rows in
                rows.contains { $0.contains("you: 我家在上海西边，近地铁 (edited) ✓") } && rows.last == ">"
            }

            // bob answers it: /reply, Enter picks the newest message (hers), then his line goes as the answer.
            try await tmux.type("bob", "/reply")
            try await tmux.press("bob", "Enter")
            _ = try await tmux.wait("bob", for: "the pick") {
                $0.contains { $0.contains("pick the message to answer") }
            }
            try await tmux.press("bob", "Enter")
            _ = try await tmux.wait("bob", for: "answering") { $0.contains { $0.contains("answering alice:") } }
            try await tmux.type("bob", "上海哪里？いいね")
            try await tmux.press("bob", "Enter")
            var screen = try await tmux.wait("alice", for: "the answer, quoted") { rows in
                rows.contains { $0.contains("bob: ↳ alice: 我家在上海西边，近地铁") }
            }
            let quote = screen.firstIndex { $0.contains("bob: ↳ alice:") }!
            #expect(screen[quote + 1].contains("上海哪里？いいね"), "\(screen.joined(separator: "\n"))")
            Self.expectAligned(screen, columns: 100, message: "bob: ↳ alice:")

            // bob reacts 👍 to her message: ↑ from his own answer to hers, Enter.
            try await tmux.type("bob", "/react 👍")
            try await tmux.press("bob", "Enter")
            try await tmux.press("bob", "Up")
            try await tmux.press("bob", "Enter")
            screen = try await tmux.wait("alice", for: "the reaction under her message") { rows in
                guard let at = rows.firstIndex(where: { $0.contains("you: 我家在上海西边") }), at + 1 < rows.count else {
                    return false
                }
                return rows[at + 1].hasSuffix("👍 1")
            }
            Self.expectAligned(screen, columns: 100, message: "bob: ↳ alice:")

            // alice searches for 上海 (two characters of a longer run): both messages are found; Enter on the
            // second (hers) opens @bob at it.
            try await tmux.type("alice", "/search 上海")
            try await tmux.press("alice", "Enter")
            screen = try await tmux.wait("alice", for: "the results") { rows in
                rows.contains { $0.contains("Search: “上海”") } && rows.contains { $0.contains("@bob · you") }
                    && rows.contains { $0.contains("@bob · bob") }
            }
            try await tmux.press("alice", "Down")
            try await tmux.press("alice", "Enter")
            screen = try await tmux.wait("alice", for: "her message shown") { rows in
                rows.contains { $0.contains("the message found") } && !rows.contains { $0.contains("Search:") }
            }
            try await tmux.press("alice", "Escape")
            _ = try await tmux.wait("alice", for: "the highlight ended") { rows in
                !rows.contains { $0.contains("the message found") }
            }

            // Round three: an answer whose original is edited after it, then bob's chat started again shows the
            // quote as the original now reads, and the reaction it showed.
            try await tmux.type("alice", "周六见")
            try await tmux.press("alice", "Enter")
            _ = try await tmux.wait("bob", for: "周六见") { $0.contains { $0.contains("alice: 周六见") } }
            try await tmux.type("bob", "/reply")
            try await tmux.press("bob", "Enter")
            _ = try await tmux.wait("bob", for: "the second pick") {
                $0.contains { $0.contains("pick the message to answer") }
            }
            try await tmux.press("bob", "Enter")
            _ = try await tmux.wait("bob", for: "answering again") { $0.contains { $0.contains("answering alice:") } }
            try await tmux.type("bob", "好")
            try await tmux.press("bob", "Enter")
            _ = try await tmux.wait("alice", for: "the second answer") { rows in
                rows.contains { $0.contains("bob: ↳ alice: 周六见") }
            }
            try await tmux.press("alice", "Up")
            _ = try await tmux.wait("alice", for: "周六见 in the line") { $0.last == "> 周六见" }
            try await tmux.press("alice", "BSpace")
            try await tmux.press("alice", "BSpace")
            try await tmux.type("alice", "日见")
            try await tmux.press("alice", "Enter")
            _ = try await tmux.wait("bob", for: "the quote, edited live") { rows in
                rows.contains { $0.contains("↳ alice: 周日见") }
            }
            try await tmux.press("bob", "C-c")
            _ = try await tmux.wait("bob", for: "bob's chat's end") { $0.contains { $0.contains("EXITED 0") } }
            let again =
                "'\(CourierExecutable.url.path)' chat --as bob --with alice --server \(address) --password pw-bob; "
                + "echo \"EXITED $?\"; sleep 600"
            try await tmux.start("bob-again", columns: 100, rows: 30, environment: environment, command: again)
            _ = try await tmux.wait("bob-again", for: "the quote and the reaction after a restart") { rows in
                guard let at = rows.firstIndex(where: { $0.contains("alice: 我家在上海西边") }), at + 1 < rows.count else {
                    return false
                }
                return rows[at + 1].hasSuffix("👍 1") && rows.contains { $0.contains("↳ alice: 周日见") }
                    && !rows.contains { $0.contains("周六见") }
            }
            try await tmux.press("alice", "C-c")
            try await tmux.press("bob-again", "C-c")
            for user in ["alice", "bob-again"] {
                _ = try await tmux.wait(user, for: "the chat's end") { $0.contains { $0.contains("EXITED 0") } }
            }
        }
    }

    @Test(
        "/group new opens the group it made, so /group title is about it; the header shows the title beside the name; the history says who joined and what it was named; /name alone shows the name"
    )
    func groupsInTheChat() async throws {
        try await Self.withServer(prefix: "courier-chat-groups") { _, _, address, environment, tmux in
            // Contacts: each has written to the other (only a contact can be put in one's groups).
            for (user, peer) in [("bob", "alice"), ("alice", "bob")] {
                let sent = try await CourierExecutable.run(
                    ["send", "--as", user, "--password", "pw-" + user, "--to", peer, "hi", "--server", address],
                    environment: environment
                )
                #expect(sent.status == 0, "\(sent)")
            }
            let command =
                "'\(CourierExecutable.url.path)' chat --as alice --with bob --server \(address) --password pw-alice; "
                + "echo \"EXITED $?\"; sleep 600"
            try await tmux.start("alice", columns: 100, rows: 30, environment: environment, command: command)
            _ = try await tmux.wait("alice", for: "connected") { $0.first?.contains("· connected") == true }
            try await tmux.type("alice", "/group new club bob")
            try await tmux.press("alice", "Enter")
            // The header (right of the list) names the group made, and the list marks it open.
            _ = try await tmux.wait("alice", for: "#club open") { rows in
                rows.contains { $0.hasSuffix("│ #club") } && rows.contains { $0.hasPrefix("›#club") }
            }
            try await tmux.type("alice", "/group title 周末爬山 🏔")
            try await tmux.press("alice", "Enter")
            _ = try await tmux.wait("alice", for: "the title in the header") { rows in
                rows.contains { $0.hasSuffix("│ #club 周末爬山 🏔") }
            }
            // The group's history says who joined and what it was named.
            _ = try await tmux.wait("alice", for: "the history's lines") { rows in
                rows.contains { $0.contains("· bob joined ·") }
                    && rows.contains { $0.contains("named the group “周末爬山 🏔” ·") }
            }
            // /name alone shows the name and changes nothing; /name TEXT sets it; --clear clears it.
            try await tmux.type("alice", "/name 爱丽丝")
            try await tmux.press("alice", "Enter")
            _ = try await tmux.wait("alice", for: "the name set") {
                $0.contains { $0.contains("your display name is set") }
            }
            try await tmux.type("alice", "/name")
            try await tmux.press("alice", "Enter")
            _ = try await tmux.wait("alice", for: "the name shown") { rows in
                rows.contains { $0.contains("your display name is 爱丽丝") }
            }
            try await tmux.type("alice", "/name --clear")
            try await tmux.press("alice", "Enter")
            _ = try await tmux.wait("alice", for: "the name cleared") { $0.contains { $0.contains("no display name") } }
            try await tmux.press("alice", "C-c")
            _ = try await tmux.wait("alice", for: "the chat's end") { $0.contains { $0.contains("EXITED 0") } }
        }
    }

    @Test("with the token file gone, the chat asks for the password and checks it: a wrong one does not connect")
    func chatChecksAnAskedPassword() async throws {
        try await Self.withServer(prefix: "courier-chat-password") { folder, _, address, environment, tmux in
            let login = try await CourierExecutable.run(
                ["login", "--as", "alice", "--password", "pw-alice", "--server", address],
                environment: environment
            )
            #expect(login.status == 0, "\(login)")
            // Round three: the chat kept the device's token in its own store too, and connected with it whatever
            // password was typed. The token file is the one place a token is kept now.
            let base = address.replacingOccurrences(of: ":", with: "_")
            try FileManager.default.removeItem(at: folder.appendingPathComponent("config/courier/\(base)/alice.token"))
            let command =
                "'\(CourierExecutable.url.path)' chat --as alice --with bob --server \(address); echo \"EXITED $?\"; "
                + "sleep 600"
            try await tmux.start("alice", columns: 100, rows: 20, environment: environment, command: command)
            _ = try await tmux.wait("alice", for: "the password prompt") {
                $0.contains { $0.contains("password for alice:") }
            }
            try await tmux.type("alice", "not alice's password")
            try await tmux.press("alice", "Enter")
            // Refused, and asked again; the right one connects.
            _ = try await tmux.wait("alice", for: "the refusal") { rows in
                rows.contains { $0.contains("wrong user name or password") }
                    && rows.filter { $0.contains("password for alice:") }.count == 2
            }
            try await tmux.type("alice", "pw-alice")
            try await tmux.press("alice", "Enter")
            _ = try await tmux.wait("alice", for: "connected") { $0.first?.contains("· connected") == true }
            try await tmux.press("alice", "C-c")
            _ = try await tmux.wait("alice", for: "the chat's end") { $0.contains { $0.contains("EXITED 0") } }
        }
    }

    @Test("signup on a terminal says a password is too short as soon as it is typed, and asks for it again")
    func signupPasswordAtOnce() async throws {
        try await Self.withServer(prefix: "courier-signup") { _, _, address, environment, tmux in
            let command =
                "'\(CourierExecutable.url.path)' signup --as newbie --server \(address); echo \"EXITED $?\"; sleep 600"
            try await tmux.start("signup", columns: 100, rows: 20, environment: environment, command: command)
            _ = try await tmux.wait("signup", for: "the first prompt") {
                $0.contains { $0.contains("password for newbie:") }
            }
            try await tmux.type("signup", "short")
            try await tmux.press("signup", "Enter")
            // Said before any "again:", and asked for once more.
            _ = try await tmux.wait("signup", for: "too short, at once") { rows in
                rows.contains { $0.contains("at least 8 characters") } && !rows.contains { $0.contains("again:") }
                    && rows.filter { $0.contains("password for newbie:") }.count == 2
            }
            try await tmux.type("signup", "long enough 密码")
            try await tmux.press("signup", "Enter")
            _ = try await tmux.wait("signup", for: "the second prompt") { $0.contains { $0.contains("again:") } }
            try await tmux.type("signup", "long enough 密码")
            try await tmux.press("signup", "Enter")
            // This server takes no sign-ups: the server says so, once the password was good.
            _ = try await tmux.wait("signup", for: "the server's refusal") { rows in
                rows.contains { $0.contains("registration-closed") } && rows.contains { $0.contains("EXITED 1") }
            }
        }
    }

    @Test("the chat's commands: /help, /save, /view, /recall, /close; sends from other commands; last seen; offline")
    func commands() async throws {
        try await withTemporaryDirectory(prefix: "courier-chat-commands") { folder in
            let data = folder.appendingPathComponent("data")
            try await CourierExecutable.addUsers(["alice", "bob"], data: data)
            let (server, native, _) = try await ServerProcess.start(data: data, logFolder: folder)
            let address = "127.0.0.1:\(native)"
            let downloads = folder.appendingPathComponent("Downloads")
            try FileManager.default.createDirectory(at: downloads, withIntermediateDirectories: true)
            let environment = [
                "HOME": folder.path,
                "XDG_CONFIG_HOME": folder.appendingPathComponent("config").path,
                "XDG_DATA_HOME": folder.appendingPathComponent("share").path,
                "TZ": "UTC",
                // No display to open files on: /view says so.
                "DISPLAY": "",
                "WAYLAND_DISPLAY": "",
            ]
            func courier(_ arguments: String...) async throws -> (status: Int32, output: String) {
                try await CourierExecutable.run(arguments + ["--server", address], environment: environment)
            }
            for user in ["alice", "bob"] {
                let login = try await courier("login", "--as", user, "--password", "pw-" + user)
                #expect(login.status == 0, "\(login)")
            }
            let tmux = Tmux()
            do {
                let command =
                    "'\(CourierExecutable.url.path)' chat --as alice --with bob --server \(address); sleep 600"
                // Wide enough for the notices' paths.
                try await tmux.start("alice", columns: 220, rows: 30, environment: environment, command: command)
                _ = try await tmux.wait("alice", for: "connected") { $0.first?.contains("· connected") == true }

                // /open of a user the server does not know: said, and no conversation is added to the list.
                try await tmux.type("alice", "/open nobody")
                try await tmux.press("alice", "Enter")
                let unknown = try await tmux.wait("alice", for: "no such user") { rows in
                    rows.contains { $0.contains("no such user: nobody") }
                }
                #expect(!unknown.dropLast(2).contains { $0.contains("@nobody") }, "\(unknown)")

                // bob writes and sends a file from his commands: alice's chat shows both.
                #expect(try await courier("send", "--as", "bob", "--to", "alice", "here are the notes").status == 0)
                let notes = folder.appendingPathComponent("notes.txt")
                try Data("the notes\n".utf8).write(to: notes)
                #expect(try await courier("send", "--as", "bob", "--to", "alice", "--file", notes.path).status == 0)
                _ = try await tmux.wait("alice", for: "bob's file") { rows in
                    rows.contains { $0.contains("bob: [file notes.txt, 10 B]") }
                }

                // /save: into ~/Downloads under its name; again: beside it, not over it.
                try await tmux.type("alice", "/save")
                try await tmux.press("alice", "Enter")
                _ = try await tmux.wait("alice", for: "saved") { rows in
                    rows.contains { $0.contains("saved [file notes.txt, 10 B] to \(downloads.path)/notes.txt") }
                }
                #expect(try Data(contentsOf: downloads.appendingPathComponent("notes.txt")) == Data("the notes\n".utf8))
                try await tmux.type("alice", "/save")
                try await tmux.press("alice", "Enter")
                _ = try await tmux.wait("alice", for: "saved again") { rows in
                    rows.contains { $0.contains("notes (2).txt") }
                }
                #expect(FileManager.default.fileExists(atPath: downloads.appendingPathComponent("notes (2).txt").path))
                // /view: no opener without a display.
                try await tmux.type("alice", "/view")
                try await tmux.press("alice", "Enter")
                _ = try await tmux.wait("alice", for: "no opener") { rows in
                    rows.contains { $0.contains("no system opener here") }
                }

                // /help lists the keys and commands over the conversation; Esc closes it.
                try await tmux.type("alice", "/help")
                try await tmux.press("alice", "Enter")
                _ = try await tmux.wait("alice", for: "the help") { rows in
                    // On 30 rows every command shows, then the keys that fit (all of them on a taller terminal).
                    rows.contains { $0.contains("Keys and commands") } && rows.contains { $0.contains("/quit") }
                        && rows.contains { $0.contains("PgUp, PgDn") }
                }
                try await tmux.press("alice", "Escape")
                _ = try await tmux.wait("alice", for: "the help closed") { rows in
                    !rows.contains { $0.contains("Keys and commands") } && rows.contains { $0.contains("bob: here") }
                }

                // A send from a command of alice's, beside her chat, shows in it as hers.
                #expect(try await courier("send", "--as", "alice", "--to", "bob", "from a script").status == 0)
                _ = try await tmux.wait("alice", for: "her script's message") { rows in
                    rows.contains { $0.contains("you: from a script") }
                }
                // /recall takes back her newest message, the script's.
                try await tmux.type("alice", "/recall")
                try await tmux.press("alice", "Enter")
                _ = try await tmux.wait("alice", for: "recalled") { rows in
                    rows.contains { $0.contains("you: (recalled)") } && !rows.contains { $0.contains("from a script") }
                }

                // Now contacts, bob's next command comes and goes: alice sees when he was last seen.
                #expect(try await courier("send", "--as", "bob", "--to", "alice", "still there?").status == 0)
                _ = try await tmux.wait("alice", for: "bob last seen") { rows in
                    rows[1].contains("@bob · offline, last seen just now")
                }

                // /close: the conversation leaves the list until its next message.
                try await tmux.type("alice", "/close")
                try await tmux.press("alice", "Enter")
                _ = try await tmux.wait("alice", for: "closed") { rows in
                    rows.contains { $0.contains("closed @bob") } && rows.contains { $0.contains("No conversations.") }
                }
                #expect(try await courier("send", "--as", "bob", "--to", "alice", "back again").status == 0)
                _ = try await tmux.wait("alice", for: "back in the list") { rows in
                    rows.contains { $0.hasPrefix(" @bob") || $0.hasPrefix("›@bob") }
                }

                try await tmux.type("alice", "/open bob")
                try await tmux.press("alice", "Enter")
                _ = try await tmux.wait("alice", for: "bob's conversation open") { rows in
                    rows.contains { $0.contains("bob: back again") }
                }

                // Groups from the chat: alice makes one with bob, her contact, titles it in Chinese, lists it, and
                // mutes it; bob's mention of her still counts, marked in the list.
                try await tmux.type("alice", "/group new club bob")
                try await tmux.press("alice", "Enter")
                _ = try await tmux.wait("alice", for: "the group made, and open") { rows in
                    // Said "made #club", then (its event) "bob joined #club"; the list has it open either way.
                    rows.contains { $0.hasPrefix("›#club ") }
                }
                try await tmux.type("alice", "/open #club")
                try await tmux.press("alice", "Enter")
                try await tmux.type("alice", "/group title 读书会")
                try await tmux.press("alice", "Enter")
                _ = try await tmux.wait("alice", for: "the title") { rows in
                    rows.contains { $0.contains("›#club 读书会") }
                }
                try await tmux.type("alice", "/group members")
                try await tmux.press("alice", "Enter")
                _ = try await tmux.wait("alice", for: "the members") { rows in
                    rows.contains { $0.contains("#club 读书会 · owner alice · members bob") }
                }
                try await tmux.type("alice", "/mute")
                try await tmux.press("alice", "Enter")
                _ = try await tmux.wait("alice", for: "muted") { rows in
                    rows.contains { $0.contains("#club alerts on mentions of you only") }
                }
                try await tmux.type("alice", "/open bob")
                try await tmux.press("alice", "Enter")
                #expect(try await courier("send", "--as", "bob", "--group", "club", "@alice 周五见").status == 0)
                _ = try await tmux.wait("alice", for: "the mention marked") { rows in
                    rows.contains { $0.contains("#club 读书会") && $0.contains(" ~@1 ") }
                }

                // The server goes: alice's title says so and when she tries again; bob shows offline.
                _ = await server.terminate()
                _ = try await tmux.wait("alice", for: "offline") { rows in
                    rows.first?.contains("· offline, reconnecting in ") == true && rows[1].contains("@bob · offline")
                }
                try await tmux.press("alice", "C-c")
            } catch {
                await tmux.stop()
                _ = await server.terminate()
                throw error
            }
            await tmux.stop()
        }
    }

    /// Checks, with glibc's widths (the ones tmux draws by), that the list's border is in one column on every row
    /// of the body, no row overflows, and a wrapped message's second row starts under its first's text.
    static func expectAligned(_ screen: [String], columns: Int, message: String) {
        let border = ChatScreen.listWidth(columns: columns)
        let body = screen.dropFirst().dropLast(2)
        for row in screen {
            #expect(CLibraryWidth.of(row) <= columns, "\(row)")
        }
        for row in body {
            let index = row.firstIndex(of: "│")
            #expect(index.map { CLibraryWidth.of(row[..<$0]) } == border, "border misplaced: \(row)")
        }
        guard let first = body.firstIndex(where: { $0.contains(message) }), first + 1 < body.endIndex else {
            Issue.record("\(message) not on screen: \(screen)")
            return
        }
        let row = body[first]
        // The text starts after the sender's name and ": ".
        let name = row.range(of: message).flatMap { row[$0].range(of: ": ") }
        let textColumn = name.map { CLibraryWidth.of(row[..<$0.upperBound]) }
        let next = body[first + 1]
        let start = next.firstIndex(of: "│").flatMap { border in
            next[next.index(after: border)...].firstIndex { $0 != " " }
        }
        #expect(start.map { CLibraryWidth.of(next[..<$0]) } == textColumn, "\(row)\n\(next)")
    }
}
