import CourierClient
public import Foundation

/// Where the chat puts the files it saves (`/save`) and opens (`/view`).
public enum ChatFiles {
    /// Where `/save` puts files when not told: `$XDG_DOWNLOAD_DIR`, else `~/Downloads` where it exists, else the
    /// current folder.
    public static func downloadsFolder(
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> URL {
        let exists = { (path: String) in
            var folder: ObjCBool = false
            return FileManager.default.fileExists(atPath: path, isDirectory: &folder) && folder.boolValue
        }
        if let path = environment["XDG_DOWNLOAD_DIR"], path.hasPrefix("/"), exists(path) {
            return URL(fileURLWithPath: path, isDirectory: true)
        }
        let home = environment["HOME"] ?? NSHomeDirectory()
        let downloads = URL(fileURLWithPath: home, isDirectory: true).appendingPathComponent("Downloads")
        if exists(downloads.path) { return downloads }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true)
    }

    /// A file name from a sender's name for it, safe as one path component here: what follows its last `/` or `\`
    /// (scalar by scalar: a `/` joined to a combining mark is still one), without control characters (C0, C1) or
    /// direction overrides (which could make `exe.jpg` read as `gpj.exe`), without leading dots, at most 200 bytes
    /// with its extension kept; "file" when nothing is left.
    static func safeName(_ name: String) -> String {
        var scalars = String.UnicodeScalarView()
        for scalar in name.unicodeScalars {
            let value = scalar.value
            if scalar == "/" || scalar == "\\" {
                scalars.removeAll()
                continue
            }
            let control = value < 0x20 || (0x7F...0x9F).contains(value)
            let direction =
                (0x202A...0x202E).contains(value) || (0x2066...0x2069).contains(value)
                || [0x200E, 0x200F, 0x061C].contains(value)
            if control || direction { continue }
            scalars.append(scalar)
        }
        var kept = String(scalars).trimmingCharacters(in: .whitespaces)
        while kept.hasPrefix(".") { kept.removeFirst() }
        if kept.utf8.count > 200 {
            let pathExtension = (kept as NSString).pathExtension
            let suffix = pathExtension.isEmpty || pathExtension.utf8.count > 16 ? "" : "." + pathExtension
            var base = String(kept.dropLast(suffix.count))
            while base.utf8.count + suffix.utf8.count > 200 { base.removeLast() }
            kept = base + suffix
        }
        return kept.isEmpty ? "file" : kept
    }

    /// Copies a downloaded file for the user: to `path` if given (a folder: into it under the file's name; else that
    /// file, which must not exist yet), else into `downloads`; never over an existing file (`photo (2).jpg`).
    ///
    /// - Returns: Where the copy is.
    static func save(_ file: URL, as name: String, to path: String?, downloads: URL) throws -> URL {
        let safe = Self.safeName(name)
        var destination: URL
        if let path {
            let expanded = Self.typedPath(path)
            var folder: ObjCBool = false
            if FileManager.default.fileExists(atPath: expanded, isDirectory: &folder) {
                guard folder.boolValue else {
                    throw ChatError(description: "\(expanded) exists; name another file, or a folder")
                }
                destination = Self.unused(safe, in: URL(fileURLWithPath: expanded, isDirectory: true))
            } else if expanded.hasSuffix("/") {
                // A folder by its last slash: made, and the file saved into it.
                do {
                    try FileManager.default.createDirectory(atPath: expanded, withIntermediateDirectories: true)
                } catch {
                    throw ChatError(description: "cannot make the folder \(expanded) (\(error.localizedDescription))")
                }
                destination = Self.unused(safe, in: URL(fileURLWithPath: expanded, isDirectory: true))
            } else {
                destination = URL(fileURLWithPath: expanded)
            }
        } else {
            destination = Self.unused(safe, in: downloads)
        }
        do {
            try FileManager.default.copyItem(at: file, to: destination)
        } catch {
            throw ChatError(description: "cannot write \(destination.path) (\(error.localizedDescription))")
        }
        return destination
    }

    /// A path as typed after a command: quotes around it (a path with spaces, as a shell would take it) dropped,
    /// and `~` as the home folder (`$HOME`, as a shell reads it).
    public static func typedPath(_ typed: String) -> String {
        var path = typed.trimmingCharacters(in: .whitespaces)
        for quote in ["\"", "'"] where path.count >= 2 && path.hasPrefix(quote) && path.hasSuffix(quote) {
            path = String(path.dropFirst().dropLast())
        }
        guard path == "~" || path.hasPrefix("~/") else { return path }
        let home = ProcessInfo.processInfo.environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return home + path.dropFirst()
    }

