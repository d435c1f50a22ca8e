import CourierClient
import CourierTesting
import Foundation
import Testing

@testable import CourierChat

@Suite("The terminal chat's commands, presence and files, without a terminal")
struct ChatCommandsTests {
    static let now = ChatStateTests.now

    /// A chat of alice's with bob's messages 1...3 (the last a file), and one of hers (4), in @bob; @carol too.
    static func state() -> ChatState {
        var state = ChatState(me: "alice", server: "test")
        let file = MediaInfo(
            kind: .file,
            sha256: String(repeating: "a", count: 64),
            size: 10,
            mime: "text/plain",
            name: "notes.txt"
        )
        var messages = [
            ChatStateTests.message(1, from: "bob"), ChatStateTests.message(2, from: "bob"),
            ChatStateTests.message(4, from: "alice", "mine"),
        ]
        messages.append(
            ChatMessage(
                id: "f3",
                from: "bob",
                conversation: .user("bob"),
                seq: 3,
                time: Self.now,
                text: "",
                media: file
            )
        )
        messages.append(ChatStateTests.message(1, from: "carol", in: .user("carol"), at: Self.now - 60))
        state.load(stored: messages, pending: [], now: Self.now)
        _ = state.select(.user("bob"), now: Self.now)
        return state
    }

    static func run(_ line: String, in state: inout ChatState) -> [ChatAction] {
        state.handle(.paste(line), now: Self.now) + state.handle(.enter, now: Self.now)
    }

