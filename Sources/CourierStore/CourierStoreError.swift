internal import Foundation

/// A refused store operation, or a failure of the database underneath.
///
/// Refusals (`not-member`, `unknown-user`, …) are about the request and leave the store unchanged. `storage-failed`
/// means the database could not complete the write (disk full, I/O error): nothing of that write was committed.
public struct CourierStoreError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The message of a `token-revoked` whose user was removed (not only the device): no login can work.
    public static let accountRemovedMessage = "the account was removed"

    /// What went wrong, as a stable code (the same strings the protocol's `Error.code` uses).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Hashable, Sendable, CaseIterable {
            case invalidName = "invalid-name"
            case nameTaken = "name-taken"
            case unknownUser = "unknown-user"
            case unknownGroup = "unknown-group"
            case notMember = "not-member"
            case notOwner = "not-owner"
            case authFailed = "auth-failed"
            case tokenExpired = "token-expired"
            case tokenRevoked = "token-revoked"
            case unknownMessage = "unknown-message"
            case recallWindowPassed = "recall-window-passed"
            case ambiguousMessage = "ambiguous-message"
            case notSender = "not-sender"
            case messageRecalled = "message-recalled"
            case editWindowPassed = "edit-window-passed"
            case tooManyEdits = "too-many-edits"
            case invalidReaction = "invalid-reaction"
            case tooManyReactions = "too-many-reactions"
            case invalidRequest = "invalid-request"
            case storageFailed = "storage-failed"
            case mediaTooLarge = "media-too-large"
            case mediaMismatch = "media-mismatch"
            case unknownUpload = "unknown-upload"
            case unknownMedia = "unknown-media"
            case quotaExceeded = "quota-exceeded"
            case uploadBusy = "upload-busy"
            case throttled = "throttled"
            case notContact = "not-contact"
            case inviteInvalid = "invite-invalid"
            case inviteExpired = "invite-expired"
            case inviteUsedUp = "invite-used-up"
            case weakPassword = "weak-password"
            case wrongPassword = "wrong-password"
            case invalidProfile = "invalid-profile"
            case notAdmin = "not-admin"
        }
        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// The code its text names (``description``), if it is one.
        package init?(named name: String) {
            guard let value = Value(rawValue: name) else { return nil }
            self.value = value
        }

        /// A user or group name breaks the naming rule (``Names``).
        public static let invalidName = Code(.invalidName)
        /// A user or group of that name exists (or existed: removed users keep their names).
        public static let nameTaken = Code(.nameTaken)
        /// No such user, or the user was removed.
        public static let unknownUser = Code(.unknownUser)
        /// No such group.
        public static let unknownGroup = Code(.unknownGroup)
        /// The user is not a member of the conversation.
        public static let notMember = Code(.notMember)
        /// Only the group's owner may do that.
        public static let notOwner = Code(.notOwner)
        /// Wrong user name or password, or an unknown token.
        public static let authFailed = Code(.authFailed)
        /// The token is past its expiry.
        public static let tokenExpired = Code(.tokenExpired)
        /// The token was revoked (or its user removed).
        public static let tokenRevoked = Code(.tokenRevoked)
        /// No message with that id from that sender in that conversation.
        public static let unknownMessage = Code(.unknownMessage)
        /// The message is older than the recall window.
        public static let recallWindowPassed = Code(.recallWindowPassed)
        /// An edit, reply or reaction named a message by an id several messages the user can see carry (ids are
        /// unique per sender only): name the sender or the conversation too.
        public static let ambiguousMessage = Code(.ambiguousMessage)
        /// Only a message's sender may edit it.
        public static let notSender = Code(.notSender)
        /// The message was recalled: it cannot be edited, replied to or reacted to.
        public static let messageRecalled = Code(.messageRecalled)
        /// The message is older than the edit window.
        public static let editWindowPassed = Code(.editWindowPassed)
        /// The message was edited as many times as the store allows.
        public static let tooManyEdits = Code(.tooManyEdits)
        /// A reaction key that is neither one emoji nor one short word (``ReactionKey``).
        public static let invalidReaction = Code(.invalidReaction)
        /// The message carries as many different reactions as the store allows, or the user has put as many on it
        /// as it may.
        public static let tooManyReactions = Code(.tooManyReactions)
        /// The request is malformed (an empty member list, a negative limit, …).
        public static let invalidRequest = Code(.invalidRequest)
        /// The database failed to commit; nothing of the write was stored.
        public static let storageFailed = Code(.storageFailed)
        /// A media file's declared size is over ``BlobStore/Configuration/maxBlobBytes``.
        public static let mediaTooLarge = Code(.mediaTooLarge)
        /// A media upload's bytes do not match its declared size or SHA-256; nothing was stored.
        public static let mediaMismatch = Code(.mediaMismatch)
        /// No media upload in progress by that id.
        public static let unknownUpload = Code(.unknownUpload)
        /// No stored media with that digest.
        public static let unknownMedia = Code(.unknownMedia)
        /// The user's stored media would go over its quota.
        public static let quotaExceeded = Code(.quotaExceeded)
        /// Another stream is sending this upload now.
        public static let uploadBusy = Code(.uploadBusy)
        /// Too much work of this kind is waiting (password checks): nothing was done; retry later.
        public static let throttled = Code(.throttled)
        /// A user added to a group by someone who is not its contact (they have not both written in a direct
        /// conversation).
        public static let notContact = Code(.notContact)
        /// A sign-up named no invitation where one is needed, or one that does not exist or was revoked.
        public static let inviteInvalid = Code(.inviteInvalid)
        /// A sign-up's invitation is past its expiry.
        public static let inviteExpired = Code(.inviteExpired)
        /// A sign-up's invitation was used as many times as it allows.
        public static let inviteUsedUp = Code(.inviteUsedUp)
        /// A password a user chose is too short or too long (``StoreLimits/minPasswordCharacters``,
        /// ``StoreLimits/maxPasswordBytes``).
        public static let weakPassword = Code(.weakPassword)
        /// The user's present password, asked for to change it or to delete the account, was wrong.
        public static let wrongPassword = Code(.wrongPassword)
        /// A display name or a profile picture that breaks the rules (``StoreLimits``): too long, only invisible
        /// characters, control or bidirectional characters; a picture that is not an image of the sizes allowed.
        public static let invalidProfile = Code(.invalidProfile)
        /// Only a group's owner and admins may do that (add and remove members).
        public static let notAdmin = Code(.notAdmin)

        public var description: String { self.value.rawValue }

        /// Every code, for documentation checks.
        static var all: [Code] { Value.allCases.map(Code.init) }
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(self.code): \(self.message)" }
}