    /// `name` in `folder`, or `name (2)`, `name (3)`… before its extension, whichever does not exist yet.
    static func unused(_ name: String, in folder: URL) -> URL {
        let base = (name as NSString).deletingPathExtension
        let suffix = (name as NSString).pathExtension
        var candidate = folder.appendingPathComponent(name)
        var number = 2
        while FileManager.default.fileExists(atPath: candidate.path) {
            let numbered = "\(base) (\(number))" + (suffix.isEmpty ? "" : ".\(suffix)")
            candidate = folder.appendingPathComponent(numbered)
            number += 1
        }
        return candidate
    }

    /// The extension a file opened with `/view` gets: from its MIME type, for the kinds of media a chat shows (an
    /// image, a video, a voice clip) in common formats only, never from the sender's file name (an opener picks the
    /// program by it: `.desktop`, `.jar` or `.terminal` must never come from a peer). Nil: not to be opened.
    static func viewableExtension(for media: MediaInfo) -> String? {
        guard media.kind != .file else { return nil }
        let extensions = [
            "image/jpeg": "jpg", "image/png": "png", "image/gif": "gif", "image/webp": "webp", "image/heic": "heic",
            "video/mp4": "mp4", "video/webm": "webm", "video/quicktime": "mov", "audio/mpeg": "mp3",
            "audio/mp4": "m4a", "audio/aac": "aac", "audio/ogg": "ogg", "audio/opus": "opus", "audio/wav": "wav",
        ]
        return extensions[media.mime.lowercased()]
    }

    /// A private copy of a downloaded file to open (`courier-SHA.EXT`, one per file), in `folder` (made 0700 if
    /// missing; the chat removes it when it ends).
    static func viewable(_ file: URL, media: MediaInfo, extension suffix: String, in folder: URL) throws -> URL {
        try FileManager.default.createDirectory(
            at: folder,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
        let copy = folder.appendingPathComponent("courier-\(media.sha256.prefix(16)).\(suffix)")
        if !FileManager.default.fileExists(atPath: copy.path) {
            try FileManager.default.copyItem(at: file, to: copy)
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: copy.path)
        }
        return copy
    }
}

/// The system's way to open a file with the application the user chose for its type: `xdg-open` in a graphical
/// session, `open` on macOS.
public struct SystemOpener: Sendable {
    /// The program, as the chat names it.
    public let name: String
    let executable: URL

    /// What an opener needs here, for the chat to say when there is none.
    public static let needs = "xdg-open in a graphical session (DISPLAY or WAYLAND_DISPLAY)"

    /// The opener of this system, if it has one and a display to open on.
    public static func find(environment: [String: String] = ProcessInfo.processInfo.environment) -> SystemOpener? {
        #if os(macOS)
        return SystemOpener(name: "open", executable: URL(fileURLWithPath: "/usr/bin/open"))
        #else
        guard !(environment["DISPLAY"] ?? "").isEmpty || !(environment["WAYLAND_DISPLAY"] ?? "").isEmpty else {
            return nil
        }
        for folder in (environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let candidate = URL(fileURLWithPath: String(folder)).appendingPathComponent("xdg-open")
            if FileManager.default.isExecutableFile(atPath: candidate.path) {
                return SystemOpener(name: "xdg-open", executable: candidate)
            }
        }
        return nil
        #endif
    }

    /// Starts the opener on a file, detached from the terminal (its output goes nowhere).
    func open(_ file: URL) throws {
        let process = Process()
        process.executableURL = self.executable
        process.arguments = [file.path]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
    }
}

/// What the chat keeps between runs, in a small JSON file readable by the user alone: the conversations closed
/// with `/close` (by key, with the newest sequence number when closed).
struct ChatSettings: Sendable {
    let file: URL

    private struct Stored: Codable {
        var closed: [String: UInt64] = [:]
    }

    func closed() -> [String: UInt64] {
        guard let data = FileManager.default.contents(atPath: self.file.path),
            let stored = try? JSONDecoder().decode(Stored.self, from: data)
        else { return [:] }
        return stored.closed
    }

    func save(closed: [String: UInt64]) throws {
        let data = try JSONEncoder().encode(Stored(closed: closed))
        try data.write(to: self.file, options: .atomic)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: self.file.path)
    }
}
