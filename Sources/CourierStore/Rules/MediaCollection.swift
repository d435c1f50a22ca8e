// The rules of collecting files nothing names any more, for every database. The files themselves are the blob
// storage's (BlobStorage); MediaService runs the collection: it lists the stored files, asks which of them something
// keeps (referencedMedia), dooms each of the others (doomMedia), deletes its bytes, and forgets it
// (forgetDoomedMedia).
//
// What keeps a file: a message that carries it (a forwarded copy is a message; a recall takes its media away), a
// profile's picture or thumbnail of a user not removed, and an upload record younger than the collection's age (a
// file uploaded and not sent yet). An upload in progress is the blob storage's, and MediaService keeps its file.
//
// The races, and why each is safe:
// - A message (or a profile) naming a file commits while the file is doomed: a send or a profile names only a file
//   its user has an upload record of, read under the file's shared lock (lockMedia). Dooming takes the exclusive
//   lock, then checks again what keeps the file, then deletes the upload records, in one transaction. A send that
//   read the record first has committed before the check, which sees it; one that reads after finds no record.
// - The same bytes are uploaded again while the file is doomed or being deleted: the upload may find the file stored
//   and drop its own bytes. Its record (recordUpload) is refused with `upload-busy` while the file is doomed, and
//   MediaService checks after recording that the file is still there (it could have gone between the upload and a
//   record made after the doom was forgotten).

extension StoreBackend {
    /// Of `sha256s`, the files something keeps: a message, a profile picture of a user not removed, or an upload
    /// record made at or after `ownedSinceMs`.
    public func referencedMedia(_ sha256s: [String], ownedSinceMs: Int64) async throws -> Set<String> {
        try await self.reading(doing: "read what keeps media") { transaction in
            try await transaction.referencedMedia(sha256s, ownedSinceMs: ownedSinceMs)
        }
    }

    /// Dooms a file nothing keeps: its upload records (all older than `ownedSinceMs`) are deleted, so no one may
    /// send it, and it is recorded as being deleted, so no upload of it is recorded until
    /// ``forgetDoomedMedia(_:)``.
    ///
    /// - Returns: Whether this call doomed the file (and its caller deletes it); false when something keeps it
    ///   now, or when another collection (another node's) doomed it first: that one deletes it.
    public func doomMedia(_ sha256: String, ownedSinceMs: Int64, nowMs: Int64) async throws -> Bool {
        try await self.transaction(doing: "doom media") { transaction in
            try await transaction.lockMedia([sha256], exclusive: true)
            guard try await transaction.referencedMedia([sha256], ownedSinceMs: ownedSinceMs).isEmpty,
                try await transaction.insertDoomedMedia(sha256, nowMs: nowMs)
            else { return false }
            try await transaction.deleteMediaOwners(of: sha256)
            return true
        }
    }

    /// The files doomed before `beforeMs` and not yet forgotten: a collection that stopped part way left them (one
    /// doomed lately may be another node's, still deleting it).
    public func doomedMedia(beforeMs: Int64) async throws -> [String] {
        try await self.reading(doing: "read doomed media") { transaction in
            try await transaction.doomedMedia(beforeMs: beforeMs)
        }
    }

    /// Forgets a doomed file once its bytes are deleted: the same bytes may be uploaded again.
    public func forgetDoomedMedia(_ sha256: String) async throws {
        try await self.transaction(doing: "forget doomed media") { transaction in
            try await transaction.deleteDoomedMedia(sha256)
        }
    }
}