    @Test("/help shows the keys and commands until the next key; Esc only closes it")
    func help() {
        var state = Self.state()
        _ = Self.run("/help", in: &state)
        #expect(state.helpShown)
        // On 80 × 24 every command shows; on a taller terminal, the keys too.
        var screen = ChatScreen(state, now: Self.now).rows.map(\.plain).joined(separator: "\n")
        for (command, _) in ChatHelp.commands { #expect(screen.contains(command), "\(command)") }
        #expect(!screen.contains("bob: hi"))
        state.rows = 40
        screen = ChatScreen(state, now: Self.now).rows.map(\.plain).joined(separator: "\n")
        for (keys, _) in ChatHelp.keys { #expect(screen.contains(keys), "\(keys)") }
        _ = state.handle(.escape, now: Self.now)
        #expect(!state.helpShown && state.input.isEmpty)
        // Any other key closes it and does what it does.
        _ = Self.run("/help", in: &state)
        _ = state.handle(.character("x"), now: Self.now)
        #expect(!state.helpShown && state.input.text == "x")
        // `--help` says the same list.
        for (command, does) in ChatHelp.commands {
            #expect(ChatHelp.text.contains(command) && ChatHelp.text.contains(does))
        }
    }

    @Test("/recall asks to recall her newest message; /save and /view the newest file; without one, a notice says so")
    func recallSaveView() {
        var state = Self.state()
        #expect(Self.run("/recall", in: &state) == [.recall(id: "m4-alice", in: .user("bob"))])
        let actions = Self.run("/save ~/keep", in: &state)
        guard case .save(let media, let path)? = actions.first else {
            Issue.record("\(actions)")
            return
        }
        #expect(media.name == "notes.txt" && path == "~/keep")
        #expect(Self.run("/save", in: &state).first == .save(media, to: nil))
        #expect(Self.run("/view", in: &state) == [.view(media)])
        // carol sent no file, and alice wrote nothing to her.
        _ = state.select(.user("carol"), now: Self.now)
        #expect(Self.run("/save", in: &state).isEmpty && state.notice == "no file in @carol to save")
        #expect(Self.run("/recall", in: &state).isEmpty && state.notice == "nothing of yours to recall in @carol")
        // A recalled file is not saved any more.
        _ = state.select(.user("bob"), now: Self.now)
        _ = state.apply(.recalled(conversation: .user("bob"), seq: 3, id: "f3", by: "bob"), now: Self.now)
        #expect(Self.run("/view", in: &state).isEmpty && state.notice == "no file in @bob to view")
    }

    @Test("/close hides the conversation until a newer message, opens the next, and is kept; /open brings it back")
    func close() {
        var state = Self.state()
        let actions = Self.run("/close", in: &state)
        #expect(actions.last == .closedChanged(["@bob": 4]))
        #expect(state.open == "@carol" && state.ordered.map(\.conversation) == [.user("carol")])
        // An older page of history does not bring it back; a newer message does.
        _ = state.merge(history: [ChatStateTests.message(4, from: "alice", "mine")], more: false, of: .user("bob"))
        #expect(state.ordered.map(\.conversation) == [.user("carol")])
        #expect(
            state.apply(.message(ChatStateTests.message(5, from: "bob")), now: Self.now).contains(.closedChanged([:]))
        )
        #expect(state.ordered.map(\.conversation) == [.user("bob"), .user("carol")])
        // Closed again, then opened by name.
        _ = state.select(.user("bob"), now: Self.now)
        _ = Self.run("/close", in: &state)
        #expect(Self.run("/open bob", in: &state).contains(.closedChanged([:])))
        #expect(state.open == "@bob")
    }

    @Test(
        "the conversation /close opens next is only glanced at: nothing read until a key acts in it, Tab leaves it unread"
    )
    func closeDoesNotRead() {
        var state = Self.state()
        _ = state.apply(.message(ChatStateTests.message(7, from: "carol", in: .user("carol"), "你好？")), now: Self.now)
        let unread = state.threads["@carol"]!.unread
        #expect(unread > 0)
        var actions = Self.run("/close", in: &state)
        #expect(state.open == "@carol")
        #expect(!actions.contains { if case .markRead = $0 { true } else { false } }, "\(actions)")
        #expect(state.threads["@carol"]!.unread == unread)
        // A message arriving meanwhile is not read either, and neither is the history the server sends.
        actions = state.apply(
            .message(ChatStateTests.message(8, from: "carol", in: .user("carol"), "在吗")),
            now: Self.now
        )
        actions += state.merge(
            history: [ChatStateTests.message(8, from: "carol", in: .user("carol"), "在吗")],
            more: false,
            of: .user("carol")
        )
        actions += state.apply(.connected(user: "alice"), now: Self.now)
        #expect(!actions.contains { if case .markRead = $0 { true } else { false } }, "\(actions)")
        #expect(state.threads["@carol"]!.unread == unread + 1)
        // A command typed is not reading it (the "/" of /quit, say).
        actions = state.handle(.character("/"), now: Self.now) + state.handle(.character("q"), now: Self.now)
        #expect(!actions.contains { if case .markRead = $0 { true } else { false } }, "\(actions)")
        _ = state.handle(.control("u"), now: Self.now)
        // Scrolling up in it reads it.
        actions = state.handle(.up, now: Self.now)
        #expect(actions.first == .markRead(.user("carol"), upToSeq: 8), "\(actions)")
        #expect(state.threads["@carol"]!.unread == 0 && !state.glancing)
        // Glanced at again, then left with Tab: still unread.
        _ = state.apply(.message(ChatStateTests.message(9, from: "carol", in: .user("carol"), "？")), now: Self.now)
        _ = state.select(.user("carol"), now: Self.now, reading: false)
        _ = state.apply(.message(ChatStateTests.message(10, from: "carol", in: .user("carol"), "!!")), now: Self.now)
        _ = state.apply(.message(ChatStateTests.message(1, from: "dave", in: .user("dave"), "hello")), now: Self.now)
        actions = state.handle(.tab, now: Self.now)
        #expect(state.open == "@dave")
        #expect(!actions.contains(.markRead(.user("carol"), upToSeq: 10)), "\(actions)")
        #expect(state.threads["@carol"]!.unread == 1, "message 10 came while it was only glanced at")
    }

    @Test("peers show offline with last seen; everyone offline while this side is; the title says when it retries")
    func presence() {
        var state = Self.state()
        _ = state.apply(.connected(user: "alice"), now: Self.now)
        _ = state.apply(.presence(user: "bob", online: true, lastSeen: nil), now: Self.now)
        var header = ChatScreen(state, now: Self.now).rows[1].plain
        #expect(header.contains("@bob · online"), "\(header)")
        _ = state.apply(.presence(user: "bob", online: false, lastSeen: Self.now - 300), now: Self.now)
        header = ChatScreen(state, now: Self.now).rows[1].plain
        #expect(header.contains("@bob · offline, last seen 5 min ago"), "\(header)")
        _ = state.apply(.presence(user: "bob", online: true, lastSeen: nil), now: Self.now)
        _ = state.apply(.disconnected(Disconnection(.unreachable, "connection refused")), now: Self.now)
        _ = state.apply(.reconnecting(after: .seconds(3)), now: Self.now)
        let rows = ChatScreen(state, now: Self.now).rows.map(\.plain)
        #expect(rows[0].contains("offline, reconnecting in 3 s: connection refused"), "\(rows[0])")
        #expect(rows[1].contains("@bob · offline"), "\(rows[1])")
    }

    @Test("saved files take the sender's name made safe, never over another file; settings keep closed conversations")
    func files() async throws {
        #expect(ChatFiles.safeName("../../etc/passwd") == "passwd")
        #expect(ChatFiles.safeName(".hidden") == "hidden")
        #expect(ChatFiles.safeName("a\u{1B}[2Jb\u{7}.txt") == "a[2Jb.txt")
        #expect(ChatFiles.safeName("") == "file" && ChatFiles.safeName("/") == "file")
        // A slash joined to a combining mark is still a slash; a right-to-left override cannot turn the extension.
        #expect(ChatFiles.safeName("..\u{2F}\u{301}etc\\x") == "x")
        #expect(ChatFiles.safeName("a/\u{301}b.txt") == "\u{301}b.txt")
        #expect(ChatFiles.safeName("photo\u{202E}gpj.exe") == "photogpj.exe")
        #expect(ChatFiles.safeName("\u{85}\u{9B}x") == "x")
        // Long names keep their extension within 200 bytes.
        let long = ChatFiles.safeName(String(repeating: "é", count: 300) + ".jpeg")
        #expect(long.utf8.count <= 200 && long.hasSuffix("é.jpeg"))
        // Only common image, video and audio types open, by their MIME type, never by the sender's name.
        let sha = String(repeating: "ab", count: 32)
        let image = MediaInfo(kind: .image, sha256: sha, size: 5, mime: "image/PNG", name: "x.desktop")
        #expect(ChatFiles.viewableExtension(for: image) == "png")
        for (kind, mime) in [
            (MediaInfo.Kind.file, "image/png"), (.image, "application/x-desktop"), (.video, "text/html"),
            (.voice, "application/java-archive"),
        ] {
            let media = MediaInfo(kind: kind, sha256: sha, size: 5, mime: mime, name: "x.png")
            #expect(ChatFiles.viewableExtension(for: media) == nil, "\(kind) \(mime)")
        }
        try await withTemporaryDirectory { folder in
            let viewing = folder.appendingPathComponent("view")
            let downloaded = folder.appendingPathComponent("downloaded")
            try Data("img".utf8).write(to: downloaded)
            let opened = try ChatFiles.viewable(downloaded, media: image, extension: "png", in: viewing)
            #expect(opened.lastPathComponent == "courier-abababababababab.png")
            let folderMode = try FileManager.default.attributesOfItem(atPath: viewing.path)[.posixPermissions] as? Int
            #expect(folderMode == 0o700)
            let source = folder.appendingPathComponent("source")
            try Data("bytes".utf8).write(to: source)
            let downloads = folder.appendingPathComponent("Downloads")
            try FileManager.default.createDirectory(at: downloads, withIntermediateDirectories: true)
            let first = try ChatFiles.save(source, as: "photo.jpg", to: nil, downloads: downloads)
            let second = try ChatFiles.save(source, as: "photo.jpg", to: nil, downloads: downloads)
            #expect(first.lastPathComponent == "photo.jpg" && second.lastPathComponent == "photo (2).jpg")
            // A folder given: into it; a file given: that file, never over one.
            let named = try ChatFiles.save(
                source,
                as: "x",
                to: folder.appendingPathComponent("chosen").path,
                downloads: downloads
            )
            #expect(try named.lastPathComponent == "chosen" && Data(contentsOf: named) == Data("bytes".utf8))
            #expect(throws: ChatError.self) {
                _ = try ChatFiles.save(source, as: "x", to: named.path, downloads: downloads)
            }
            // A folder named with its last slash that does not exist yet: made, and the file saved into it (round
            // three: a file named after the folder was written instead).
            let into = try ChatFiles.save(
                source,
                as: "照片.jpg",
                to: folder.appendingPathComponent("新文件夹").path + "/",
                downloads: downloads
            )
            #expect(into.path == folder.appendingPathComponent("新文件夹/照片.jpg").path, "\(into.path)")
            // Paths as typed: quotes dropped, ~ as $HOME.
            let home = try #require(ProcessInfo.processInfo.environment["HOME"])
            #expect(ChatFiles.typedPath("~/x.png") == home + "/x.png")
            #expect(ChatFiles.typedPath("~") == home)
            #expect(ChatFiles.typedPath("\"/tmp/my photo.png\"") == "/tmp/my photo.png")
            #expect(ChatFiles.typedPath("'~/a b.png'") == home + "/a b.png")
            #expect(ChatFiles.typedPath("\"half") == "\"half")
            let settings = ChatSettings(file: folder.appendingPathComponent("alice.chat.json"))
            #expect(settings.closed().isEmpty)
            try settings.save(closed: ["@bob": 4, "#team": 9])
            #expect(settings.closed() == ["@bob": 4, "#team": 9])
            let mode = try FileManager.default.attributesOfItem(atPath: settings.file.path)[.posixPermissions] as? Int
            #expect(mode == 0o600)
        }
    }
}
