import CourierProtocol
import CourierServer
import CourierServerTesting
import CourierTesting
import CourierWire
import Crypto
import Foundation
import NIOCore
import Synchronization
import Testing

@testable import CourierClient

@Suite("The client SDK's media", .serialized)
struct MediaClientTests {
    static func file(_ folder: URL, _ name: String, bytes count: Int, seed name2: String) throws -> (URL, [UInt8]) {
        var random = SeededRandom(seed: TestSeed.make(for: name2))
        var bytes: [UInt8] = []
        random.appendBytes(count, to: &bytes)
        let url = folder.appendingPathComponent(name)
        try Data(bytes).write(to: url)
        return (url, bytes)
    }

    /// A file's permission bits.
    static func mode(_ url: URL) throws -> Int {
        try ((FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as? NSNumber)?.intValue ?? -1)
            & 0o777
    }

    static func sha256(_ url: URL) throws -> String {
        SHA256.hash(data: try Data(contentsOf: url)).map { String(format: "%02x", $0) }.joined()
    }

    /// Runs `body` with the clients running, stopping them after.
    static func running<T: Sendable>(
        _ clients: [CourierClient],
        _ body: @Sendable () async throws -> T
    ) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            for client in clients {
                group.addTask {
                    await client.run()
                    return nil
                }
            }
            defer { for client in clients { client.stop() } }
            let result = try await body()
            for client in clients { client.stop() }
            while let next = try await group.next() { _ = next }
            return result
        }
    }

    @Test("a file sent with progress reaches the other client as media; the download lands in the cache, checked")
    func sendAndDownload() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                // Bob's media folder as an older version left it: open to all, with a file readable by all.
                let bobMedia = folder.appendingPathComponent("bob-sdk.sqlite.media")
                try FileManager.default.createDirectory(
                    at: bobMedia,
                    withIntermediateDirectories: true,
                    attributes: [.posixPermissions: 0o777]
                )
                let stale = bobMedia.appendingPathComponent(String(repeating: "ab", count: 32))
                try Data("old".utf8).write(to: stale)
                try FileManager.default.setAttributes([.posixPermissions: 0o666], ofItemAtPath: stale.path)
                let alice = try ClientTests.client(fixture, "alice", folder: folder)
                let bob = try ClientTests.client(fixture, "bob", folder: folder)
                #expect(try Self.mode(bobMedia) == 0o700 && Self.mode(stale) == 0o600, "tightened at the start")
                let aliceEvents = EventReader(alice)
                let bobEvents = EventReader(bob)
                let (photo, bytes) = try Self.file(folder, "IMG_0001.JPG", bytes: 2_500_000, seed: "sendAndDownload")
                try await Self.running([alice, bob]) {
                    var steps: [UploadProgress] = []
                    for try await step in alice.sendMedia(file: photo, to: .user("bob"), width: 4032, height: 3024) {
                        steps.append(step)
                    }
                    let sha = try Self.sha256(photo)
                    #expect(steps.first == .hashed(sha256: sha, size: Int64(bytes.count)))
                    guard case .queued(let id, let media)? = steps.last else {
                        Issue.record("\(steps)")
                        return
                    }
                    #expect(media.kind == .image && media.mime == "image/jpeg" && media.name == "IMG_0001.JPG")
                    #expect(media.width == 4032 && media.height == 3024 && media.durationMs == 0)
                    let sent = steps.compactMap { step -> Int64? in
                        if case .uploading(let sent, _) = step { sent } else { nil }
                    }
                    #expect(sent.last == Int64(bytes.count))
                    #expect(sent == sent.sorted(), "progress never goes back")
                    // A text sent after the file follows it.
                    try await alice.send("did you get it?", to: .user("bob"))
                    _ = try await aliceEvents.next("sent") { event -> Bool? in
                        if case .sent(id, _, _, _) = event { true } else { nil }
                    }
                    let received = try await bobEvents.next("the media message") { event -> ChatMessage? in
                        if case .message(let message) = event, message.media != nil { message } else { nil }
                    }
                    #expect(received.media == media)
                    #expect(received.text.isEmpty)
                    let text = try await bobEvents.next("the text") { event -> ChatMessage? in
                        if case .message(let message) = event, message.media == nil { message } else { nil }
                    }
                    #expect(text.seq == received.seq + 1)
                    #expect(try await bob.storedMessages(in: .user("alice")).first?.media == media)
                    #expect(try await alice.storedMessages(in: .user("bob")).first?.media == media)

                    var finished: URL?
                    var received_: [Int64] = []
                    for try await step in bob.download(media) {
                        switch step {
                        case .downloading(let count, let total):
                            #expect(total == Int64(bytes.count))
                            received_.append(count)
                        case .finished(let url): finished = url
                        }
                    }
                    let url = try #require(finished)
                    #expect(try Self.sha256(url) == sha)
                    #expect(received_.last == Int64(bytes.count))
                    #expect(try Self.mode(url) == 0o600, "the downloaded file is its owner's alone")
                }
            }
        }
    }

    @Test(
        "a download ends whole through a window smaller than a chunk, and when the server grants less than was asked",
        arguments: [(100_003, 16 * 1024 * 1024), (64 * 1024 * 1024, 300_001)]
    )
    func smallWindow(asked: Int, serverCap: Int) async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let alice = try ClientTests.client(fixture, "alice", folder: folder)
                var configuration = try ClientTests.configuration(fixture, "bob", folder: folder)
                // Not multiples of anything the server sends.
                configuration.fetchWindowBytes = asked
                let bob = try CourierClient(configuration: configuration)
                let bobEvents = EventReader(bob)
                let (file, bytes) = try Self.file(folder, "clip.bin", bytes: 1_234_567, seed: "smallWindow")
                try await Self.running([alice, bob]) {
                    for try await _ in alice.sendMedia(file: file, to: .user("bob")) {}
                    let media = try await bobEvents.next("the media message") { event -> MediaInfo? in
                        if case .message(let message) = event { message.media } else { nil }
                    }
                    var finished: URL?
                    for try await step in bob.download(media) {
                        if case .finished(let url) = step { finished = url }
                    }
                    let url = try #require(finished)
                    #expect(try Data(contentsOf: url) == Data(bytes))
                }
            } configure: { server in
                server.media.maxFetchWindowBytes = serverCap
            }
        }
    }

    @Test("a cut download resumes from the bytes on disk; the cache serves repeats, evicts the least recently used")
    func resumeAndCache() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                try await fixture.user("bob")
                let alice = try ClientTests.client(fixture, "alice", folder: folder)
                var configuration = try ClientTests.configuration(fixture, "bob", folder: folder)
                configuration.mediaCacheBytes = 2_500_000
                configuration.memoryCacheItemBytes = 200_000
                let bob = try CourierClient(configuration: configuration)
                let bobEvents = EventReader(bob)
                let files = try (0..<3).map { index in
                    try Self.file(folder, "clip\(index).mp4", bytes: 1_000_000, seed: "resumeAndCache-\(index)")
                }
                let (note, _) = try Self.file(folder, "note.m4a", bytes: 100_000, seed: "resumeAndCache-note")
                try await Self.running([alice, bob]) {
                    var media: [MediaInfo] = []
                    for (url, _) in files + [(note, [])] {
                        for try await step in alice.sendMedia(file: url, to: .user("bob")) {
                            if case .queued(_, let info) = step { media.append(info) }
                        }
                    }
                    #expect(media.map(\.kind) == [.video, .video, .video, .voice])
                    for _ in 0..<4 {
                        _ = try await bobEvents.next("a media message") { event -> Bool? in
                            if case .message(let message) = event, message.media != nil { true } else { nil }
                        }
                    }
                    // Half of the first file is on disk from a download a broken connection cut.
                    let half = files[0].1.count / 2
                    try Data(files[0].1[..<half]).write(to: bob.media.partFile(media[0].sha256))
                    let before = try await fixture.metric("courier_media_bytes_out_total")
                    let first = try await Self.finish(bob.download(media[0]))
                    #expect(try Self.sha256(first) == media[0].sha256)
                    #expect(
                        try await fixture.metric("courier_media_bytes_out_total") - before == files[0].1.count - half
                    )

                    // A repeat comes from the cache: no bytes from the server.
                    let again = try await Self.finish(bob.download(media[0]))
                    #expect(again == first)
                    _ = try await Self.finish(bob.download(media[1]))
                    // Using the first makes the second the least recently used...
                    _ = try await Self.finish(bob.download(media[0]))
                    #expect(try await fixture.metric("courier_media_bytes_out_total") - before == 1_500_000)
                    // ...so the third evicts it: 3 MB would be over the 2.5 MB bound.
                    _ = try await Self.finish(bob.download(media[2]))
                    #expect(bob.media.file(media[1].sha256) == nil)
                    #expect(bob.media.file(media[0].sha256) != nil)
                    #expect(bob.media.totalBytes <= 2_500_000)

                    // A voice clip is small enough for the memory layer.
                    _ = try await Self.finish(bob.download(media[3]))
                    #expect(!bob.media.inMemory(media[3].sha256))
                    let data = try #require(try bob.cachedData(media[3]))
                    #expect(SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined() == media[3].sha256)
                    #expect(bob.media.inMemory(media[3].sha256))
                    #expect(try bob.cachedData(media[2]) != nil)
                    #expect(!bob.media.inMemory(media[2].sha256), "a 1 MB file stays out of memory")
                }
            }
        }
    }

    @Test("the server's refusal of an upload (over the quota) ends the progress with its code")
    func refusal() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with(
                { fixture in
                    try await fixture.user("alice")
                    let alice = try ClientTests.client(fixture, "alice", folder: folder)
                    let (big, _) = try Self.file(folder, "big.bin", bytes: 300_000, seed: "refusal")
                    try await Self.running([alice]) {
                        do {
                            for try await _ in alice.sendMedia(file: big, to: .user("alice")) {}
                            Issue.record("the upload was not refused")
                        } catch let error as CourierClientError {
                            #expect(error.code == "quota-exceeded", "\(error)")
                        }
                        #expect(try await alice.pendingMessages().isEmpty, "nothing queued")
                    }
                },
                configure: { $0.media.quotaBytesPerUser = 200_000 }
            )
        }
    }

    @Test("an upload the server still holds for another connection is retried until that connection is gone")
    func uploadBusyIsRetried() async throws {
        try await withTemporaryDirectory { folder in
            try await ServerFixture.with { fixture in
                try await fixture.user("alice")
                let (file, bytes) = try Self.file(folder, "clip.mp4", bytes: 400_000, seed: "uploadBusyIsRetried")
                // A bare connection of alice's starts the same upload and stops half-way, holding it.
                let holder = try await NativeTestClient.connect(port: fixture.ports.native)
                var hello = ClientEnvelope()
                hello.hello.password.user = "alice"
                hello.hello.password.password = "pw-alice"
                try await holder.send(hello)
                _ = try await holder.expect("a welcome") { $0.welcome }
                var request = ClientEnvelope()
                request.upload.sha256 = try Self.sha256(file)
                request.upload.size = UInt64(bytes.count)
                request.upload.streamID = 1
                let id = try await holder.send(request)
                _ = try await holder.expect("ready") { $0.requestID == id ? $0.uploadReady : nil }
                try await holder.send(
                    frame: NativeFrame(kind: .mediaChunk, streamID: 1, payload: ByteBuffer(bytes: bytes[..<100_000]))
                )
                let alice = try ClientTests.client(fixture, "alice", folder: folder)
                try await Self.running([alice]) {
                    let sending = Mutex(false)
                    let upload = Task {
                        var steps: [UploadProgress] = []
                        for try await step in alice.sendMedia(file: file, to: .user("alice")) {
                            if case .uploading = step { sending.withLock { $0 = true } }
                            steps.append(step)
                        }
                        return steps
                    }
                    // Refused as busy (and retried) while the old connection holds the upload...
                    try await waitUntil("the upload refused as busy") {
                        try await fixture.metric("courier_refusals_total") >= 1
                    }
                    #expect(!sending.withLock { $0 }, "nothing sent while the upload is another connection's")
                    // ...and taken up from where it stands once that connection is gone.
                    await holder.close()
                    let steps = try await upload.value
                    guard case .queued? = steps.last else {
                        Issue.record("\(steps)")
                        return
                    }
                    let resumedAt = steps.compactMap { step -> Int64? in
                        if case .uploading(let sent, _) = step { sent } else { nil }
                    }.first
                    #expect(resumedAt == 100_000, "the retry resumed at the server's offset: \(steps)")
                }
            }
        }
    }

    static func finish(_ progress: AsyncThrowingStream<DownloadProgress, any Error>) async throws -> URL {
        var file: URL?
        for try await step in progress { if case .finished(let url) = step { file = url } }
        return try #require(file)
    }
}