extension CourierStoreError {
    /// A `storage-failed` error in plain words for a client, from an error of the database or the file system, whose
    /// details (paths, SQL) stay in the server's log: "the server's disk is full" when it is, else that `doing`
    /// failed. A ``CourierStoreError`` passes through unchanged.
    public static func plain(_ error: any Error, doing: String) -> CourierStoreError {
        if let error = error as? CourierStoreError { return error }
        if Self.isDiskFull(error) {
            return CourierStoreError(.storageFailed, "the server's disk is full: could not \(doing); try again later")
        }
        return CourierStoreError(.storageFailed, "the server could not \(doing); try again later")
    }

    /// Whether an error says the disk is full: a database's own error that says so (``DiskFull``), or the file
    /// system's.
    private static func isDiskFull(_ error: any Error) -> Bool {
        if error is DiskFull { return true }
        let error = error as NSError
        if error.domain == NSPOSIXErrorDomain, error.code == Int(POSIXErrorCode.ENOSPC.rawValue) { return true }
        if error.domain == NSCocoaErrorDomain, error.code == CocoaError.fileWriteOutOfSpace.rawValue { return true }
        if let underlying = error.userInfo[NSUnderlyingErrorKey] as? NSError { return Self.isDiskFull(underlying) }
        return false
    }
}

/// A database's error that says its disk is full (SQLite's `SQLITE_FULL`, say), for ``CourierStoreError/plain(_:doing:)``.
package struct DiskFull: Error, CustomStringConvertible {
    package var cause: any Error

    package init(_ cause: any Error) {
        self.cause = cause
    }

    package var description: String { "\(self.cause)" }
}
