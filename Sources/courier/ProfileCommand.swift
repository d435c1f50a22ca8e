import ArgumentParser
import CourierChat
import CourierClient
import Foundation

/// `courier profile`: one's display name and avatar, or another user's profile.
struct ProfileCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "profile",
        abstract: "Show or change your display name and avatar; show another user's profile with --user.",
        discussion: """
            Without a change it prints a profile: the user name, the display name ("-" for none) and the avatar's \
            and thumbnail's ids (sha256, for `courier media get`): under a header in columns on a terminal, else \
            tab-separated; --json prints one object. --display-name takes any script, at most 64 characters, \
            never one that reads as another user's name or a reserved one; "" removes it. --avatar takes a JPEG, \
            PNG, WebP or GIF of at most 5 MiB, with a \
            thumbnail of at most 64 KiB: --thumbnail FILE, else one made with ffmpeg (128 pixels at most across), \
            else the avatar itself when it is that small. Everyone who sees you (your groups' members, the people \
            you write with) gets the change, offline devices when they next connect; the server takes 20 changes \
            an hour by default (rate-limited past them). Your own profile also shows whether your push \
            notifications show who wrote and what (--push-previews on, the default) or only "New message" (off): \
            a setting nobody else sees.
            """
    )

    @OptionGroup var options: ClientOptions

    @Option(help: ArgumentHelp("Your display name, in any script (\"\" removes it).", valueName: "name"))
    var displayName: String?

    @Option(help: ArgumentHelp("An image to show as your avatar.", valueName: "file"))
    var avatar: String?

    @Option(help: ArgumentHelp("The avatar's thumbnail (default: made with ffmpeg).", valueName: "file"))
    var thumbnail: String?

    @Flag(help: "Take your avatar off.")
    var removeAvatar = false

    @Option(
        help: ArgumentHelp(
            "Whether your push notifications show who wrote and what (on, the default), or only \"New message\" (off).",
            valueName: "on|off"
        )
    )
    var pushPreviews: Switch?

    @Option(help: ArgumentHelp("Show this user's profile instead of yours.", valueName: "user"))
    var user: String?

    @Flag(help: "Print the profile as one JSON object.")
    var json = false

    /// The largest thumbnail the server takes (`max-thumbnail-bytes`' default).
    static let maxThumbnailBytes = 64 * 1024

    func run() async throws {
        let changes = self.displayName != nil || self.avatar != nil || self.removeAvatar || self.pushPreviews != nil
        self.checkParsed {
            if changes, self.user != nil { throw ValidationError("--user shows a profile: it changes none") }
            if self.avatar != nil, self.removeAvatar { throw ValidationError("--avatar or --remove-avatar, not both") }
            if self.thumbnail != nil, self.avatar == nil { throw ValidationError("--thumbnail goes with --avatar") }
        }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("courier-thumbnail-\(UUID())")
        defer { try? FileManager.default.removeItem(at: folder) }
        if self.avatar != nil, self.thumbnail == nil {
            try FileManager.default.createDirectory(
                at: folder,
                withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700]
            )
        }
        let thumbnail = try self.avatar.map { try self.thumbnailFile(for: URL(fileURLWithPath: $0), in: folder) }
        let profile = try await ClientSession.run(self.options) { session -> ProfileInfo? in
            try await session.connectOrFail()
            do {
                if let displayName = self.displayName { try await session.client.setDisplayName(displayName) }
                if let avatar = self.avatar, let thumbnail {
                    try await session.client.setAvatar(file: URL(fileURLWithPath: avatar), thumbnail: thumbnail)
                }
                if self.removeAvatar { try await session.client.removeAvatar() }
                if let previews = self.pushPreviews { try await session.client.setPushPreviews(previews == .on) }
                return try await session.client.profiles(of: [self.user ?? self.options.user]).first
            } catch let error as CourierClientError {
                throw CommandFailure(description: "\(error.code): \(error.message)")
            }
        }
        guard let profile else {
            throw CommandFailure(description: "no user named \(ChatText.printable(self.user ?? self.options.user))")
        }
        if self.json {
            var object: [String: Any] = ["user": profile.user]
            object["display_name"] = profile.displayName
            object["avatar"] = profile.avatar?.sha256
            object["thumbnail"] = profile.thumbnail?.sha256
            object["push_previews"] = profile.pushPreviews
            object["bot"] = profile.bot
            try printJSON(object)
            return
        }
        // The server's words reach a terminal: every field printable.
        var columns = ["user", "display name", "avatar", "thumbnail"]
        var row: [Table.Cell] = [
            .text(profile.user), profile.displayName.map(Table.Cell.text) ?? .none,
            profile.avatar.map { .text($0.sha256) } ?? .none, profile.thumbnail.map { .text($0.sha256) } ?? .none,
        ]
        // A program's account says so.
        if profile.bot {
            columns.append("kind")
            row.append(.text("bot"))
        }
        // One's own profile: the push setting too.
        if let previews = profile.pushPreviews {
            columns.append("push previews")
            row.append(.text(previews ? "on" : "off"))
        }
        var table = Table(columns: columns)
        table.add(row)
        table.print()
    }

    /// The thumbnail to send with an avatar: the one given, else one ffmpeg makes, else the avatar itself when it is
    /// small enough.
    private func thumbnailFile(for avatar: URL, in folder: URL) throws -> URL {
        if let thumbnail = self.thumbnail { return URL(fileURLWithPath: thumbnail) }
        let made = folder.appendingPathComponent("thumbnail.jpg")
        if let ffmpeg = Self.program("ffmpeg") {
            let process = Process()
            process.executableURL = ffmpeg
            // Read as the still image it should be, from the file alone: a "picture" that is a playlist in disguise
            // makes ffmpeg open nothing else, and a % in its name is no frame pattern.
            let demuxer =
                avatar.pathExtension.lowercased() == "gif" ? ["-f", "gif"] : ["-f", "image2", "-pattern_type", "none"]
            process.arguments =
                ["-nostdin", "-loglevel", "error", "-y", "-protocol_whitelist", "file"] + demuxer + [
                    "-i", avatar.path, "-frames:v", "1", "-vf", "scale=128:128:force_original_aspect_ratio=decrease",
                    "-q:v", "5", made.path,
                ]
            process.standardInput = FileHandle.nullDevice
            try process.run()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else {
                throw CommandFailure(
                    description: "ffmpeg could not make a thumbnail of \(avatar.path): is it an image?"
                )
            }
            return made
        }
        let size = (try? FileManager.default.attributesOfItem(atPath: avatar.path)[.size] as? Int) ?? .max
        guard size <= Self.maxThumbnailBytes else {
            throw CommandFailure(
                description: "no ffmpeg here to make a thumbnail: install it, or pass --thumbnail FILE (at most 64 KiB)"
            )
        }
        return avatar
    }

    /// An executable on `$PATH`, or nil.
    static func program(_ name: String) -> URL? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return path.split(separator: ":").map { URL(fileURLWithPath: String($0)).appendingPathComponent(name) }
            .first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }
}

/// A setting's `on` or `off` on the command line.
enum Switch: String, ExpressibleByArgument, CaseIterable {
    case on, off
}
