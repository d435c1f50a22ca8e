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

    /// A file name from a sender's name for it, safe as one path component here: its last component, without
    /// control characters or a leading dot, at most 200 bytes; "file" when nothing is left.
    static func safeName(_ name: String) -> String {
        let last = name.split(separator: "/").last.map(String.init) ?? ""
        var kept = String(String.UnicodeScalarView(last.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }))
        while kept.hasPrefix(".") { kept.removeFirst() }
        while kept.utf8.count > 200 { kept.removeLast() }
        return kept.trimmingCharacters(in: .whitespaces).isEmpty ? "file" : kept
    }

    /// Copies a downloaded file for the user: to `path` if given (a folder: into it under the file's name; else that
    /// file, which must not exist yet), else into `downloads`; never over an existing file (`photo (2).jpg`).
    ///
    /// - Returns: Where the copy is.
    static func save(_ file: URL, as name: String, to path: String?, downloads: URL) throws -> URL {
        let safe = Self.safeName(name)
        var destination: URL
        if let path {
            let expanded = path == "~" || path.hasPrefix("~/") ? NSHomeDirectory() + path.dropFirst() : path
            var folder: ObjCBool = false
            if FileManager.default.fileExists(atPath: expanded, isDirectory: &folder) {
                guard folder.boolValue else {
                    throw ChatError(description: "\(expanded) exists; name another file, or a folder")
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

    /// A private copy of a downloaded file under its own name (openers go by the extension), in a folder of its own
    /// in the temporary folder.
    static func viewable(_ file: URL, named name: String) throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("courier-view-\(UUID().uuidString)")
        try FileManager.default.createDirectory(
            at: folder,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
        let copy = folder.appendingPathComponent(Self.safeName(name))
        try FileManager.default.copyItem(at: file, to: copy)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: copy.path)
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
